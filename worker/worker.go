package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
)

// ErrNotMigrated is returned by Run when hopper_jobs is not on the pool's
// search_path: run the migrations (schema.Up or `hopper migrate up`) first.
var ErrNotMigrated = errors.New("hopper: schema not migrated")

// Worker claims and runs jobs. Create it with New, register handlers with
// Handle, then call Run.
type Worker struct {
	pool    *pgxpool.Pool
	q       *db.Queries
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	mu       sync.Mutex
	handlers map[string]*handler
	kinds    []string // parallel to maxVersions, as Dequeue takes them
	versions []int32
	running  bool

	queues     map[string]*queueRunner
	metricsSrv *metricsServer
	schema     string // where hopper_jobs lives: wake-ups for others are ignored
	inflight   inflightSet
	done       chan completion

	// handlerBase is the parent of every handler's context. It is never
	// cancelled, so a job's context does not register with it (one shared
	// parent with thousands of children was a hot lock); shutdown cancels
	// each running job's context instead.
	handlerBase context.Context
	handlerWG   sync.WaitGroup // jobs being handled
	poolWG      sync.WaitGroup // handler goroutines
}

// New prepares a worker on pool with cfg; the pool's search_path decides
// which schema's jobs it runs.
func New(pool *pgxpool.Pool, cfg Config) (*Worker, error) {
	if pool == nil {
		return nil, fmt.Errorf("hopper: worker: %w: nil pool", ErrInvalidConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("hopper: worker: %w", err)
	}
	w := &Worker{
		pool:     pool,
		q:        db.New(pool),
		cfg:      cfg,
		log:      cfg.Logger.With("worker", cfg.ID),
		handlers: map[string]*handler{},
		queues:   map[string]*queueRunner{},
	}
	w.inflight.jobs = map[claimKey]*inflight{}
	w.metrics, err = newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("hopper: worker: metrics: %w", err)
	}
	for name, n := range cfg.Queues {
		w.queues[name] = &queueRunner{owner: w, name: name, max: n, wake: make(chan struct{}, 1), slotFreed: make(chan struct{}, 1),
			dispatch: make(chan dispatched, n)}
	}
	return w, nil
}

// ID is the worker's identity in leases and error histories.
func (w *Worker) ID() string { return w.cfg.ID }

func (w *Worker) register(h *handler) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running {
		return fmt.Errorf("hopper: handle %s: %w: the worker is already running", h.kind, ErrInvalidConfig)
	}
	if w.handlers[h.kind] != nil {
		return fmt.Errorf("hopper: handle %s: %w", h.kind, jobs.ErrDuplicateKind)
	}
	w.handlers[h.kind] = h
	w.kinds, w.versions = w.kinds[:0], w.versions[:0]
	names := make([]string, 0, len(w.handlers))
	for name := range w.handlers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		w.kinds = append(w.kinds, name)
		w.versions = append(w.versions, w.handlers[name].maxVersion)
	}
	return nil
}

