package hopper

import (
	"context"
	"fmt"
	"time"

	"github.com/hopperq/hopper/jobs"
)

// QueueInfo is one queue: whether it is paused, how many live workers
// serve it, and its jobs by state. A queue's jobs run only while it is not
// paused and Workers is above zero.
type QueueInfo struct {
	Name string
	// PausedAt is when an operator paused the queue (PauseQueue); nil when
	// it is not paused.
	PausedAt *time.Time
	// Workers is how many live workers serve the queue: running
	// worker.Workers whose Config.Queues name it and that have handlers (a
	// worker that only fires schedules claims nothing). A worker counts
	// from its start until its clean stop; one that ends otherwise
	// (killed, cut off from the database) counts until it has missed three
	// beats (worker.Config.BeatInterval, 1s by default: 3s
	// after its last). 0 means no
	// running worker claims the queue's jobs: they wait, paused or not,
	// until one starts.
	Workers int
	Counts
}

// Paused reports whether an operator paused the queue: no worker claims
// its jobs until it is resumed. Not paused does not mean that its jobs
// run: that takes a live worker serving the queue (Workers above zero).
func (q QueueInfo) Paused() bool { return q.PausedAt != nil }

// ListQueues lists every queue Hopper knows of (served by a worker now or
// before, paused, or holding jobs), by name, with the live workers serving
// each.
func (c *Client) ListQueues(ctx context.Context) ([]QueueInfo, error) {
	return c.ListQueuesTx(ctx, c.db)
}

// ListQueuesTx is ListQueues on the caller's transaction.
func (c *Client) ListQueuesTx(ctx context.Context, tx jobs.DBTX) ([]QueueInfo, error) {
	names, err := c.queries(tx).ListQueues(ctx)
	if err != nil {
		return nil, fmt.Errorf("queues: %w", err)
	}
	stats, err := c.GetStatsTx(ctx, tx)
	if err != nil {
		return nil, err
	}
	out := make([]QueueInfo, len(names))
	at := map[string]int{}
	for i, n := range names {
		out[i] = QueueInfo{Name: n.Name, PausedAt: n.PausedAt, Workers: int(n.Workers)}
		at[n.Name] = i
	}
	for _, r := range stats.Rows {
		if i, ok := at[r.Queue]; ok {
			out[i].Counts.Add(r.Counts)
		}
	}
	return out, nil
}

// PauseResult tells what a pause or a resume did, for queues and schedules
// alike.
type PauseResult struct {
	// Changed reports whether the call changed anything: false for a pause
	// of what was paused already, or a resume of what was not paused.
	Changed bool
	// PausedAt is when the queue or schedule was paused: for a pause, now
	// or the time of the first pause; for a resume, when it had been paused
	// (zero if it was not).
	PausedAt time.Time
}

// PauseQueue pauses a queue: from the moment it commits no worker process
// claims its jobs (the claim statement itself checks), whatever worker
// starts later; jobs running already finish, and enqueueing goes on.
// Pausing a paused queue is not an error. Errors wrap jobs.ErrInvalidQueue
// or ErrUnknownQueue.
func (c *Client) PauseQueue(ctx context.Context, name string) (PauseResult, error) {
	return c.PauseQueueTx(ctx, c.db, name)
}

// PauseQueueTx is PauseQueue on the caller's transaction.
func (c *Client) PauseQueueTx(ctx context.Context, tx jobs.DBTX, name string) (PauseResult, error) {
	if err := c.knownQueue(ctx, tx, name); err != nil {
		return PauseResult{}, fmt.Errorf("pause queue: %w", err)
	}
	r, err := c.queries(tx).PauseQueue(ctx, name)
	if err != nil {
		return PauseResult{}, fmt.Errorf("pause queue %s: %w", name, err)
	}
	return PauseResult{Changed: !r.WasPaused, PausedAt: r.PausedAt}, nil
}

// ResumeQueue resumes a paused queue and wakes its workers at once.
// Resuming a queue that is not paused is not an error: the result's Changed
// is false. Errors wrap jobs.ErrInvalidQueue or ErrUnknownQueue.
func (c *Client) ResumeQueue(ctx context.Context, name string) (PauseResult, error) {
	return c.ResumeQueueTx(ctx, c.db, name)
}

// ResumeQueueTx is ResumeQueue on the caller's transaction: the queue
// resumes, and its workers wake, when it commits.
func (c *Client) ResumeQueueTx(ctx context.Context, tx jobs.DBTX, name string) (PauseResult, error) {
	if err := c.knownQueue(ctx, tx, name); err != nil {
		return PauseResult{}, fmt.Errorf("resume queue: %w", err)
	}
	r, err := c.queries(tx).ResumeQueue(ctx, name)
	if isNoRows(err) { // known by its jobs only, so never paused
		return PauseResult{}, nil
	}
	if err != nil {
		return PauseResult{}, fmt.Errorf("resume queue %s: %w", name, err)
	}
	return resumed(r.WasPaused, r.PausedAt), nil
}

// resumed is the PauseResult of a resume.
func resumed(wasPaused bool, pausedAt *time.Time) PauseResult {
	r := PauseResult{Changed: wasPaused}
	if pausedAt != nil {
		r.PausedAt = *pausedAt
	}
	return r
}

// PurgeQueue deletes every pending and scheduled job of a queue, without
// a trace, and returns how many; running jobs finish. Errors wrap
// jobs.ErrInvalidQueue or ErrUnknownQueue.
func (c *Client) PurgeQueue(ctx context.Context, name string) (int64, error) {
	return c.PurgeQueueTx(ctx, c.db, name)
}

// PurgeQueueTx is PurgeQueue on the caller's transaction.
func (c *Client) PurgeQueueTx(ctx context.Context, tx jobs.DBTX, name string) (int64, error) {
	if err := c.knownQueue(ctx, tx, name); err != nil {
		return 0, fmt.Errorf("purge queue: %w", err)
	}
	n, err := c.queries(tx).PurgeQueue(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("purge queue %s: %w", name, err)
	}
	return n, nil
}

// knownQueue checks a queue name: valid, and known to Hopper. A queue
// known by its jobs alone is recorded in hopper_queues, so that it stays
// known once an operator has named it, even when its jobs are gone.
func (c *Client) knownQueue(ctx context.Context, tx jobs.DBTX, name string) error {
	if err := jobs.ValidateQueue(name); err != nil {
		return err
	}
	known, err := c.queries(tx).QueueKnown(ctx, name)
	if err != nil {
		return fmt.Errorf("queue %s: %w", name, err)
	}
	if !known {
		return fmt.Errorf("%w %q: no worker serves it and it has no jobs", ErrUnknownQueue, name)
	}
	if err := c.queries(tx).RegisterQueues(ctx, []string{name}); err != nil {
		return fmt.Errorf("queue %s: %w", name, err)
	}
	return nil
}
