// Package pruner deletes what has expired: the history past its keep,
// dead and cancelled jobs past their retention, unique periods that
// ended, old events, the rows of workers gone long ago, and the time
// partitions of the history and of the dead jobs.
package pruner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/worker/horizon"
	"github.com/hopperq/hopper/internal/worker/loop"
)

// batch bounds one pruning statement; passes bounds the batches of one
// pass, so a worker that finds a large backlog to delete leaves the rest
// to its next pass (and to the other workers).
const (
	batch  = 1000
	passes = 100
)

// The rows of workers gone without a clean stop (hopper_workers).
const (
	// workerRowsKept is how long such a row is kept, past its stale
	// window, before a prune deletes it.
	workerRowsKept = 24 * time.Hour
	// workerPruneEvery spaces the prunes of one worker: rows to prune are
	// rare (crashed workers), so a pass looks for them at most this often.
	workerPruneEvery = time.Minute
	// workerPruneBatch bounds one PruneWorkers statement.
	workerPruneBatch = 1000
)

// Config is what a Pruner works with.
type Config struct {
	Queries *db.Queries
	// Log is the worker's logger: a failed statement warns on it with the
	// error as "error".
	Log   *slog.Logger
	Every time.Duration // the worker's SweepInterval
	// Queues are the queues this worker serves: the dead jobs it prunes
	// are theirs only, so that another application's, in its own queues,
	// are kept as long as its workers say.
	Queues []string
	// DeadRetention is how long a dead or cancelled job is kept; 0: kept
	// for good.
	DeadRetention time.Duration
	// EventRetention is how long an emitted event is kept.
	EventRetention time.Duration
	// PartitionWidth is the width of the history's time partitions;
	// negative: none made.
	PartitionWidth time.Duration
	// LongestKeep is the longest a job this worker acknowledges is kept:
	// how far ahead the history's partitions must reach.
	LongestKeep func() time.Duration
}

func (c *Config) validate() error {
	switch {
	case c.Queries == nil, c.Log == nil, c.LongestKeep == nil:
		return errors.New("pruner: Queries, Log and LongestKeep are required")
	case c.Every <= 0:
		return fmt.Errorf("pruner: Every (%v) must be positive", c.Every)
	case c.DeadRetention < 0 || c.EventRetention < 0:
		return fmt.Errorf("pruner: DeadRetention (%v) and EventRetention (%v) must not be negative", c.DeadRetention, c.EventRetention)
	}
	return nil
}

// Pruner deletes what has expired, on the sweep interval: the history
// past its keep, with DeadRetention old dead and cancelled jobs of its own
// queues, unique periods that ended, and (at most once per
// workerPruneEvery) the rows of workers gone long ago. Every worker runs
// one; SKIP LOCKED makes that safe, as for the sweep. Its horizon bounds
// the history's scan as the sweeper's bounds the leases'.
type Pruner struct {
	cfg     Config
	queues  []string // cfg.Queues, sorted
	horizon horizon.Horizon
	// lastWorkerPrune: when the rows of workers gone long ago were last
	// pruned (pruneWorkers; the pruner's goroutine only).
	lastWorkerPrune time.Time
}

// New returns a Pruner working with cfg.
func New(cfg Config) (*Pruner, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	queues := slices.Clone(cfg.Queues)
	slices.Sort(queues)
	return &Pruner{cfg: cfg, queues: queues}, nil
}

// Run prunes on the interval until ctx ends.
func (p *Pruner) Run(ctx context.Context) {
	loop.Every(ctx, p.cfg.Every, func(ctx context.Context) {
		p.PruneOnce(ctx)
		p.pruneWorkers(ctx)
	})
}

// PruneOnce runs the pruning now and reports how many completed jobs left
// the history and how many dead or cancelled jobs were deleted row by row;
// the jobs of a time partition dropped whole are not counted.
func (p *Pruner) PruneOnce(ctx context.Context) (history, dead int64) {
	p.partitions(ctx)
	start := time.Now()
	full, complete := true, false
	defer func() { p.horizon.Done(start, complete, full) }()
	for range passes {
		within := p.horizon.Window(start, time.Now())
		full = full && within == 0
		n, err := p.cfg.Queries.PruneHistory(ctx, db.PruneHistoryParams{MaxJobs: batch, WithinMs: within.Milliseconds()})
		if err != nil {
			if ctx.Err() == nil {
				p.cfg.Log.Warn("pruning the history failed; retrying at the next interval", "error", err)
			}
			break
		}
		history += n
		if n < batch {
			complete = true
			break
		}
	}
	if p.cfg.DeadRetention > 0 {
		dead = p.pruneDead(ctx)
	}
	p.pruneUniquePeriods(ctx)
	p.pruneEvents(ctx)
	if history+dead > 0 {
		p.cfg.Log.Info("pruned finished jobs", "history", history, "dead", dead)
	}
	return history, dead
}

// pruneUniquePeriods deletes the records of unique keys whose period
// (jobs.UniquePeriod) has ended: they hold nothing any more.
func (p *Pruner) pruneUniquePeriods(ctx context.Context) {
	for range passes {
		n, err := p.cfg.Queries.PruneUniquePeriods(ctx, batch)
		if err != nil {
			if ctx.Err() == nil {
				p.cfg.Log.Warn("pruning expired unique periods failed; retrying at the next interval", "error", err)
			}
			return
		}
		if n < batch {
			return
		}
	}
}

// pruneEvents deletes events emitted longer ago than EventRetention, and
// the marks of waiting jobs (hopper_events) once they no longer matter.
func (p *Pruner) pruneEvents(ctx context.Context) {
	for range passes {
		n, err := p.cfg.Queries.PruneEvents(ctx, db.PruneEventsParams{KeepMs: p.cfg.EventRetention.Milliseconds(), MaxEvents: batch})
		if err != nil {
			if ctx.Err() == nil {
				p.cfg.Log.Warn("pruning old events failed; retrying at the next interval", "error", err)
			}
			return
		}
		if n < batch {
			return
		}
	}
}

// pruneDead deletes the dead and cancelled jobs of this worker's queues
// older than DeadRetention from the dead jobs' default partition, and
// from the expired partitions another queue's jobs keep from being
// dropped; the others go whole (deadPartitions).
func (p *Pruner) pruneDead(ctx context.Context) int64 {
	var n int64
	for range passes {
		deleted, err := p.cfg.Queries.PruneDead(ctx, db.PruneDeadParams{RetentionMs: p.cfg.DeadRetention.Milliseconds(), Queues: p.queues, MaxJobs: batch})
		if err != nil {
			if ctx.Err() == nil {
				p.cfg.Log.Warn("pruning dead jobs failed; retrying at the next interval", "error", err)
			}
			break
		}
		n += deleted
		if deleted < batch {
			break
		}
	}
	return n
}

// pruneWorkers deletes, at most once per workerPruneEvery, the rows of
// workers gone for longer than workerRowsKept.
func (p *Pruner) pruneWorkers(ctx context.Context) {
	if time.Since(p.lastWorkerPrune) < workerPruneEvery {
		return
	}
	p.lastWorkerPrune = time.Now()
	n, err := p.cfg.Queries.PruneWorkers(ctx, db.PruneWorkersParams{GoneForMs: workerRowsKept.Milliseconds(), MaxWorkers: workerPruneBatch})
	if err != nil {
		if ctx.Err() == nil {
			p.cfg.Log.Warn("pruning the rows of workers gone long ago failed; retrying later", "error", err)
		}
		return
	}
	if n > 0 {
		p.cfg.Log.Info("pruned the rows of workers gone long ago", "workers", n)
	}
}
