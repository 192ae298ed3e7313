package worker

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/hopperq/hopper/db"
)

// sweep reclaims expired leases (jobs of crashed workers) on a jittered
// interval, in bounded batches until none is left, and now and then prunes
// the rows of workers gone long ago. Every worker runs it; SKIP LOCKED
// makes concurrent sweeps safe.
func (w *Worker) sweep(ctx context.Context) {
	for {
		jitter := 0.75 + rand.Float64()/2 // ±25%
		if !sleep(ctx, time.Duration(float64(w.cfg.SweepInterval)*jitter)) {
			return
		}
		w.SweepOnce(ctx)
		w.pruneWorkers(ctx)
	}
}

// SweepOnce runs the sweep now and reports how many expired jobs went back
// to pending and how many to the dead table.
func (w *Worker) SweepOnce(ctx context.Context) (requeued, dead int) {
	start := time.Now()
	full, complete := true, false
	defer func() { w.sweeps.done(start, complete, full) }()
	for ctx.Err() == nil {
		within := w.sweeps.window(start, time.Now())
		full = full && within == 0
		rows, err := w.q.Sweep(ctx, db.SweepParams{MaxJobs: int32(w.cfg.SweepBatch), WithinMs: within.Milliseconds()})
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("sweep failed; retrying at the next interval", "error", err)
			}
			return requeued, dead
		}
		var wk wakeups
		for _, r := range rows {
			if r.Dead {
				dead++
				w.metrics.outcome(r.Queue, "", OutcomeDead)
			} else {
				requeued++
			}
			// A job gone dead is announced too: it freed its key's slot,
			// and jobs of the key held back behind it are ready now.
			wk.add(r.Queue, r.Priority, r.RunAt, r.ID)
		}
		w.notifier.announce(ctx, &wk, "sweep")
		if len(rows) > 0 {
			w.log.Info("swept expired leases", "requeued", requeued, "dead", dead)
		}
		if len(rows) < w.cfg.SweepBatch {
			complete = true
			break
		}
	}
	return requeued, dead
}

// promoteBatch bounds one Promote statement.
const promoteBatch = 1000

// promote makes scheduled jobs that have fallen due pending, on the poll
// interval (jittered), and wakes their queues. Every worker runs it; SKIP
// LOCKED makes concurrent promotions safe. A scheduled job therefore starts
// within about one poll interval of its run_at.
func (w *Worker) promote(ctx context.Context) {
	for {
		jitter := 0.75 + rand.Float64()/2
		if !sleep(ctx, time.Duration(float64(w.cfg.PollInterval)*jitter)) {
			return
		}
		w.PromoteOnce(ctx)
	}
}

// PromoteOnce promotes every scheduled job that is due now and reports how
// many it promoted.
func (w *Worker) PromoteOnce(ctx context.Context) int {
	total := 0
	start := time.Now()
	full, complete := true, false
	defer func() { w.promotions.done(start, complete, full) }()
	for ctx.Err() == nil {
		within := w.promotions.window(start, time.Now())
		full = full && within == 0
		rows, err := w.q.Promote(ctx, db.PromoteParams{MaxJobs: promoteBatch, WithinMs: within.Milliseconds()})
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("promoting scheduled jobs failed; retrying at the next poll", "error", err)
			}
			return total
		}
		n := 0
		var wk wakeups
		for _, r := range rows {
			n += int(r.Promoted)
			wk.add(r.Queue, r.Priority, r.RunAt, r.ID)
		}
		total += n
		w.notifier.announce(ctx, &wk, "promotion")
		if n < promoteBatch {
			complete = true
			break
		}
	}
	return total
}
