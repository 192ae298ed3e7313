package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/buildinfo"
	"github.com/hopperq/hopper/internal/migrated"
	"github.com/hopperq/hopper/internal/schemascope"
	"github.com/hopperq/hopper/internal/worker/announce"
	"github.com/hopperq/hopper/internal/worker/scheduler"
	"github.com/hopperq/hopper/jobs"
)

// The top of worker/'s files: New builds a Worker (declared in state.go)
// for the worker's life, Run builds one run (run.go) and works it.

// checkIsolation refuses a pool whose sessions default to repeatable read
// or serializable (see queries/transaction.sql, DefaultIsolation).
func (w *Worker) checkIsolation(ctx context.Context) error {
	level, err := w.q.DefaultIsolation(ctx)
	if err != nil {
		return fmt.Errorf("worker: start: read the default isolation: %w", err)
	}
	if level != "read committed" {
		return fmt.Errorf("%w: this pool's sessions default to %s (set default_transaction_isolation to read committed in the pool's RuntimeParams, or for the role Hopper connects as)", ErrIsolation, level)
	}
	return nil
}

// New prepares a worker on pool with cfg; the pool's search_path decides
// which schema's jobs it runs.
func New(pool *pgxpool.Pool, cfg Config) (*Worker, error) {
	if pool == nil {
		return nil, fmt.Errorf("worker: %w: nil pool", ErrInvalidConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("worker: metrics: %w", err)
	}
	var scope *schemascope.DB
	if cfg.Schema != "" {
		scope = schemascope.Wrap(pool, cfg.Schema)
	}
	base := cfg.Logger.With("worker", cfg.ID)
	out := newOutage(base, time.Now)
	w := &Worker{pool: pool, scope: scope, cfg: cfg, log: slog.New(&outageHandler{inner: base.Handler(), o: out}), outage: out, metrics: m,
		handlers: newHandlerTable(), schedules: map[string]*scheduler.Definition{}}
	w.q = db.New(w.dbtx(pool))
	w.announcer = announce.NewAnnouncer(w.q, w.log)
	if err := w.newMaintenance(); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	return w, nil
}

// metricsQueries is where the database gauges read: MetricsReadPool,
// else the worker's pool.
func (w *Worker) metricsQueries() *db.Queries {
	if w.cfg.MetricsReadPool != nil {
		return db.New(w.dbtx(w.cfg.MetricsReadPool))
	}
	return w.q
}

// ID is the worker's identity in leases and error histories.
func (w *Worker) ID() string { return w.cfg.ID }

// MetricsAddr is the address the metrics endpoint listens on (useful with
// port 0), or "" when it is off or not started yet.
func (w *Worker) MetricsAddr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.metricsSrv == nil {
		return ""
	}
	return w.metricsSrv.listener.Addr().String()
}

func (w *Worker) register(h *handler) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running {
		return fmt.Errorf("handle %s: %w: the worker is already running", h.kind, ErrInvalidConfig)
	}
	return w.handlers.add(h)
}

// Run works until ctx is cancelled, then shuts down: it stops claiming,
// waits for running handlers until the last quarter of ShutdownTimeout
// (at most its last 5s), cancels those still running, records every
// finished job, and gives the unfinished ones back at once (uncharged) so
// other workers take them. Whatever the database does meanwhile, Run
// returns at most ShutdownTimeout after ctx ended; results it could not
// record by then are logged, and their jobs run again once this worker is
// taken to be gone. It returns nil after a
// shutdown (also one asked for while it was starting), or the error that
// kept it from starting.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return fmt.Errorf("worker: %w: Run called twice", ErrInvalidConfig)
	}
	if w.handlers.empty() && len(w.schedules) == 0 {
		w.mu.Unlock()
		return fmt.Errorf("worker: %w: no handlers or schedules registered", ErrInvalidConfig)
	}
	w.running = true
	w.mu.Unlock()

	// hard ends at the shutdown's hard deadline (ShutdownTimeout after
	// ctx ended): every statement of the shutdown path runs under it, so
	// no database outage can hold Run.
	hard, endHard := context.WithCancel(context.WithoutCancel(ctx))
	defer endHard()
	r, err := w.begin(ctx, hard)
	if r != nil {
		defer r.registry.FreeID()
	}
	if err != nil {
		if ctx.Err() != nil {
			// Shut down before it had started: it claimed nothing, so
			// this is a shutdown like any other, not a failure to start.
			w.log.Info("hopper worker stopped before it started", "cause", context.Cause(ctx))
			return nil
		}
		return err
	}
	w.checkPoolSize()
	r.registry.CheckBeat()
	// The build, so that the log of a rollout tells the old pods from the
	// new: Hopper's version, and the program's package and commit.
	build := buildinfo.Read()
	w.log.Info("hopper worker started", "queues", w.cfg.Queues, "kinds", w.handlers.kinds, "schema", r.schema,
		"version", build.Version, "program", build.Program, "commit", build.Commit(), "vcs_time", build.Time)
	r.work(ctx, endHard)
	w.log.Info("hopper worker stopped")
	return nil
}

// begin checks the schema, builds the run's components and starts it up
// (run.start); it returns the run once built, even when its start failed.
func (w *Worker) begin(ctx context.Context, hard context.Context) (*run, error) {
	schemaName, err := w.checkSchema(ctx)
	if err != nil {
		return nil, err
	}
	r, err := w.newRun(schemaName, context.WithoutCancel(ctx), hard)
	if err != nil {
		return nil, err
	}
	w.active.Store(r)
	if err := r.start(ctx); err != nil {
		return r, err
	}
	if w.cfg.MetricsAddr != "" {
		ms, err := newMetricsServer(w.metricsQueries(), w.log, w.metrics, &w.cfg)
		if err != nil {
			r.registry.Remove(context.WithoutCancel(ctx))
			return r, err
		}
		w.mu.Lock()
		w.metricsSrv = ms
		w.mu.Unlock()
	}
	return r, nil
}

// checkSchema finds where hopper_jobs lives, checks it is migrated far
// enough and that the pool's sessions suit the worker, and returns the
// schema's name.
func (w *Worker) checkSchema(ctx context.Context) (string, error) {
	schemaName, err := w.q.HopperSchema(ctx)
	if errors.Is(err, pgx.ErrNoRows) {
		if w.scope != nil {
			return "", migrated.Errorf(w.migrateUp(), "no hopper_jobs table in schema %s", w.cfg.Schema)
		}
		return "", migrated.Errorf(w.migrateUp(), "no hopper_jobs table on the search_path")
	}
	if err != nil {
		return "", fmt.Errorf("worker: start: %w", err)
	}
	// The recorded version, when this role may read it; the statements
	// of run.start check what they need of the schema when it may not.
	if err := migrated.Check(ctx, w.dbtx(w.pool), schemaName, w.migrateUp()); err != nil {
		if errors.Is(err, jobs.ErrNotMigrated) {
			return "", err
		}
		return "", fmt.Errorf("worker: start: %w", err)
	}
	if err := w.checkIsolation(ctx); err != nil {
		return "", err
	}
	w.warnIfPooled(ctx)
	return schemaName, nil
}
