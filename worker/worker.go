package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/buildinfo"
	"github.com/hopperq/hopper/internal/migrated"
	"github.com/hopperq/hopper/internal/schemascope"
	"github.com/hopperq/hopper/jobs"
)

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

// Worker claims and runs jobs. Create it with New, register handlers with
// Handle, then call Run.
type Worker struct {
	pool    *pgxpool.Pool
	q       *db.Queries
	scope   *schemascope.DB // Config.Schema's scope; nil: the pool's search_path
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	mu       sync.Mutex
	handlers *handlerTable
	running  bool

	producers  map[string]*producer
	metricsSrv *metricsServer
	schema     string // where hopper_jobs lives: wake-ups for others are ignored
	held       heldJobs
	completer  *completer
	notifier   *notifier
	maintainer *maintainer
	executor   *executor
	registry   *registry // this worker's row in hopper_workers
	// unrecorded counts results not recorded (OutcomeUnrecorded): their
	// jobs may still be held in this worker's name at its stop.
	unrecorded atomic.Int64

	// hard ends at the shutdown's hard deadline (ShutdownTimeout after
	// Run's context ended): every statement of the
	// shutdown path runs under it, so no database outage can hold Run.
	hard context.Context

	// observe, when set (tests), sees every settled result.
	observe func(id int64, attempt int32, o outcome)
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
	w := &Worker{
		pool:      pool,
		cfg:       cfg,
		log:       cfg.Logger.With("worker", cfg.ID),
		handlers:  newHandlerTable(),
		producers: map[string]*producer{},
	}
	if cfg.Schema != "" {
		w.scope = schemascope.Wrap(pool, cfg.Schema)
	}
	w.q = db.New(w.dbtx(pool))
	w.registry = newRegistry(w.q, w.log, &w.cfg)
	w.completer = newCompleter(w.q, w.log, &w.cfg, w.report)
	w.metrics, err = newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("worker: metrics: %w", err)
	}
	w.executor = newExecutor(w.q, w.log, w.metrics, &w.cfg, w.completer, w.report)
	w.held = heldJobs{jobs: map[heldKey]*heldJob{}, q: w.q, log: w.log, lease: cfg.LeaseDuration,
		extendEvery: cfg.ExtendInterval, beatEvery: cfg.BeatInterval, pool: pool, inFlight: &w.executor.inFlight, beatWorker: w.registry.beat,
		abandonAfter: cfg.AbandonAfter, metrics: w.metrics, dbtx: w.dbtx}
	w.notifier = newNotifier(w.q, pool.Config().ConnConfig, w.log, cfg.ID, w.producers, w.held.cancelNotice, func(schedule string) {
		w.maintainer.scheduleTriggered(schedule)
	})
	deps := producerDeps{q: w.q, pool: pool, scope: w.scope, cfg: &w.cfg, log: w.log, metrics: w.metrics,
		handlers: w.handlers, held: &w.held, executor: w.executor, listening: &w.notifier.listening, claims: newClaimBatch(w.q)}
	for name, n := range cfg.Queues {
		w.producers[name] = newProducer(deps, name, n) // the notifier sees them through the map
	}
	w.maintainer = newMaintainer(w.q, pool, w.dbtx, w.log, w.metrics, &w.cfg, w.notifier.announce)
	w.held.releaseGone = w.maintainer.releaseGone
	return w, nil
}

// dbtx is what the worker runs statements on, given a pool or a
// transaction: scoped to Config.Schema when one is set.
func (w *Worker) dbtx(d db.DBTX) db.DBTX {
	if w.scope == nil {
		return d
	}
	return w.scope.On(d)
}

