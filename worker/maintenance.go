package worker

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/hopperq/hopper/internal/worker/promoter"
	"github.com/hopperq/hopper/internal/worker/pruner"
	"github.com/hopperq/hopper/internal/worker/releaser"
	"github.com/hopperq/hopper/internal/worker/sweeper"
)

// The maintenance services live in packages of their own
// (internal/worker/...): each is built from its Config here, once, for the
// worker's life, and runs in every Run as a service (run.services).

// MaxHistoryPartitionsAhead bounds how many partitions of the history a
// worker keeps created ahead of now (Config.HistoryPartitionWidth): every
// lookup of a completed job by id reads each partition's primary key.
const MaxHistoryPartitionsAhead = pruner.MaxHistoryPartitionsAhead

// newMaintenance builds the sweeper, the promoter, the pruner and the
// releaser from the worker's configuration.
func (w *Worker) newMaintenance() error {
	cfg := &w.cfg
	var err error
	w.sweeper, err = sweeper.New(sweeper.Config{Queries: w.q, Log: w.log, Metrics: w.metrics,
		Every: cfg.SweepInterval, Batch: cfg.SweepBatch, Announce: w.announcer.Announce})
	if err != nil {
		return err
	}
	w.promoter, err = promoter.New(promoter.Config{Queries: w.q, Log: w.log,
		Every: cfg.PollInterval, Announce: w.announcer.Announce})
	if err != nil {
		return err
	}
	w.pruner, err = pruner.New(pruner.Config{Queries: w.q, Log: w.log, Every: cfg.SweepInterval,
		Queues: slices.Collect(maps.Keys(cfg.Queues)), DeadRetention: cfg.DeadRetention, EventRetention: cfg.EventRetention,
		PartitionWidth: cfg.HistoryPartitionWidth, LongestKeep: func() time.Duration { return w.handlers.longestKeep(cfg) }})
	if err != nil {
		return err
	}
	w.releaser, err = releaser.New(releaser.Config{Queries: w.q, Log: w.log, Metrics: w.metrics,
		Batch: cfg.SweepBatch, Announce: w.announcer.Announce})
	return err
}

// SweepOnce runs the sweep now and reports how many expired jobs went back
// to pending and how many to the dead table.
func (w *Worker) SweepOnce(ctx context.Context) (requeued, dead int) {
	return w.sweeper.SweepOnce(ctx)
}

// PromoteOnce promotes every scheduled job that is due now and reports how
// many it promoted.
func (w *Worker) PromoteOnce(ctx context.Context) int { return w.promoter.PromoteOnce(ctx) }

// PruneOnce runs the pruning now and reports how many completed jobs left
// the history and how many dead or cancelled jobs were deleted row by row;
// the jobs of a time partition dropped whole are not counted.
func (w *Worker) PruneOnce(ctx context.Context) (history, dead int64) {
	return w.pruner.PruneOnce(ctx)
}