// Run works until ctx is cancelled, then shuts down: it stops claiming,
// waits up to ShutdownTimeout for running handlers, cancels those still
// running, records every finished job, and gives the unfinished ones back
// at once (uncharged) so other workers take them. It returns nil after a
// clean shutdown, or the error that kept it from starting.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return fmt.Errorf("hopper: worker: %w: Run called twice", ErrInvalidConfig)
	}
	if len(w.handlers) == 0 {
		w.mu.Unlock()
		return fmt.Errorf("hopper: worker: %w: no handlers registered", ErrInvalidConfig)
	}
	w.running = true
	w.mu.Unlock()

	if err := w.start(ctx); err != nil {
		return err
	}
	if w.cfg.MetricsAddr != "" {
		ms, err := w.newMetricsServer()
		if err != nil {
			return err
		}
		w.mu.Lock()
		w.metricsSrv = ms
		w.mu.Unlock()
	}
	w.log.Info("hopper worker started", "queues", w.cfg.Queues, "kinds", w.kinds, "schema", w.schema)

	// Background loops live until the very end of shutdown, after the
	// last completion is flushed and the last lease released.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var bgWG sync.WaitGroup
	goBG := func(fn func(context.Context)) {
		bgWG.Add(1)
		go func() { defer bgWG.Done(); fn(bg) }()
	}
	w.handlerBase = context.WithoutCancel(ctx)
	w.done = make(chan completion, 4*w.cfg.AckBatchSize)
	completerDone := make(chan struct{})
	go func() { defer close(completerDone); w.complete() }()
	if w.cfg.HeartbeatInterval > 0 {
		goBG(w.heartbeat)
	}
	goBG(w.sweep)
	goBG(w.promote)
	if !w.cfg.PollOnly {
		goBG(w.listen)
	}
	if w.metricsSrv != nil {
		goBG(func(ctx context.Context) { w.serveMetrics(ctx, w.metricsSrv) })
	}

	var fetchWG sync.WaitGroup
	for _, qr := range w.queues {
		fetchWG.Add(1)
		go func() { defer fetchWG.Done(); w.fetchLoop(ctx, qr) }()
	}
	<-ctx.Done()
	fetchWG.Wait()
	for _, qr := range w.queues {
		close(qr.dispatch) // nothing more is claimed
	}
	w.shutdown()
	close(w.done)
	<-completerDone
	w.releaseUnfinished()
	stopBG()
	bgWG.Wait()
	waitAtMost(&w.poolWG, 5*time.Second) // only handlers that ignore cancellation outlive it
	w.log.Info("hopper worker stopped")
	return nil
}

// start checks the schema and gives back leases of a previous incarnation.
func (w *Worker) start(ctx context.Context) error {
	schemaName, err := w.q.HopperSchema(ctx)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: no hopper_jobs table on the search_path (run `hopper migrate up` or schema.Up)", ErrNotMigrated)
	}
	if err != nil {
		return fmt.Errorf("hopper: worker: start: %w", err)
	}
	w.schema = schemaName
	if !w.cfg.stableID {
		return nil // a made-up identity has no predecessor
	}
	released, err := w.q.ReleaseOwner(ctx, w.cfg.ID)
	if err != nil {
		return fmt.Errorf("hopper: worker: release previous leases of %s: %w", w.cfg.ID, err)
	}
	if len(released) > 0 {
		w.log.Warn("gave back leases of a previous run of this worker", "jobs", len(released))
		queues := make([]string, len(released))
		for i, r := range released {
			queues[i] = r.Queue
		}
		if err := w.q.Notify(ctx, queues); err != nil {
			w.log.Warn("wake-up after release failed; workers will poll", "error", err)
		}
	}
	return nil
}

// shutdown waits for running handlers, then cancels the stragglers.
func (w *Worker) shutdown() {
	if waitAtMost(&w.handlerWG, w.cfg.ShutdownTimeout) {
		return
	}
	released := w.inflight.markReleased()
	w.log.Warn("shutdown deadline passed: cancelling running handlers", "jobs", len(released))
	for _, f := range released {
		f.cancelWith(ErrShutdown)
	}
	// Handlers that honour their context return at once; wait a little
	// for them so no goroutine outlives Run, but never forever.
	if !waitAtMost(&w.handlerWG, 5*time.Second) {
		w.log.Error("handlers ignored cancellation; leaving them behind")
	}
}

// waitAtMost waits for wg up to d and reports whether it finished.
func waitAtMost(wg *sync.WaitGroup, d time.Duration) bool {
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-finished:
		return true
	case <-t.C:
		return false
	}
}

// releaseUnfinished gives back every claim whose handler did not finish.
func (w *Worker) releaseUnfinished() {
	w.inflight.markReleased()
	claims := w.inflight.takeReleased()
	if len(claims) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := db.ReleaseParams{}
	for _, f := range claims {
		p.Ids = append(p.Ids, f.id)
		p.Attempts = append(p.Attempts, f.attempt)
	}
	rows, err := w.q.Release(ctx, p)
	if err != nil {
		w.log.Error("could not give back unfinished jobs; they run again when their leases expire", "jobs", len(claims), "error", err)
		return
	}
	queues := make([]string, len(rows))
	for i, r := range rows {
		queues[i] = r.Queue
	}
	if err := w.q.Notify(ctx, queues); err != nil {
		w.log.Warn("wake-up after release failed; workers will poll", "error", err)
	}
	w.log.Info("gave back unfinished jobs", "jobs", len(rows))
}

