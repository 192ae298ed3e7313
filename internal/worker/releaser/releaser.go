// Package releaser hands back the jobs of workers gone without a clean
// stop, before their leases expire.
package releaser

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/worker/announce"
)

// The reasons recorded in a job's errors when its worker's jobs are handed
// back before its lease expired: the attempt counts, as for an expired
// lease (the handler ran, and may have crashed its worker).
const (
	ReasonGone      = "worker gone"
	ReasonRestarted = "worker restarted"
)

// Metrics counts what a release did to the jobs.
type Metrics interface {
	// JobDead counts a job of queue that went dead: it had no attempt
	// left.
	JobDead(queue string)
	// JobReleased counts a job of queue handed back for reason.
	JobReleased(queue, reason string)
}

// Config is what a Releaser works with.
type Config struct {
	Queries *db.Queries
	// Log is the worker's logger: a failed release warns on it with the
	// error as "error".
	Log      *slog.Logger
	Metrics  Metrics
	Batch    int           // the worker's SweepBatch: jobs per statement
	Announce announce.Func // sends the wake-ups of the jobs handed back
}

func (c *Config) validate() error {
	switch {
	case c.Queries == nil, c.Log == nil, c.Metrics == nil, c.Announce == nil:
		return errors.New("releaser: Queries, Log, Metrics and Announce are required")
	case c.Batch <= 0:
		return fmt.Errorf("releaser: Batch (%d) must be positive", c.Batch)
	}
	return nil
}

// Releaser hands back the jobs of workers gone without a clean stop: on
// the heartbeat's word that such a worker exists (ReleaseGone), and at
// start, the jobs of an earlier run of this worker's own ID
// (ReleaseJobsOf).
type Releaser struct {
	cfg Config
}

// New returns a Releaser working with cfg.
func New(cfg Config) (*Releaser, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Releaser{cfg: cfg}, nil
}

// ReleaseGone hands back the jobs of every worker gone (no beat within its
// stale window) and not yet released, whose stale window this worker has
// been live for (liveFor): the heartbeat runs it when its beat says such a
// worker exists. Any live worker may; the workers' rows are locked SKIP
// LOCKED, so each gone worker is released by one of them.
func (r *Releaser) ReleaseGone(ctx context.Context, liveFor time.Duration) {
	ms := liveFor.Milliseconds()
	gone, err := r.ReleaseJobsOf(ctx, db.ReleaseWorkerJobsParams{LiveForMs: &ms, Reason: ReasonGone})
	if err != nil && ctx.Err() == nil {
		r.cfg.Log.Warn("handing back the jobs of gone workers failed; retrying at the next beat", "error", err)
	}
	for _, g := range gone {
		r.cfg.Log.Warn("handed back the jobs of a gone worker", "gone_worker", g.ID, "gone_host", g.Host, "gone_pid", g.PID,
			"jobs", g.Requeued+g.Dead, "requeued", g.Requeued, "dead", g.Dead)
	}
}

// Gone tallies the jobs handed back of one gone worker.
type Gone struct {
	ID, Host       string
	PID            int32
	Requeued, Dead int
}

// ReleaseJobsOf hands back, in bounded batches, the running jobs of the
// worker p.WorkerID (nil: of every gone worker not yet released whose
// stale window p.LiveForMs covers), whatever its state when p.Force is
// set, recording p.Reason; it wakes their queues. p.HolderStartedAt names
// this worker's own row, which is not marked released. It returns, for
// each worker whose jobs it handed back, in the order met, how many.
func (r *Releaser) ReleaseJobsOf(ctx context.Context, p db.ReleaseWorkerJobsParams) ([]*Gone, error) {
	p.MaxJobs = int32(r.cfg.Batch)
	var gone []*Gone
	byID := map[string]*Gone{}
	for {
		rows, err := r.cfg.Queries.ReleaseWorkerJobs(ctx, p)
		if err != nil {
			return gone, fmt.Errorf("worker: hand back the jobs of gone workers: %w", err)
		}
		var wk announce.Set
		for _, row := range rows {
			g := byID[row.Owner]
			if g == nil {
				g = &Gone{ID: row.Owner, Host: row.OwnerHost, PID: row.OwnerPid}
				byID[row.Owner] = g
				gone = append(gone, g)
			}
			if row.Dead {
				g.Dead++
				r.cfg.Metrics.JobDead(row.Queue)
			} else {
				g.Requeued++
			}
			r.cfg.Metrics.JobReleased(row.Queue, p.Reason)
			wk.Add(row.Queue, row.Priority, row.RunAt, row.ID)
		}
		r.cfg.Announce(ctx, &wk, "release")
		if len(rows) < r.cfg.Batch {
			return gone, nil
		}
	}
}