// ID is the worker's identity in leases and error histories.
func (w *Worker) ID() string { return w.cfg.ID }

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
	if w.handlers.empty() && len(w.maintainer.schedules) == 0 {
		w.mu.Unlock()
		return fmt.Errorf("worker: %w: no handlers or schedules registered", ErrInvalidConfig)
	}
	w.running = true
	w.mu.Unlock()

	defer w.registry.freeID()
	if err := w.start(ctx); err != nil {
		if ctx.Err() != nil {
			// Shut down before it had started: it claimed nothing, so
			// this is a shutdown like any other, not a failure to start.
			w.log.Info("hopper worker stopped before it started", "cause", context.Cause(ctx))
			return nil
		}
		return err
	}
	if w.cfg.MetricsAddr != "" {
		ms, err := newMetricsServer(w.q, w.log, w.metrics, &w.cfg)
		if err != nil {
			w.registry.remove(context.WithoutCancel(ctx))
			return err
		}
		w.mu.Lock()
		w.metricsSrv = ms
		w.mu.Unlock()
	}
	w.checkPoolSize()
	w.checkBeat()
	w.log.Info("hopper worker started", "queues", w.cfg.Queues, "kinds", w.handlers.kinds, "schema", w.schema, "version", buildinfo.Version())

	hard, endHard := context.WithCancel(context.WithoutCancel(ctx))
	defer endHard()
	w.hard = hard
	// Background loops live until the very end of shutdown, after the
	// last completion is flushed and the last lease released.
	bg, stopBG := context.WithCancel(hard)
	var bgWG sync.WaitGroup
	goBG := func(fn func(context.Context)) {
		bgWG.Add(1)
		go func() { defer bgWG.Done(); fn(bg) }()
	}
	w.executor.handlerBase, w.executor.hard = context.WithoutCancel(ctx), hard
	stopCompleter, completerDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(completerDone); w.completer.run(hard, stopCompleter) }()
	goBG(w.held.heartbeat)
	goBG(w.maintainer.sweep)
	goBG(w.maintainer.promote)
	goBG(w.maintainer.prune)
	if len(w.maintainer.schedules) > 0 {
		goBG(w.maintainer.fireSchedules)
	}
	if !w.cfg.PollOnly {
		goBG(w.notifier.run)
	}
	if w.metricsSrv != nil {
		goBG(w.metricsSrv.serve)
	}

	var fetchWG sync.WaitGroup
	for _, p := range w.producers {
		if w.handlers.empty() {
			break // a worker that only fires schedules claims nothing
		}
		p.hard = hard
		fetchWG.Add(1)
		go func() { defer fetchWG.Done(); p.fetchLoop(ctx) }()
	}
	<-ctx.Done()
	hardDeadline := time.Now().Add(w.cfg.ShutdownTimeout)
	stopHard := time.AfterFunc(time.Until(hardDeadline), endHard)
	defer stopHard.Stop()

	fetchWG.Wait()
	for _, p := range w.producers {
		close(p.dispatch) // nothing more is claimed
	}
	w.shutdown(hardDeadline)
	close(stopCompleter)
	<-completerDone
	settled := w.releaseUnfinished() && w.unrecorded.Load() == 0
	stopBG()
	bgWG.Wait()
	if settled {
		w.registry.remove(hard) // after the last beat, which could write it again
	} else {
		// Jobs may still be held in this worker's name: its row goes
		// stale, and the next live worker hands them back.
		w.log.Warn("keeping this worker's row in hopper_workers: jobs it could not settle are handed back once it goes stale")
	}
	if !waitUntil(&w.executor.poolWG, hardDeadline) {
		w.log.Error("handlers ignore cancellation; leaving them behind")
	}
	w.log.Info("hopper worker stopped")
	return nil
}

// migrateUp is what to run to migrate the worker's schema, for errors.
func (w *Worker) migrateUp() string { return migrated.Run(w.cfg.Schema) }

// start checks the schema, gives back leases of a previous incarnation,
// and registers the worker in hopper_workers.
func (w *Worker) start(ctx context.Context) error {
	schemaName, err := w.q.HopperSchema(ctx)
	if errors.Is(err, pgx.ErrNoRows) {
		if w.scope != nil {
			return migrated.Errorf(w.migrateUp(), "no hopper_jobs table in schema %s", w.cfg.Schema)
		}
		return migrated.Errorf(w.migrateUp(), "no hopper_jobs table on the search_path")
	}
	if err != nil {
		return fmt.Errorf("worker: start: %w", err)
	}
	w.schema = schemaName
	w.notifier.schema = schemaName
	// The recorded version, when this role may read it; the statements
	// below check what they need of the schema when it may not.
	if err := migrated.Check(ctx, w.dbtx(w.pool), schemaName, w.migrateUp()); err != nil {
		if errors.Is(err, jobs.ErrNotMigrated) {
			return err
		}
		return fmt.Errorf("worker: start: %w", err)
	}
	if err := w.checkIsolation(ctx); err != nil {
		return err
	}
	w.warnIfPooled(ctx)
	w.setUpFlow()
	names := make([]string, 0, len(w.producers))
	for name := range w.producers {
		names = append(names, name)
	}
	if err := w.q.RegisterQueues(ctx, names); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
			return migrated.Errorf(w.migrateUp(), "schema %s lacks hopper_queues, which migration %s adds", schemaName, migrated.Migration(3))
		}
		return fmt.Errorf("worker: start: register queues: %w", err)
	}
	if err := w.recordFlow(ctx); err != nil {
		return err
	}
	if err := w.checkRateSchema(ctx); err != nil {
		return err
	}
	if err := w.maintainer.defineSchedules(ctx); err != nil {
		return err
	}
	w.registry.queues, w.registry.schema = servedQueues(w.handlers, w.producers), schemaName
	if err := w.registry.claimID(); err != nil {
		return err
	}
	tookOver, err := w.registry.register(ctx)
	if err != nil || !tookOver && !w.cfg.stableID { // a made-up ID has no predecessor
		return err
	}
	// The ID is ours alone now: any job held under it is an earlier run's
	// (crashed, its row taken over or pruned). Hand them back now rather
	// than wait for the sweep of gone workers, which skips a live row. Our
	// own row is not marked released: this run is live, and nothing of its
	// own was taken, so its first beat must not report a death.
	id, started := w.cfg.ID, w.registry.started()
	gone, err := w.maintainer.releaseJobsOf(ctx, db.ReleaseWorkerJobsParams{
		WorkerID: &id, Force: true, Reason: reasonWorkerRestarted, HolderStartedAt: &started})
	if err != nil {
		w.registry.remove(context.WithoutCancel(ctx))
		return fmt.Errorf("worker: start: %w", err)
	}
	for _, g := range gone {
		w.log.Warn("handed back the jobs of a previous run of this worker", "previous_host", g.host, "previous_pid", g.pid,
			"jobs", g.requeued+g.dead, "requeued", g.requeued, "dead", g.dead)
	}
	return nil
}

func retryDelay(failures int) time.Duration {
	d := 100 * time.Millisecond << min(failures, 6)
	return min(d, 5*time.Second)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
