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
func (m *maintainer) sweep(ctx context.Context) {
	for {
		jitter := 0.75 + rand.Float64()/2 // ±25%
		if !sleep(ctx, time.Duration(float64(m.sweepEvery)*jitter)) {
			return
		}
		m.sweepOnce(ctx)
		m.pruneWorkers(ctx)
	}
}

// sweepOnce runs the sweep now and reports how many expired jobs went back
// to pending and how many to the dead table.
func (m *maintainer) sweepOnce(ctx context.Context) (requeued, dead int) {
	start := time.Now()
	full, complete := true, false
	defer func() { m.sweeps.done(start, complete, full) }()
	for ctx.Err() == nil {
		within := m.sweeps.window(start, time.Now())
		full = full && within == 0
		rows, err := m.q.Sweep(ctx, db.SweepParams{MaxJobs: int32(m.sweepBatch), WithinMs: within.Milliseconds()})
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("sweep failed; retrying at the next interval", "error", err)
			}
			return requeued, dead
		}
		var wk wakeups
		for _, r := range rows {
			if r.Dead {
				dead++
				m.metrics.outcome(r.Queue, "", OutcomeDead)
			} else {
				requeued++
			}
			// A job gone dead is announced too: it freed its key's slot,
			// and jobs of the key held back behind it are ready now.
			wk.add(r.Queue, r.Priority, r.RunAt, r.ID)
		}
		m.announce(ctx, &wk, "sweep")
		if len(rows) > 0 {
			m.log.Info("swept expired leases", "requeued", requeued, "dead", dead)
		}
		if len(rows) < m.sweepBatch {
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
func (m *maintainer) promote(ctx context.Context) {
	for {
		jitter := 0.75 + rand.Float64()/2
		if !sleep(ctx, time.Duration(float64(m.pollEvery)*jitter)) {
			return
		}
		m.promoteOnce(ctx)
	}
}

// promoteOnce promotes every scheduled job that is due now and reports how
// many it promoted.
func (m *maintainer) promoteOnce(ctx context.Context) int {
	total := 0
	start := time.Now()
	full, complete := true, false
	defer func() { m.promotions.done(start, complete, full) }()
	for ctx.Err() == nil {
		within := m.promotions.window(start, time.Now())
		full = full && within == 0
		rows, err := m.q.Promote(ctx, db.PromoteParams{MaxJobs: promoteBatch, WithinMs: within.Milliseconds()})
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("promoting scheduled jobs failed; retrying at the next poll", "error", err)
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
		m.announce(ctx, &wk, "promotion")
		if n < promoteBatch {
			complete = true
			break
		}
	}
	return total
}