// queueRunner is one queue's claim loop state.
type queueRunner struct {
	owner     *Worker
	name      string
	max       int
	running   atomic.Int64
	wake      chan struct{} // a wake-up arrived for this queue
	slotFreed chan struct{} // a handler of this queue finished
	// dispatch feeds the queue's handler goroutines. They are started as
	// needed (up to max) and live until Run ends, so a burst of short jobs
	// is served by a few goroutines rather than one new goroutine per job.
	dispatch chan dispatched
	spawned  int // handler goroutines started (claim goroutine only)
}

// dispatched is a claimed, decoded job on its way to a handler goroutine.
type dispatched struct {
	h    *handler
	row  db.HopperJob
	f    *inflight
	call func(context.Context) error // nil when decoding failed
	err  error                       // why decoding failed
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (w *Worker) wakeAll() {
	for _, qr := range w.queues {
		signal(qr.wake)
	}
}

// fetchLoop claims as many jobs as there are free slots. While work is
// waiting it claims again as soon as a quarter of the slots are free (or
// after a short pause, whatever is free then), so that claims come in
// batches rather than one job per freed slot; an idle queue waits for a
// wake-up or the poll interval.
func (w *Worker) fetchLoop(ctx context.Context, qr *queueRunner) {
	poll := time.NewTimer(w.cfg.PollInterval)
	defer poll.Stop()
	refill := max(1, qr.max/4)
	failures := 0
	for {
		free := qr.max - int(qr.running.Load())
		if free > 0 {
			n, err := w.claim(ctx, qr, free)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				failures++
				delay := retryDelay(failures)
				w.log.Warn("claim failed; retrying", "queue", qr.name, "error", err, "in", delay)
				if !sleep(ctx, delay) {
					return
				}
				continue
			}
			failures = 0
			if n < free {
				w.awaitWork(ctx, qr, poll) // the queue is drained for now
				continue
			}
		}
		if !awaitSlots(ctx, qr, refill) { // work is waiting
			return
		}
	}
}

// refillPause bounds how long a queue with waiting work holds free slots
// back to claim them in one batch.
const refillPause = 2 * time.Millisecond

// awaitSlots waits until want slots are free, or refillPause has passed and
// at least one is. It returns false when ctx ends.
func awaitSlots(ctx context.Context, qr *queueRunner, want int) bool {
	pause := time.NewTimer(refillPause)
	defer pause.Stop()
	paused := false
	for {
		free := qr.max - int(qr.running.Load())
		if free >= want || (paused && free > 0) {
			return true
		}
		var timeout <-chan time.Time
		if !paused {
			timeout = pause.C
		}
		select {
		case <-ctx.Done():
			return false
		case <-qr.slotFreed:
		case <-timeout:
			paused = true
		}
	}
}

// awaitWork waits for a wake-up or the poll interval.
func (w *Worker) awaitWork(ctx context.Context, qr *queueRunner, poll *time.Timer) {
	if !poll.Stop() {
		select {
		case <-poll.C:
		default:
		}
	}
	poll.Reset(w.cfg.PollInterval)
	for {
		select {
		case <-ctx.Done():
			return
		case <-qr.wake:
			return
		case <-poll.C:
			return
		case <-qr.slotFreed: // irrelevant while the queue is drained
		}
	}
}

