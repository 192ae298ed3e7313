package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/db"
)

// maintainer keeps the jobs table healthy for every worker: the sweep
// gives back expired leases (sweep.go), the promotion makes scheduled jobs
// that fell due ready (sweep.go), pruning deletes expired history and old
// dead jobs (prune.go). Every worker runs all three on jittered intervals;
// SKIP LOCKED makes concurrent runs safe. Each pass remembers how far back
// the next one must look (scanHorizon, sweep_horizon.go). It also defines
// and fires this worker's schedules (schedule_fire.go).
//
// Invariant: a horizon only narrows after a complete pass, and a full pass
// runs every fullScanEvery, so nothing due is missed for longer than that.
type maintainer struct {
	q             *db.Queries
	log           *slog.Logger
	metrics       *metrics
	sweepEvery    time.Duration // Config.SweepInterval: sweeps and pruning
	pollEvery     time.Duration // Config.PollInterval: promotions
	sweepBatch    int           // Config.SweepBatch
	deadRetention time.Duration // Config.DeadRetention; 0: dead jobs are kept
	// announce wakes the queues of jobs a pass made ready.
	announce func(ctx context.Context, wk *wakeups, after string)
	// lastWorkerPrune: when the sweep last pruned the rows of workers gone
	// long ago (pruneWorkers; owned by the sweep's goroutine).
	lastWorkerPrune time.Time

	sweeps     scanHorizon
	promotions scanHorizon
	prunes     scanHorizon

	// Schedules: pool and dbtx begin each fire's transaction (scoped to
	// Config.Schema). schedules is filled by Worker.Schedule before Run and
	// read-only after; scheduleWake tells the firing loop a schedule was
	// triggered or resumed.
	pool               *pgxpool.Pool
	dbtx               func(db.DBTX) db.DBTX
	scheduleStaleAfter time.Duration // Config.ScheduleStaleAfter
	schedules          map[string]*scheduled
	scheduleWake       chan struct{}
}

func newMaintainer(q *db.Queries, pool *pgxpool.Pool, dbtx func(db.DBTX) db.DBTX, log *slog.Logger, m *metrics, cfg *Config,
	announce func(context.Context, *wakeups, string)) *maintainer {
	return &maintainer{q: q, log: log, metrics: m,
		sweepEvery: cfg.SweepInterval, pollEvery: cfg.PollInterval, sweepBatch: cfg.SweepBatch,
		deadRetention: cfg.DeadRetention, announce: announce,
		pool: pool, dbtx: dbtx, scheduleStaleAfter: cfg.ScheduleStaleAfter,
		schedules: map[string]*scheduled{}, scheduleWake: make(chan struct{}, 1)}
}

// scheduleTriggered wakes the firing loop when name is one of this
// worker's schedules.
func (m *maintainer) scheduleTriggered(name string) {
	if m.schedules[name] != nil {
		signal(m.scheduleWake)
	}
}

// SweepOnce runs the sweep now and reports how many expired jobs went back
// to pending and how many to the dead table.
func (w *Worker) SweepOnce(ctx context.Context) (requeued, dead int) {
	return w.maintainer.sweepOnce(ctx)
}

// PromoteOnce promotes every scheduled job that is due now and reports how
// many it promoted.
func (w *Worker) PromoteOnce(ctx context.Context) int { return w.maintainer.promoteOnce(ctx) }

// PruneOnce runs the pruning now and reports how many completed jobs left
// the history and how many dead or cancelled jobs were deleted.
func (w *Worker) PruneOnce(ctx context.Context) (history, dead int64) {
	return w.maintainer.pruneOnce(ctx)
}
