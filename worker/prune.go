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
func (m *maintainer) prune(ctx context.Context) {
	for {
		jitter := 0.75 + rand.Float64()/2 // ±25%
		if !sleep(ctx, time.Duration(float64(m.sweepEvery)*jitter)) {
			return
		}
		m.pruneOnce(ctx)
	}
}

// pruneOnce runs the pruning now and reports how many completed jobs left
// the history and how many dead or cancelled jobs were deleted.
func (m *maintainer) pruneOnce(ctx context.Context) (history, dead int64) {
	start := time.Now()
	full, complete := true, false
	defer func() { m.prunes.done(start, complete, full) }()
	for range prunePasses {
		within := m.prunes.window(start, time.Now())
		full = full && within == 0
		n, err := m.q.PruneHistory(ctx, db.PruneHistoryParams{MaxJobs: pruneBatch, WithinMs: within.Milliseconds()})
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("pruning the history failed; retrying at the next interval", "error", err)
			}
			break
		}
		history += n
		if n < pruneBatch {
			complete = true
			break
		}
	}
	if m.deadRetention > 0 {
		dead = m.pruneDead(ctx)
	}
	m.pruneUniquePeriods(ctx)
	if history+dead > 0 {
		m.log.Info("pruned finished jobs", "history", history, "dead", dead)
	}
	return history, dead
}

// pruneUniquePeriods deletes the records of unique keys whose period
// (jobs.UniquePeriod) has ended: they hold nothing any more.
func (m *maintainer) pruneUniquePeriods(ctx context.Context) {
	for range prunePasses {
		n, err := m.q.PruneUniquePeriods(ctx, pruneBatch)
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("pruning expired unique periods failed; retrying at the next interval", "error", err)
			}
			return
		}
		if n < pruneBatch {
			return
		}
	}
}

// pruneDead deletes dead and cancelled jobs older than DeadRetention.
func (m *maintainer) pruneDead(ctx context.Context) int64 {
	before := time.Now().Add(-m.deadRetention)
	p := db.PurgeDeadParams{
		States: []string{string(jobs.StateDead), string(jobs.StateCancelled)}, Ids: []int64{},
		DiedBefore: &before, MaxJobs: pruneBatch,
	}
	var n int64
	for range prunePasses {
		ids, err := m.q.PurgeDead(ctx, p)
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("pruning dead jobs failed; retrying at the next interval", "error", err)
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

// pruneWorkers deletes, at most once per workerPruneEvery, the rows of
// workers gone for longer than workerRowsKept. Called from the sweep.
func (m *maintainer) pruneWorkers(ctx context.Context) {
	if time.Since(m.lastWorkerPrune) < workerPruneEvery {
		return
	}
	m.lastWorkerPrune = time.Now()
	n, err := m.q.PruneWorkers(ctx, db.PruneWorkersParams{GoneForMs: workerRowsKept.Milliseconds(), MaxWorkers: workerPruneBatch})
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("pruning the rows of workers gone long ago failed; retrying later", "error", err)
		}
		return
	}
	if n > 0 {
		m.log.Info("pruned the rows of workers gone long ago", "workers", n)
	}
}
