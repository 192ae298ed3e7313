package hopper

import (
	"context"
	"fmt"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
)

// The limit each count of a queue depth is capped at (GetQueueDepth,
// ListQueueDepths): a count reads at most limit+1 index entries, so the
// limit, not the table, bounds what a read costs (docs/benchmarks.md).
const (
	DefaultDepthLimit = 10_000
	MaxDepthLimit     = 1_000_000
)

// QueueDepth is a queue's depth, read cheaply enough to poll several times
// a second: its ready, scheduled and running jobs, each counted up to a
// limit, and how long its oldest ready job has waited. A producer that keeps
// a queue at a target depth polls it; GetStats and ListQueues count
// everything exactly, but read whole tables.
type QueueDepth struct {
	Queue string
	// Ready: pending and due. Scheduled: due later. Running: claimed.
	// Each is exact unless its Capped flag says otherwise.
	Ready, Scheduled, Running int64
	// ReadyCapped: the queue has more ready jobs than the limit, and Ready
	// is the limit.
	ReadyCapped bool
	// ScheduledCapped (RunningCapped): more jobs than the limit are
	// scheduled (running) in all queues together, and Scheduled (Running)
	// counts the queue's among the limit+1 due first (whose lease ends
	// first) only: the queue has at least that many. The indexes of
	// scheduled and running jobs are not by queue, so these two limits
	// bound a read over all queues. Running jobs are seldom more than the
	// workers' concurrency, so Running is exact in practice.
	ScheduledCapped, RunningCapped bool
	// OldestReady is how long the oldest ready job has waited: the claim
	// lag (0 with no ready job).
	OldestReady time.Duration
}

// Capped reports whether any of the counts was capped: false means
// that Ready, Scheduled and Running are exact.
func (d QueueDepth) Capped() bool { return d.ReadyCapped || d.ScheduledCapped || d.RunningCapped }

// GetQueueDepth reads one queue's depth, each count up to limit (0:
// DefaultDepthLimit; at most MaxDepthLimit). Its cost grows with limit and
// not with the table: it reads at most limit+1 entries of each of three
// indexes, whether the queue holds ten thousand jobs or ten million. A
// queue Hopper does not know has
// a depth of zero, not an error: a producer may poll before its first
// enqueue. Errors wrap jobs.ErrInvalidQueue (an empty or invalid name) or
// ErrInvalidFilter (a limit out of range).
func (c *Client) GetQueueDepth(ctx context.Context, queue string, limit int) (QueueDepth, error) {
	return c.GetQueueDepthTx(ctx, c.db, queue, limit)
}

// GetQueueDepthTx is GetQueueDepth on the caller's transaction.
func (c *Client) GetQueueDepthTx(ctx context.Context, tx jobs.DBTX, queue string, limit int) (QueueDepth, error) {
	if err := jobs.ValidateQueue(queue); err != nil {
		return QueueDepth{}, fmt.Errorf("queue depth: %w", err)
	}
	ds, err := c.queueDepths(ctx, tx, []string{queue}, limit)
	if err != nil {
		return QueueDepth{}, fmt.Errorf("queue depth %s: %w", queue, err)
	}
	if len(ds) != 1 {
		return QueueDepth{}, fmt.Errorf("queue depth %s: %d rows for one queue", queue, len(ds))
	}
	return ds[0], nil
}

// ListQueueDepths reads the depth of every queue Hopper knows of (served
// by a worker now or before, paused, or with pending jobs; and the queues
// of the scheduled and running jobs read), by name, each count up to limit
// (0: DefaultDepthLimit; at most MaxDepthLimit). It costs GetQueueDepth's
// per queue. Errors wrap ErrInvalidFilter (a limit out of range).
func (c *Client) ListQueueDepths(ctx context.Context, limit int) ([]QueueDepth, error) {
	return c.ListQueueDepthsTx(ctx, c.db, limit)
}

// ListQueueDepthsTx is ListQueueDepths on the caller's transaction.
func (c *Client) ListQueueDepthsTx(ctx context.Context, tx jobs.DBTX, limit int) ([]QueueDepth, error) {
	ds, err := c.queueDepths(ctx, tx, []string{}, limit)
	if err != nil {
		return nil, fmt.Errorf("queue depths: %w", err)
	}
	return ds, nil
}

// queueDepths runs QueueDepths for queues (empty: every queue known).
func (c *Client) queueDepths(ctx context.Context, tx jobs.DBTX, queues []string, limit int) ([]QueueDepth, error) {
	if limit == 0 {
		limit = DefaultDepthLimit
	}
	if limit < 1 || limit > MaxDepthLimit {
		return nil, fmt.Errorf("%w: limit %d is outside 1 to %d", ErrInvalidFilter, limit, MaxDepthLimit)
	}
	rows, err := c.queries(tx).QueueDepths(ctx, db.QueueDepthsParams{Queues: queues, ScanLimit: int32(limit) + 1})
	if err != nil {
		return nil, err
	}
	out := make([]QueueDepth, len(rows))
	for i, r := range rows {
		out[i] = depthOf(r, int64(limit))
	}
	return out, nil
}

// depthOf turns a row read with a scan limit of limit+1 into a
// QueueDepth: a count that read limit+1 entries is capped at limit.
func depthOf(r db.QueueDepthsRow, limit int64) QueueDepth {
	return QueueDepth{
		Queue:           r.Queue,
		Ready:           min(r.Ready, limit),
		Scheduled:       min(r.Scheduled, limit),
		Running:         min(r.Running, limit),
		ReadyCapped:     r.Ready > limit,
		ScheduledCapped: r.ScheduledScanned > limit,
		RunningCapped:   r.RunningScanned > limit,
		OldestReady:     time.Duration(r.OldestReadySeconds * float64(time.Second)),
	}
}
