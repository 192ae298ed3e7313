package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/grants"
	"github.com/hopperq/hopper/internal/migrated"
	"github.com/hopperq/hopper/internal/worker/completer"
	"github.com/hopperq/hopper/internal/worker/heartbeat"
	"github.com/hopperq/hopper/internal/worker/notifier"
	"github.com/hopperq/hopper/internal/worker/producer"
	"github.com/hopperq/hopper/internal/worker/registry"
	"github.com/hopperq/hopper/internal/worker/releaser"
	"github.com/hopperq/hopper/internal/worker/scheduler"
)

// newRun builds the components of a run on schema: handlers run under
// handlerBase (never cancelled: shutdown cancels each job's own context),
// the shutdown path's statements under hard. Its error is a component's
// Config refused by its New.
func (w *Worker) newRun(schema string, handlerBase, hard context.Context) (*run, error) {
	cfg := &w.cfg
	r := &run{w: w, schema: schema, hard: hard}
	var err error
	r.registry, err = registry.New(registry.Config{Queries: w.q, Log: w.log, ID: cfg.ID, Schema: schema,
		Queues: servedQueues(w.handlers, cfg.Queues), BeatInterval: cfg.BeatInterval, LeaseDuration: cfg.LeaseDuration,
		MigrateUp: w.migrateUp(), IDInUse: ErrWorkerIDInUse, Identity: processIdentity})
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	r.held = newHeldJobs(w.q, w.log, w.metrics, cfg, w.dbtx, w.pool.Begin)
	r.guard = newReadOnlyGuard(w.pool, w.log, readOnlyResetEvery, w.metrics.readOnlyC)
	r.completer, err = completer.New(completer.Config{Queries: w.q, Log: w.log, BatchSize: cfg.AckBatchSize,
		FlushEvery: cfg.AckFlushInterval, StatementTimeout: statementTimeout(cfg.LeaseDuration),
		Report: r.report, ReadOnly: r.guard.check, Hard: hard})
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	r.executor, err = r.newExecutor(handlerBase)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	beat := func(ctx context.Context, q *db.Queries) heartbeat.BeatResult {
		res := r.registry.Beat(ctx, q)
		if res.Err == nil {
			w.outage.reached()
		}
		return heartbeat.BeatResult(res)
	}
	r.heartbeat, err = heartbeat.New(heartbeat.Config{Pool: w.pool, DBTX: w.dbtx, Queries: w.q, Log: w.log,
		Beat: beat, ReleaseGone: w.releaser.ReleaseGone, ReadOnly: r.guard.check,
		Extend: heartbeat.InBatches(r.held.snapshot, r.held.extendOn), Running: r.runningHandlers,
		BeatInterval: cfg.BeatInterval, ExtendInterval: cfg.ExtendInterval, LeaseDuration: cfg.LeaseDuration})
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}

	listening := new(atomic.Bool) // written by the notifier, read by the producers
	claims := producer.NewClaimBatch(w.q)
	kinds := producer.Kinds{Names: w.handlers.kinds, MaxVersions: w.handlers.versions, KeyLimits: w.handlers.keyLimits,
		SharedNames: w.handlers.sharedNames, SharedMax: w.handlers.sharedMax}
	byKind := w.handlers.kindKeyLimits()
	r.producers = make(map[string]*producer.Producer, len(cfg.Queues))
	wakers := make(map[string]notifier.Waker, len(cfg.Queues))
	for name, n := range cfg.Queues {
		p, err := producer.New(producer.Config{Queries: w.q, Pool: w.pool, Scope: w.scope, Claims: claims, Log: w.log, Metrics: w.metrics,
			Name: name, Slots: n, Flow: flowOf(cfg, name, byKind), Kinds: kinds, Owner: cfg.ID, Lease: cfg.LeaseDuration,
			PollInterval: cfg.PollInterval, FullScanInterval: cfg.FullScanInterval,
			Listening: listening.Load, ReadOnly: r.guard.check, Reached: w.outage.reached, Hand: r.hand(r.executor.Queue(name)),
			Held: r.held.holding})
		if err != nil {
			return nil, fmt.Errorf("worker: %w", err)
		}
		r.producers[name], wakers[name] = p, waker{p}
	}

	onSchedule := func(string) {}
	if len(w.schedules) > 0 {
		r.scheduler, err = scheduler.New(scheduler.Config{Queries: w.q, Begin: w.pool.Begin, DBTX: w.dbtx, Log: w.log,
			Metrics: w.metrics, PollEvery: cfg.PollInterval, StaleAfter: cfg.ScheduleStaleAfter,
			Schedules: slices.Collect(maps.Values(w.schedules))})
		if err != nil {
			return nil, fmt.Errorf("worker: %w", err)
		}
		onSchedule = r.scheduler.Trigger
	}
	r.notifier, err = notifier.New(notifier.Config{ConnConfig: w.pool.Config().ConnConfig, Log: w.log, Owner: cfg.ID,
		Schema: schema, Wakers: wakers, Listening: listening, OnCancel: r.held.cancelNotice,
		OnSchedule: onSchedule, Timings: notifier.DefaultTimings, Metrics: w.metrics})
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	return r, nil
}

