package worker

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
)

// pruneBatch bounds one pruning statement; prunePasses bounds the batches
// of one pass, so a worker that finds a large backlog to delete leaves the
// rest to its next pass (and to the other workers).
const (
	pruneBatch  = 1000
	prunePasses = 100
)

// prune deletes expired history and, with DeadRetention, old dead and
// cancelled jobs, on the sweep interval (jittered). Every worker runs it;
// SKIP LOCKED makes that safe, as for the sweep.
func (w *Worker) prune(ctx context.Context) {
	for {
		jitter := 0.75 + rand.Float64()/2 // ±25%
		if !sleep(ctx, time.Duration(float64(w.cfg.SweepInterval)*jitter)) {
			return
		}
		w.PruneOnce(ctx)
	}
}

// PruneOnce runs the pruning now and reports how many completed jobs left
// the history and how many dead or cancelled jobs were deleted.
func (w *Worker) PruneOnce(ctx context.Context) (history, dead int64) {
	start := time.Now()
	full, complete := true, false
	defer func() { w.prunes.done(start, complete, full) }()
	for range prunePasses {
		within := w.prunes.window(start, time.Now())
		full = full && within == 0
		n, err := w.q.PruneHistory(ctx, db.PruneHistoryParams{MaxJobs: pruneBatch, WithinMs: within.Milliseconds()})
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("pruning the history failed; retrying at the next interval", "error", err)
			}
			break
		}
		history += n
		if n < pruneBatch {
			complete = true
			break
		}
	}
	if w.cfg.DeadRetention > 0 {
		dead = w.pruneDead(ctx)
	}
	if history+dead > 0 {
		w.log.Info("pruned finished jobs", "history", history, "dead", dead)
	}
	return history, dead
}

// pruneDead deletes dead and cancelled jobs older than DeadRetention.
func (w *Worker) pruneDead(ctx context.Context) int64 {
	before := time.Now().Add(-w.cfg.DeadRetention)
	p := db.PurgeDeadParams{
		States: []string{string(jobs.StateDead), string(jobs.StateCancelled)}, Ids: []int64{},
		DiedBefore: &before, MaxJobs: pruneBatch,
	}
	var n int64
	for range prunePasses {
		ids, err := w.q.PurgeDead(ctx, p)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("pruning dead jobs failed; retrying at the next interval", "error", err)
			}
			break
		}
		n += int64(len(ids))
		if len(ids) < pruneBatch {
			break
		}
		p.AfterID = slices.Max(ids)
	}
	return n
}
