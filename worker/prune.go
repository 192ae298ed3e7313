package worker

import (
	"context"
	"log/slog"
	"sort"
	"time"

	"github.com/hopperq/hopper/db"
)

// pruneBatch bounds one pruning statement; prunePasses bounds the batches
// of one pass, so a worker that finds a large backlog to delete leaves the
// rest to its next pass (and to the other workers).
const (
	pruneBatch  = 1000
	prunePasses = 100
)

// pruner deletes what has expired, on the sweep interval: the history
// past its keep, with DeadRetention old dead and cancelled jobs of its
// own queues, unique
// periods that ended, and (at most once per workerPruneEvery) the rows of
// workers gone long ago. Every worker runs one; SKIP LOCKED makes that
// safe, as for the sweep. Its horizon bounds the history's scan as the
// sweeper's bounds the leases'.
type pruner struct {
	q             *db.Queries
	log           *slog.Logger
	every         time.Duration // Config.SweepInterval
	deadRetention time.Duration // Config.DeadRetention; 0: dead jobs are kept
	// queues are the queues this worker serves (Config.Queues), sorted:
	// the dead jobs it prunes are theirs only, so that another
	// application's, in its own queues, are kept as long as its workers
	// say.
	queues []string
	// eventRetention: Config.EventRetention
	eventRetention time.Duration
	horizon        scanHorizon
	// lastWorkerPrune: when the rows of workers gone long ago were last
	// pruned (pruneWorkers; the pruner's goroutine only).
	lastWorkerPrune time.Time
	// partitionWidth: Config.HistoryPartitionWidth (negative: none made).
	partitionWidth time.Duration
	// longestKeep is the longest a job this worker acknowledges is kept
	// (handlerTable.longestKeep): how far ahead partitions must reach.
	longestKeep func() time.Duration
}

func newPruner(q *db.Queries, log *slog.Logger, cfg *Config, longestKeep func() time.Duration) *pruner {
	queues := make([]string, 0, len(cfg.Queues))
	for name := range cfg.Queues {
		queues = append(queues, name)
	}
	sort.Strings(queues)
	return &pruner{q: q, log: log, every: cfg.SweepInterval, deadRetention: cfg.DeadRetention, queues: queues,
		eventRetention: cfg.EventRetention, partitionWidth: cfg.HistoryPartitionWidth, longestKeep: longestKeep}
}

func (m *pruner) run(ctx context.Context) {
	everyJittered(ctx, m.every, func(ctx context.Context) {
		m.pruneOnce(ctx)
		m.pruneWorkers(ctx)
	})
}

// PruneOnce runs the pruning now and reports how many completed jobs left
// the history and how many dead or cancelled jobs were deleted row by row;
// the jobs of a time partition dropped whole are not counted.
func (w *Worker) PruneOnce(ctx context.Context) (history, dead int64) {
	return w.pruner.pruneOnce(ctx)
}

// pruneOnce runs the pruning now and reports how many completed jobs left
// the history and how many dead or cancelled jobs were deleted.
func (m *pruner) pruneOnce(ctx context.Context) (history, dead int64) {
	m.partitions(ctx)
	start := time.Now()
	full, complete := true, false
	defer func() { m.horizon.done(start, complete, full) }()
	for range prunePasses {
		within := m.horizon.window(start, time.Now())
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
	m.pruneEvents(ctx)
	if history+dead > 0 {
		m.log.Info("pruned finished jobs", "history", history, "dead", dead)
	}
	return history, dead
}

// pruneUniquePeriods deletes the records of unique keys whose period
// (jobs.UniquePeriod) has ended: they hold nothing any more.
func (m *pruner) pruneUniquePeriods(ctx context.Context) {
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

// pruneEvents deletes events emitted longer ago than EventRetention, and
// the marks of waiting jobs (hopper_events) once they no longer matter.
func (m *pruner) pruneEvents(ctx context.Context) {
	for range prunePasses {
		n, err := m.q.PruneEvents(ctx, db.PruneEventsParams{KeepMs: m.eventRetention.Milliseconds(), MaxEvents: pruneBatch})
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("pruning old events failed; retrying at the next interval", "error", err)
			}
			return
		}
		if n < pruneBatch {
			return
		}
	}
}

// pruneDead deletes the dead and cancelled jobs of this worker's queues
// older than DeadRetention from the dead jobs' default partition, and
// from the expired partitions another queue's jobs keep from being
// dropped; the others go whole (deadPartitions).
func (m *pruner) pruneDead(ctx context.Context) int64 {
	var n int64
	for range prunePasses {
		deleted, err := m.q.PruneDead(ctx, db.PruneDeadParams{RetentionMs: m.deadRetention.Milliseconds(), Queues: m.queues, MaxJobs: pruneBatch})
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("pruning dead jobs failed; retrying at the next interval", "error", err)
			}
			break
		}
		n += deleted
		if deleted < pruneBatch {
			break
		}
	}
	return n
}

// pruneWorkers deletes, at most once per workerPruneEvery, the rows of
// workers gone for longer than workerRowsKept.
func (m *pruner) pruneWorkers(ctx context.Context) {
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