// servedQueues lists the queues a worker claims from, sorted; none when
// it only fires schedules.
func servedQueues(handlers *handlerTable, queues map[string]int) []string {
	names := []string{}
	if handlers.empty() {
		return names
	}
	for name := range queues {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// processIdentity, when set (tests: LookAlike), is the host name and pid
// the workers of this process record in their rows; nil: their own.
var processIdentity func() (host string, pid int)

// start registers the queues, their flow control and the schedules, then
// the worker itself, and gives back the jobs an earlier run of its ID
// left behind.
func (r *run) start(ctx context.Context) error {
	w := r.w
	if err := r.checkGrants(ctx); err != nil {
		return err
	}
	names := make([]string, 0, len(r.producers))
	for name := range r.producers {
		names = append(names, name)
	}
	if err := w.q.RegisterQueues(ctx, names); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedTable { // undefined_table
			return migrated.Errorf(w.migrateUp(), "schema %s lacks hopper_queues, which migration %s adds", r.schema, migrated.Migration(3))
		}
		// The first write: on a standby it is the one refused, and the
		// error says which connection string would reach the primary.
		return fmt.Errorf("worker: start: register queues: %w", migrated.ExplainReadOnly(err))
	}
	if err := r.recordFlow(ctx); err != nil {
		return err
	}
	if err := r.recordShared(ctx); err != nil {
		return err
	}
	if err := r.checkRateSchema(ctx); err != nil {
		return err
	}
	if r.scheduler != nil {
		if err := r.scheduler.Define(ctx); err != nil {
			return err
		}
	}
	if err := r.registry.ClaimID(); err != nil {
		return err
	}
	tookOver, err := r.registry.Register(ctx)
	if err != nil || !tookOver && !w.cfg.stableID { // a made-up ID has no predecessor
		return err
	}
	// The ID is ours alone now: any job held under it is an earlier run's
	// (crashed, its row taken over or pruned). Hand them back now rather
	// than wait for the release of gone workers, which skips a live row.
	// Our own row is not marked released: this run is live, and nothing of
	// its own was taken, so its first beat must not report a death.
	id, started := w.cfg.ID, r.registry.Started()
	gone, err := w.releaser.ReleaseJobsOf(ctx, db.ReleaseWorkerJobsParams{
		WorkerID: &id, Force: true, Reason: releaser.ReasonRestarted, HolderStartedAt: &started})
	if err != nil {
		r.registry.Remove(context.WithoutCancel(ctx))
		return fmt.Errorf("worker: start: %w", err)
	}
	for _, g := range gone {
		w.log.Warn("handed back the jobs of a previous run of this worker", "previous_host", g.Host, "previous_pid", g.PID,
			"jobs", g.Requeued+g.Dead, "requeued", g.Requeued, "dead", g.Dead)
	}
	return nil
}

// checkGrants refuses to start a worker whose role lacks a privilege its
// configuration needs: without it, the worker would start and then fail
// statement by statement (a durable call's permission denied for table
// hopper_job_steps), after a migration that added a table and grants
// not run again.
func (r *run) checkGrants(ctx context.Context) error {
	var needs []grants.Need
	for _, p := range r.producers {
		if p.Limited() {
			needs = []grants.Need{grants.FlowControl}
		}
	}
	if err := grants.Check(ctx, r.w.q, r.schema, grants.Worker, needs...); err != nil {
		return fmt.Errorf("worker: start: %w", err)
	}
	return nil
}

// services lists the run's background loops, in the order they start.
func (r *run) services() []service {
	w := r.w
	list := []service{r.heartbeat, w.sweeper, w.promoter, w.pruner}
	if r.scheduler != nil {
		list = append(list, r.scheduler)
	}
	if !w.cfg.PollOnly {
		list = append(list, r.notifier)
	}
	w.mu.Lock()
	if w.metricsSrv != nil {
		list = append(list, w.metricsSrv)
	}
	w.mu.Unlock()
	return list
}

// work claims and runs jobs until ctx ends, then shuts down: claims stop,
// running handlers get until the reserve (shutdown), the completer
// records what finished, unfinished jobs go back, and only then do the
// background loops stop, after the last completion and the last lease.
// endHard, called at the hard deadline, ends r.hard.
func (r *run) work(ctx context.Context, endHard context.CancelFunc) {
	w := r.w
	stopCompleter, completerDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(completerDone); r.completer.Run(stopCompleter) }()
	bg, stopBG := context.WithCancel(r.hard)
	var bgWG sync.WaitGroup
	for _, s := range r.services() {
		bgWG.Add(1)
		go func() { defer bgWG.Done(); s.Run(bg) }()
	}

	var fetchWG sync.WaitGroup
	if !w.handlers.empty() { // a worker that only fires schedules claims nothing
		for _, p := range r.producers {
			fetchWG.Add(1)
			go func() { defer fetchWG.Done(); p.Run(ctx, r.hard) }()
		}
	}
	<-ctx.Done()
	hardDeadline := time.Now().Add(w.cfg.ShutdownTimeout)
	stopHard := time.AfterFunc(time.Until(hardDeadline), endHard)
	defer stopHard.Stop()

	fetchWG.Wait()
	r.executor.Close() // nothing more is claimed
	r.shutdown(hardDeadline)
	close(stopCompleter)
	<-completerDone
	settled := r.releaseUnfinished() && r.unrecorded.Load() == 0
	stopBG()
	bgWG.Wait()
	if settled {
		r.registry.Remove(r.hard) // after the last beat, which could write it again
	} else {
		// Jobs may still be held in this worker's name: its row goes
		// stale, and the next live worker hands them back.
		w.log.Warn("keeping this worker's row in hopper_workers: jobs it could not settle are handed back once it goes stale")
	}
	if !r.executor.WaitGoroutines(hardDeadline) {
		w.log.Error("handlers ignore cancellation; leaving them behind")
	}
}

// runningHandlers is the claims whose handlers run now, as the
// heartbeat's stuck watch sees them.
func (r *run) runningHandlers() []heartbeat.Handler {
	claims := r.executor.Running()
	out := make([]heartbeat.Handler, len(claims))
	for i, c := range claims {
		out[i] = c
	}
	return out
}