// claim dequeues up to n jobs and starts their handlers.
func (w *Worker) claim(ctx context.Context, qr *queueRunner, n int) (int, error) {
	// The claim must not be cut off half-way by shutdown: jobs claimed by a
	// statement whose answer was lost would wait for their lease to expire.
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.LeaseDuration/2)
	defer cancel()
	rows, err := w.q.Dequeue(qctx, db.DequeueParams{
		Owner:       w.cfg.ID,
		LeaseMs:     w.cfg.LeaseDuration.Milliseconds(),
		Queue:       qr.name,
		Kinds:       w.kinds,
		MaxVersions: w.versions,
		MaxJobs:     int32(n),
	})
	if err != nil {
		return 0, err
	}
	w.metrics.fetched(qr.name, len(rows))
	now := time.Now()
	for _, row := range rows {
		h := w.handlers[row.Kind]
		f := w.inflight.add(row, qr)
		w.metrics.claimed(row.Queue, row.Kind, now.Sub(row.RunAt))
		// Decoding here, in one busy goroutine, rather than in the handler
		// goroutine keeps the decoder's deep stack from being grown anew
		// for every job.
		call, err := h.prepare(row)
		// Never fewer handler goroutines than jobs in flight, so a job is
		// never left waiting behind a handler that blocks.
		running := int(qr.running.Add(1))
		w.handlerWG.Add(1)
		for qr.spawned < running {
			qr.spawned++
			w.poolWG.Add(1)
			go w.handlerLoop(qr)
		}
		qr.dispatch <- dispatched{h: h, row: row, f: f, call: call, err: err} // never blocks: at most max jobs run
	}
	return len(rows), nil
}

// handlerLoop runs jobs of one queue until the queue's dispatch closes.
func (w *Worker) handlerLoop(qr *queueRunner) {
	defer w.poolWG.Done()
	for d := range qr.dispatch {
		w.execute(d)
	}
}

func (w *Worker) execute(d dispatched) {
	defer w.handlerWG.Done()
	f, row := d.f, d.row
	err := d.err
	var elapsed time.Duration
	if d.call != nil {
		ctx, cancel := context.WithCancelCause(w.handlerBase)
		f.setCancel(cancel)
		// The claim may have been lost or given back before its handler got
		// here; cancelWith found no context to cancel then.
		switch f.state.Load() {
		case stateLost:
			cancel(ErrLeaseLost)
		case stateReleased:
			cancel(ErrShutdown)
		}
		ctx = context.WithValue(ctx, inflightKey{}, f)
		start := time.Now()
		err = d.call(ctx)
		elapsed = time.Since(start)
		cancel(nil)
	}
	f.queue.running.Add(-1)
	signal(f.queue.slotFreed)
	w.metrics.ran(row.Queue, row.Kind, elapsed)
	w.finish(d.h, row, f, err)
}

// finish turns a handler's result into an ack or a nack for the completer.
func (w *Worker) finish(h *handler, row db.HopperJob, f *inflight, err error) {
	// Built only when something is logged: this is the hot path.
	log := func() *slog.Logger {
		return w.log.With("job_id", row.ID, "kind", row.Kind, "queue", row.Queue, "attempt", row.Attempt)
	}
	if !f.state.CompareAndSwap(stateRunning, stateFinished) {
		switch f.state.Load() {
		case stateLost:
			log().Warn("lease lost while the handler ran: its result is discarded; the job runs again elsewhere", "handler_error", err)
		case stateReleased:
			log().Info("job given back at shutdown: its result is discarded", "handler_error", err)
		}
		return
	}
	if err == nil && f.ackedInTx.Load() {
		w.inflight.remove(f)
		w.metrics.completed(row.Queue, row.Kind)
		return
	}
	c := completion{f: f, ok: err == nil}
	if err != nil {
		c.message = err.Error()
		var undecodable *undecodableError
		var permanent *permanentError
		var retryAt *retryAtError
		switch {
		case errors.As(err, &undecodable):
			c.deadReason = "undecodable payload: " + undecodable.Error()
		case errors.As(err, &permanent):
			c.deadReason = permanent.Error()
		case errors.As(err, &retryAt):
			c.backoff = time.Until(retryAt.at)
		default:
			b := h.backoff
			if b == (Backoff{}) {
				b = w.cfg.Backoff
			}
			c.backoff = b.Delay(row.Attempt)
		}
		if c.backoff < 0 {
			c.backoff = 0
		}
		log().Warn("job failed", "error", err, "retry_in", c.backoff, "dead_reason", c.deadReason)
	}
	w.done <- c
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
