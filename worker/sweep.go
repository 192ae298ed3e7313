package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/hopperq/hopper/db"
)

// sweeper gives back expired leases (the jobs of crashed or cut-off
// workers) on the sweep interval, in bounded batches until none is left.
// Every worker runs one; SKIP LOCKED makes concurrent sweeps safe. Each pass
// remembers how far back the next one must look (horizon).
//
// Invariant: the horizon only narrows after a complete pass, and a full
// pass runs every fullScanEvery, so no expired lease waits longer than that.
type sweeper struct {
	q        *db.Queries
	log      *slog.Logger
	metrics  *metrics
	every    time.Duration // Config.SweepInterval
	batch    int           // Config.SweepBatch
	announce announceFunc
	horizon  scanHorizon
}

func newSweeper(q *db.Queries, log *slog.Logger, m *metrics, cfg *Config, announce announceFunc) *sweeper {
	return &sweeper{q: q, log: log, metrics: m, every: cfg.SweepInterval, batch: cfg.SweepBatch, announce: announce}
}

func (s *sweeper) run(ctx context.Context) {
	everyJittered(ctx, s.every, func(ctx context.Context) { s.sweepOnce(ctx) })
}

// SweepOnce runs the sweep now and reports how many expired jobs went back
// to pending and how many to the dead table.
func (w *Worker) SweepOnce(ctx context.Context) (requeued, dead int) {
	return w.sweeper.sweepOnce(ctx)
}

// sweepOnce runs the sweep now and reports how many expired jobs went back
// to pending and how many to the dead table.
func (s *sweeper) sweepOnce(ctx context.Context) (requeued, dead int) {
	start := time.Now()
	full, complete := true, false
	defer func() { s.horizon.done(start, complete, full) }()
	for ctx.Err() == nil {
		within := s.horizon.window(start, time.Now())
		full = full && within == 0
		rows, err := s.q.Sweep(ctx, db.SweepParams{MaxJobs: int32(s.batch), WithinMs: within.Milliseconds()})
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("sweep failed; retrying at the next interval", "error", err)
			}
			return requeued, dead
		}
		var wk wakeups
		for _, r := range rows {
			if r.Dead {
				dead++
				s.metrics.outcome(r.Queue, "", OutcomeDead)
			} else {
				requeued++
			}
			// A job gone dead is announced too: it freed its key's slot,
			// and jobs of the key held back behind it are ready now.
			wk.add(r.Queue, r.Priority, r.RunAt, r.ID)
		}
		s.announce(ctx, &wk, "sweep")
		if len(rows) > 0 {
			s.log.Info("swept expired leases", "requeued", requeued, "dead", dead)
		}
		if len(rows) < s.batch {
			complete = true
			break
		}
	}
	return requeued, dead
}
