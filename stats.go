package hopper

import (
	"context"
	"fmt"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
)

// Counts are the jobs of a queue and kind (or of a whole queue, or of
// everything) by state.
type Counts struct {
	// Ready: pending and due. Scheduled: due later. Running: claimed.
	// Waiting: behind the head of their sequence, for their turn.
	Ready, Scheduled, Running, Waiting int64
	// Dead and Cancelled: in the dead table, by how they ended.
	Dead, Cancelled int64
	// Failing: live jobs that have failed at least once (waiting to retry
	// or running again).
	Failing int64
	// OldestReady is how long the oldest ready job has waited: the claim
	// lag.
	OldestReady time.Duration
}

// Live is the number of live jobs: ready, scheduled, running and waiting.
func (c Counts) Live() int64 { return c.Ready + c.Scheduled + c.Running + c.Waiting }

// RetryRate is the share of live jobs that have failed at least once.
func (c Counts) RetryRate() float64 {
	if c.Live() == 0 {
		return 0
	}
	return float64(c.Failing) / float64(c.Live())
}

// Add adds o's counts to c's, and keeps the longer of the two claim lags:
// how Stats' Total and Queues' per-queue counts are made from rows.
func (c *Counts) Add(o Counts) {
	c.Ready += o.Ready
	c.Scheduled += o.Scheduled
	c.Running += o.Running
	c.Waiting += o.Waiting
	c.Dead += o.Dead
	c.Cancelled += o.Cancelled
	c.Failing += o.Failing
	c.OldestReady = max(c.OldestReady, o.OldestReady)
}

// StatsRow is one queue and kind.
type StatsRow struct {
	Queue  string
	Kind   string
	Paused bool // the queue is paused
	Counts
}

// Stats is the queue at one moment, by queue and kind.
type Stats struct {
	// At is when the stats were read (this process's clock).
	At time.Time
	// Rows, by queue then kind.
	Rows []StatsRow
	// Total adds up every row (OldestReady is the longest wait of all).
	Total Counts
	// Enqueued and Finished count the jobs ever inserted into and removed
	// from the live table, from PostgreSQL's statistics (updated about once
	// a second, reset with them): two readings over their interval are the
	// enqueue and finish rates.
	Enqueued, Finished int64
}

// Rates are the enqueue and finish rates, per second, between an earlier
// reading and this one (0 when the earlier one is not earlier).
func (s Stats) Rates(earlier Stats) (enqueued, finished float64) {
	secs := s.At.Sub(earlier.At).Seconds()
	if secs <= 0 {
		return 0, 0
	}
	return float64(s.Enqueued-earlier.Enqueued) / secs, float64(s.Finished-earlier.Finished) / secs
}

// GetStats counts jobs per queue and kind. It reads the live table and the
// dead table whole: fine every few seconds, not in a hot loop.
func (c *Client) GetStats(ctx context.Context) (Stats, error) {
	return c.GetStatsTx(ctx, c.db)
}

// GetStatsTx is GetStats on the caller's transaction.
func (c *Client) GetStatsTx(ctx context.Context, tx jobs.DBTX) (Stats, error) {
	found, err := c.queries(tx).Stats(ctx)
	if err != nil {
		return Stats{}, fmt.Errorf("stats: %w", err)
	}
	activity, err := c.activity(ctx, tx)
	if err != nil {
		return Stats{}, fmt.Errorf("stats: %w", err)
	}
	s := Stats{At: activity.At, Rows: make([]StatsRow, len(found)), Enqueued: activity.Enqueued, Finished: activity.Finished}
	for i, r := range found {
		s.Rows[i] = StatsRow{Queue: r.Queue, Kind: r.Kind, Paused: r.Paused, Counts: countsOf(r)}
		s.Total.Add(s.Rows[i].Counts)
	}
	return s, nil
}

func countsOf(r db.StatsRow) Counts {
	return Counts{
		Ready: r.Ready, Scheduled: r.Scheduled, Running: r.Running, Waiting: r.Waiting, Dead: r.Dead, Cancelled: r.Cancelled,
		Failing: r.Failing, OldestReady: time.Duration(r.OldestReadySeconds * float64(time.Second)),
	}
}
