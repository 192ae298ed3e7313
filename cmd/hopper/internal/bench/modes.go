package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/metricsum"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// benchJob is the payload every benchmark job carries.
type benchJob struct {
	Pad string `json:"pad,omitempty"`
}

var noop = jobs.MustDefine[benchJob]("bench.noop")

// traced is a benchmark job whose worker reports when it started and ended
// (the flow-control modes time some tenants, or every job, this way).
var traced = jobs.MustDefine[benchJob]("bench.traced")

func (cfg Config) payload() benchJob { return benchJob{Pad: strings.Repeat("x", cfg.PayloadSize)} }

// Machine describes where the figures come from.
type Machine struct {
	CPUs     int    `json:"cpus"`
	GoOS     string `json:"goos"`
	GoArch   string `json:"goarch"`
	Go       string `json:"go"`
	Postgres string `json:"postgres"`
}

func machine(ctx context.Context, dbURL string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoOS: runtime.GOOS, GoArch: runtime.GOARCH, Go: runtime.Version()}
	if conn, err := pgx.Connect(ctx, dbURL); err == nil {
		m.Postgres = conn.PgConn().ParameterStatus("server_version")
		conn.Close(ctx)
	}
	return m
}

// ---- the worker process ----

// workerProc is a worker process started for a measurement; it reports its
// counters on stdout: jobs completed, and results unconfirmed (a job's
// ack sent, its reply lost: the job may be done or not, only the table
// tells).
type workerProc struct {
	cmd         *exec.Cmd
	completed   atomic.Int64
	unconfirmed atomic.Int64
	ready       chan struct{}
	exited      chan struct{}

	mu     sync.Mutex
	traces []jobTrace // the traced jobs worked, as reported
}

// finished is every job whose ack was sent: completed, or perhaps
// completed.
func (p *workerProc) finished() int64 { return p.completed.Load() + p.unconfirmed.Load() }

func startWorkers(cfg Config, dbURL string) (*workerProc, error) {
	args := append(cfg.WorkerCommand[1:len(cfg.WorkerCommand):len(cfg.WorkerCommand)],
		"--workers", fmt.Sprint(cfg.Workers), "--concurrency", fmt.Sprint(cfg.Concurrency),
		"--handler-time", cfg.HandlerTime.String(), "--keep-history", cfg.keep.String(),
		// always explicit: the flags' defaults are the flow modes' own
		fmt.Sprintf("--fair=%t", cfg.flow.fair), "--key-limit", fmt.Sprint(cfg.flow.keyLimit),
		"--rate", fmt.Sprint(cfg.flow.rate), "--rate-per", cfg.flow.ratePer.String(),
		fmt.Sprintf("--rate-exact-starts=%t", cfg.flow.rateExactStarts))
	cmd := exec.Command(cfg.WorkerCommand[0], args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &workerProc{cmd: cmd, ready: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(p.exited)
		s := bufio.NewScanner(out)
		for s.Scan() {
			line := s.Text()
			if line == "ready" {
				close(p.ready)
				continue
			}
			if tr, ok := parseTrace(line); ok {
				p.mu.Lock()
				p.traces = append(p.traces, tr)
				p.mu.Unlock()
				continue
			}
			var completed, unconfirmed int64
			if _, err := fmt.Sscanf(line, workerReport, &completed, &unconfirmed); err == nil {
				p.completed.Store(completed)
				p.unconfirmed.Store(unconfirmed)
			}
		}
	}()
	select {
	case <-p.ready:
		return p, nil
	case <-p.exited:
		_ = cmd.Wait()
		return nil, fmt.Errorf("worker process exited at start")
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		<-p.exited
		_ = cmd.Wait()
		return nil, fmt.Errorf("worker process did not start within 2 minutes")
	}
}

// stop ends the worker process and returns its peak memory. Once it has
// returned, the counters hold the process's final report; err says the
// process failed, and that they may be stale.
func (p *workerProc) stop() (peak int64, err error) {
	peak, _ = peakRSS(p.cmd.Process.Pid)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.exited
	if err := p.cmd.Wait(); err != nil {
		return peak, fmt.Errorf("worker process: %w", err)
	}
	return peak, nil
}

func (p *workerProc) cpu() float64 {
	s, _ := cpuSeconds(p.cmd.Process.Pid)
	return s
}

// workerReport is the line the worker process prints every 50ms, and once
// more after its workers have stopped.
const workerReport = "completed %d unconfirmed %d"

// WorkerOptions is how the benchmark's worker process runs its workers.
type WorkerOptions struct {
	Workers     int           // worker instances
	Concurrency int           // handler slots per worker
	HandlerTime time.Duration // how long each handler waits (0: no-op)
	Keep        time.Duration // how long completed jobs are kept (0: not)
	// Flow control of the default queue: the zero values are none.
	Fair     bool
	KeyLimit int
	Rate     int
	RatePer  time.Duration
	// RateExactStarts counts each claim from its last handler start.
	RateExactStarts bool
}

func (o WorkerOptions) flowControl() map[string]worker.FlowControl {
	fc := worker.FlowControl{Fair: o.Fair, KeyLimit: o.KeyLimit}
	if o.Rate > 0 {
		fc.Rate = worker.Rate{Limit: o.Rate, Per: o.RatePer, ExactStarts: o.RateExactStarts}
	}
	if fc == (worker.FlowControl{}) {
		return nil
	}
	return map[string]worker.FlowControl{jobs.DefaultQueue: fc}
}

// RunWorkerProcess is the worker side of a benchmark (`hopper bench --role
// worker`): it runs the workers o describes, with handlers that do nothing
// (or wait o.HandlerTime), until ctx ends, printing "ready" and then its
// counters (workerReport) every 50ms, and a line (traceReport) for every
// traced job worked.
func RunWorkerProcess(ctx context.Context, dbURL string, o WorkerOptions, out io.Writer) error {
	if path := os.Getenv("HOPPER_BENCH_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(4 * o.Workers)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	reg := prometheus.NewRegistry()
	var wg sync.WaitGroup
	errs := make(chan error, o.Workers)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var outMu sync.Mutex
	say := func(format string, args ...any) { // one line at a time, from many handlers
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	work := func() {
		if o.HandlerTime > 0 {
			time.Sleep(o.HandlerTime)
		}
	}
	for i := range o.Workers {
		r := prometheus.WrapRegistererWith(prometheus.Labels{"instance": fmt.Sprint(i)}, reg)
		w, err := worker.New(pool, worker.Config{Queues: map[string]int{jobs.DefaultQueue: o.Concurrency}, Registerer: r, Logger: quiet,
			KeepHistoryByQueue: map[string]time.Duration{jobs.DefaultQueue: o.Keep}, FlowControl: o.flowControl()})
		if err != nil {
			return err
		}
		if err := worker.Handle(w, noop, func(context.Context, *jobs.Job[benchJob]) error { work(); return nil }); err != nil {
			return err
		}
		if err := worker.Handle(w, traced, func(_ context.Context, j *jobs.Job[benchJob]) error {
			began := time.Now()
			work()
			say("%s", formatTrace(jobTrace{Key: j.ConcurrencyKey, Started: began, Ended: time.Now()}))
			return nil
		}); err != nil {
			return err
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs <- w.Run(runCtx) }()
	}
	say("ready")
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	report := func() { say(workerReport, CounterSum(CompletedCounter, reg), CounterSum(UnconfirmedCounter, reg)) }
	for {
		select {
		case <-ctx.Done():
			cancel()
			wg.Wait()
			report()
			close(errs)
			for err := range errs {
				if err != nil {
					return err
				}
			}
			return nil
		case <-t.C:
			report()
		}
	}
}

// The worker's counters of job outcomes. A result is unconfirmed when its
// statement was sent but its reply lost: the job may be done or not.
const (
	CompletedCounter   = `hopper_job_outcomes_total{outcome="done"}`
	UnconfirmedCounter = `hopper_job_outcomes_total{outcome="unconfirmed"}`
)

// CheckOutcomes compares what the workers reported with what the table
// shows. enqueued jobs went in; completed and unconfirmed are the
// workers' counters; live and dead are the rows still in hopper_jobs and
// in hopper_dead_jobs. The database's count of done jobs, enqueued - live
// - dead, must lie between completed (every reported completion is a job
// gone) and completed + unconfirmed (every job gone was reported, if only
// as unconfirmed). It returns that count.
func CheckOutcomes(enqueued, completed, unconfirmed, live, dead int64) (done int64, err error) {
	done = enqueued - live - dead
	switch {
	case done < completed:
		return done, fmt.Errorf("the workers report %d jobs completed, the database shows %d done (enqueued %d - live %d - dead %d)",
			completed, done, enqueued, live, dead)
	case done > completed+unconfirmed:
		return done, fmt.Errorf("the database shows %d jobs done (enqueued %d - live %d - dead %d), the workers report only %d completed and %d unconfirmed: %d lost",
			done, enqueued, live, dead, completed, unconfirmed, done-completed-unconfirmed)
	}
	return done, nil
}

// TableCounts reads the jobs still in hopper_jobs (ready, scheduled or
// running) and those in hopper_dead_jobs.
func TableCounts(ctx context.Context, pool *pgxpool.Pool) (live, dead int64, err error) {
	stats, err := hopper.NewClient(pool).GetStats(ctx)
	if err != nil {
		return 0, 0, err
	}
	return stats.Total.Live(), stats.Total.Dead + stats.Total.Cancelled, nil
}

// checkTable is CheckOutcomes for a scratch schema holding scheduled
// far-future jobs besides the enqueued ones, once the worker process has
// stopped.
func checkTable(ctx context.Context, pool *pgxpool.Pool, p *workerProc, enqueued int64, scheduled int) error {
	live, dead, err := TableCounts(ctx, pool)
	if err != nil {
		return err
	}
	_, err = CheckOutcomes(enqueued, p.completed.Load(), p.unconfirmed.Load(), live-int64(scheduled), dead)
	return err
}

// CounterSum adds up a counter family over every label and registry.
func CounterSum(selector string, regs ...*prometheus.Registry) int64 {
	gatherers := make([]prometheus.Gatherer, len(regs))
	for i, r := range regs {
		gatherers[i] = r
	}
	return int64(metricsum.Sum(selector, gatherers...))
}

// ---- continuous ----

// ContinuousResult is produce + work at once.
type ContinuousResult struct {
	Seconds            float64   `json:"seconds"`
	WorkedPerSecond    float64   `json:"worked_per_second"`
	EnqueuedPerSecond  float64   `json:"enqueued_per_second"`
	Samples            []float64 `json:"samples_worked_per_second"`
	WorkerPeakRSSBytes int64     `json:"worker_peak_rss_bytes"`
	WorkerCPUPer1000   float64   `json:"worker_cpu_seconds_per_1000_jobs"`
	PostgresCPUPer1000 float64   `json:"postgres_cpu_seconds_per_1000_jobs,omitempty"`
	// With a scheduled backlog: the same run again with Scheduled
	// far-future jobs in the table, and how much slower it was.
	BacklogWorkedPerSecond float64 `json:"backlog_worked_per_second,omitempty"`
	BacklogSlowdown        float64 `json:"backlog_slowdown,omitempty"`
	// With history: the same run again with the workers keeping every
	// completed job (Config.History), its steady state, how much slower
	// that is than this run's, and what it cost the server.
	History         *ContinuousResult `json:"history,omitempty"`
	HistorySlowdown float64           `json:"history_slowdown,omitempty"`

	// The steady state: the rate per window of WindowSeconds, and the
	// headline, the mean of the last half of the windows (the first half
	// is warm-up). WorkedPerSecond above is the whole run's mean.
	WindowSeconds         float64   `json:"window_seconds"`
	Windows               []float64 `json:"windows_worked_per_second"`
	SteadyWorkedPerSecond float64   `json:"steady_worked_per_second"`
	LastWindowPerSecond   float64   `json:"last_window_worked_per_second"`
	// ClaimBuffersPerJob is the claim statement's shared buffers (hit or
	// read) per job it claimed, per window, from pg_stat_statements; absent
	// when the server does not load it. A claim that walks dead index
	// entries shows here first.
	ClaimBuffersPerJob []float64 `json:"claim_buffers_per_job,omitempty"`
	// Table is the job table at the end of the run (with the snapshot, if
	// one was held, still open).
	Table *TableStats `json:"table,omitempty"`
	// Statements is what each of Hopper's statements cost the server
	// during the run, the most expensive first (pg_stat_statements).
	Statements []StatementCost `json:"statements,omitempty"`
	// LastMinutePerSecond is the mean rate of the run's last minute.
	LastMinutePerSecond float64 `json:"last_minute_worked_per_second"`
	// The pressure the run was under.
	HoldSnapshot bool `json:"hold_snapshot,omitempty"`
	Burst        int  `json:"burst,omitempty"`
	// With a burst: how long it took to drain (the backlog back to what
	// producers keep) from its commit, and the rate meanwhile.
	BurstDrainSeconds   float64 `json:"burst_drain_seconds,omitempty"`
	BurstDrainPerSecond float64 `json:"burst_drain_worked_per_second,omitempty"`
	// Recovery is every window after a held snapshot was released, with
	// the job table's dead tuples and size at its end.
	Recovery []RecoveryWindow `json:"recovery,omitempty"`
}

func runContinuous(ctx context.Context, cfg Config) (*ContinuousResult, error) {
	r, err := continuousOnce(ctx, cfg, 0)
	if err != nil {
		return r, err
	}
	if cfg.Scheduled > 0 {
		withBacklog, err := continuousOnce(ctx, cfg, cfg.Scheduled)
		if err != nil {
			return r, err
		}
		r.BacklogWorkedPerSecond = withBacklog.WorkedPerSecond
		r.BacklogSlowdown = 1 - withBacklog.WorkedPerSecond/r.WorkedPerSecond
	}
	if cfg.History > 0 {
		kept := cfg
		kept.keep = cfg.History
		if r.History, err = continuousOnce(ctx, kept, 0); err != nil {
			return r, fmt.Errorf("with history: %w", err)
		}
		if r.SteadyWorkedPerSecond > 0 {
			r.HistorySlowdown = 1 - r.History.SteadyWorkedPerSecond/r.SteadyWorkedPerSecond
		}
	}
	return r, nil
}

func continuousOnce(ctx context.Context, cfg Config, scheduled int) (*ContinuousResult, error) {
	s, err := newScratch(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	if err := addScheduled(ctx, s.pool, scheduled); err != nil {
		return nil, err
	}
	p, err := startWorkers(cfg, s.url)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = p.stop()
		}
	}()

	var enqueued atomic.Int64
	prodCtx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	maxBacklog := int64(max(20*cfg.BatchSize, 4*cfg.Workers*cfg.Concurrency))
	items := keyedItems(cfg.payload(), cfg.BatchSize, cfg.keyed, "key-")
	var pwg sync.WaitGroup
	perr := make(chan error, cfg.Producers)
	for range cfg.Producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for prodCtx.Err() == nil {
				if enqueued.Load()-p.finished() > maxBacklog {
					time.Sleep(200 * time.Microsecond)
					continue
				}
				// Not cancelled midway: a batch that commits is counted,
				// so that the table can be checked against the counters.
				res, err := noop.EnqueueMany(context.WithoutCancel(prodCtx), s.pool, items)
				if err != nil {
					perr <- err
					return
				}
				enqueued.Add(int64(res.Inserted))
			}
		}()
	}

	pressure := scheduled == 0 // the backlog run repeats the clean one only
	release := func() {}
	if pressure && cfg.HoldSnapshot {
		rollback, err := holdSnapshot(ctx, s.url)
		if err != nil {
			return nil, err
		}
		release = sync.OnceFunc(rollback)
		defer release()
	}

	// Warm up, then measure for cfg.Duration, and on until a job has been
	// worked: a starved run reports a low figure, not none.
	select {
	case err := <-perr:
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.exited:
		return nil, fmt.Errorf("worker process died")
	case <-time.After(2 * time.Second):
	}
	startDone, startEnq, startAt := p.completed.Load(), enqueued.Load(), time.Now()
	startCPU := p.cpu()
	meter := startPGMeter()
	claims := newClaimMeter(ctx, s.pool)
	statements := newStatementMeter(ctx, s.pool)
	perWindow := max(int(cfg.window().Round(time.Second)/time.Second), 1)
	var claimBuffers []float64
	burstDone := make(chan error, 1)
	// burstAt is when the burst committed (0: not yet), burstFrom the jobs
	// finished then; the burst has drained when the backlog is back to
	// what the producers keep (they pause above maxBacklog).
	var burstAt, burstFrom atomic.Int64
	var burstDrained time.Duration
	var burstDrainedJobs int64
	if pressure && cfg.Burst > 0 {
		go func() {
			select {
			case <-prodCtx.Done():
				burstDone <- nil
				return
			case <-time.After(cfg.Duration / 3):
			}
			// A burst arrives at once: COPY, as an import would. Not cut
			// off midway, so that what committed is counted.
			err := enqueueCopy(context.WithoutCancel(prodCtx), s.pool, noop, cfg.Burst, 5000, cfg.payload())
			if err == nil {
				burstFrom.Store(p.finished())
				enqueued.Add(int64(cfg.Burst))
				burstAt.Store(time.Now().UnixNano())
			}
			burstDone <- err
		}()
	} else {
		burstDone <- nil
	}
	var samples []float64
	last := startDone
	for t := time.Now(); time.Since(startAt) < cfg.Duration || last == startDone; {
		if time.Since(startAt) > cfg.Duration+time.Minute {
			meter.seconds()
			return nil, fmt.Errorf("no job worked in %v", time.Since(startAt).Round(time.Second))
		}
		select {
		case err := <-perr:
			meter.seconds()
			return nil, err
		case <-ctx.Done():
			meter.seconds()
			return nil, ctx.Err()
		case <-p.exited:
			meter.seconds()
			return nil, fmt.Errorf("worker process died")
		case <-time.After(time.Until(t.Add(time.Second))):
		}
		t = t.Add(time.Second)
		now := p.completed.Load()
		samples = append(samples, float64(now-last))
		last = now
		if len(samples)%perWindow == 0 {
			if b := claims.window(ctx); b >= 0 {
				claimBuffers = append(claimBuffers, b)
			}
		}
		if at := burstAt.Load(); at != 0 && burstDrained == 0 && enqueued.Load()-p.finished() <= maxBacklog {
			burstDrained = time.Since(time.Unix(0, at))
			burstDrainedJobs = p.finished() - burstFrom.Load()
		}
	}
	secs := time.Since(startAt).Seconds()
	done, enq := p.completed.Load()-startDone, enqueued.Load()-startEnq
	workerCPU := p.cpu() - startCPU
	pgCPU, pgOK := meter.seconds()
	// The table as the pressure left it, then (with a snapshot held) the
	// recovery after releasing it, producers still at work.
	table, err := readTableStats(ctx, s.pool)
	if err != nil {
		return nil, err
	}
	costs := statements.costs(ctx)
	var recovery []RecoveryWindow
	if pressure && cfg.HoldSnapshot && cfg.Recover > 0 {
		release()
		if recovery, err = measureRecovery(ctx, s.pool, p, cfg.Recover, perWindow); err != nil {
			return nil, err
		}
	}
	stopProducing()
	pwg.Wait()
	if err := <-burstDone; err != nil {
		return nil, fmt.Errorf("burst: %w", err)
	}
	r := &ContinuousResult{Table: table, Statements: costs, Recovery: recovery,
		Seconds: secs, WorkedPerSecond: float64(done) / secs, EnqueuedPerSecond: float64(enq) / secs,
		Samples: samples, WorkerCPUPer1000: 1000 * workerCPU / float64(done),
	}
	if pgOK {
		r.PostgresCPUPer1000 = 1000 * pgCPU / float64(done)
	}
	r.WindowSeconds = float64(perWindow)
	r.Windows = windows(samples, perWindow)
	r.SteadyWorkedPerSecond = steady(r.Windows)
	if len(r.Windows) > 0 {
		r.LastWindowPerSecond = r.Windows[len(r.Windows)-1]
	}
	r.LastMinutePerSecond = lastMean(samples, 60)
	r.ClaimBuffersPerJob = claimBuffers
	if pressure {
		r.HoldSnapshot, r.Burst = cfg.HoldSnapshot, cfg.Burst
	}
	if burstDrained > 0 {
		r.BurstDrainSeconds = burstDrained.Seconds()
		r.BurstDrainPerSecond = float64(burstDrainedJobs) / burstDrained.Seconds()
	}
	stopped = true
	if r.WorkerPeakRSSBytes, err = p.stop(); err != nil {
		return nil, err
	}
	select {
	case err := <-perr: // a producer failed after the measurement
		return nil, err
	default:
	}
	// The throughput comes from the worker's counters: check them against
	// the table.
	if err := checkTable(ctx, s.pool, p, enqueued.Load(), scheduled); err != nil {
		return nil, err
	}
	return r, nil
}

func repeat[T any](v T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// addScheduled puts n jobs a year ahead into the table.
func addScheduled(ctx context.Context, pool *pgxpool.Pool, n int) error {
	const chunk = 50_000
	far := time.Now().AddDate(1, 0, 0)
	for done := 0; done < n; done += chunk {
		items := make([]jobs.Item[benchJob], min(chunk, n-done))
		for i := range items {
			items[i].Options = []jobs.EnqueueOption{jobs.RunAt(far.Add(time.Duration(i) * time.Millisecond))}
		}
		if _, err := noop.EnqueueMany(ctx, pool, items, jobs.MaxAttempts(1)); err != nil {
			return err
		}
	}
	if n > 0 {
		return maintain(ctx, pool, "analyze.sql")
	}
	return nil
}

// enqueueCopy sends n ready jobs of kind in COPY batches of batch.
func enqueueCopy(ctx context.Context, pool *pgxpool.Pool, kind *jobs.Kind[benchJob], n, batch int, payload benchJob) error {
	items := jobs.Items(repeat(payload, batch)...)
	for left := n; left > 0; left -= len(items) {
		if _, err := kind.EnqueueMany(ctx, pool, items[:min(len(items), left)]); err != nil {
			return err
		}
	}
	return nil
}

// ---- drain ----

// DrainResult is working off a backlog enqueued beforehand.
type DrainResult struct {
	Jobs               int     `json:"jobs"`
	Seconds            float64 `json:"seconds"`
	JobsPerSecond      float64 `json:"jobs_per_second"`
	WorkerPeakRSSBytes int64   `json:"worker_peak_rss_bytes"`
	// Statements is what each of Hopper's statements cost the server
	// during the drain, the most expensive first (pg_stat_statements).
	Statements []StatementCost `json:"statements,omitempty"`
}

func runDrain(ctx context.Context, cfg Config) (*DrainResult, error) {
	s, err := newScratch(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	if err := addScheduled(ctx, s.pool, cfg.Scheduled); err != nil {
		return nil, err
	}
	if err := enqueueCopy(ctx, s.pool, noop, cfg.Jobs, 5000, cfg.payload()); err != nil {
		return nil, err
	}
	// What autovacuum does after a burst of inserts: the statistics then
	// describe a table of pending jobs only.
	if err := maintain(ctx, s.pool, "vacuum.sql"); err != nil {
		return nil, err
	}
	statements := newStatementMeter(ctx, s.pool)
	p, err := startWorkers(cfg, s.url)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	// Drained when every job's ack was sent; an unconfirmed one may not
	// have committed (the job runs again once its lease expires), so the
	// table has the last word.
	for drained := false; !drained; {
		select {
		case <-ctx.Done():
			_, _ = p.stop()
			return nil, ctx.Err()
		case <-p.exited:
			_ = p.cmd.Wait()
			return nil, fmt.Errorf("worker process died")
		case <-time.After(5 * time.Millisecond):
		}
		if p.finished() < int64(cfg.Jobs) {
			continue
		}
		if p.unconfirmed.Load() == 0 {
			break
		}
		live, _, err := TableCounts(ctx, s.pool)
		if err != nil {
			_, _ = p.stop()
			return nil, err
		}
		drained = live == int64(cfg.Scheduled)
	}
	secs := time.Since(began).Seconds()
	peak, err := p.stop()
	if err != nil {
		return nil, err
	}
	if err := checkTable(ctx, s.pool, p, int64(cfg.Jobs), cfg.Scheduled); err != nil {
		return nil, err
	}
	return &DrainResult{Jobs: cfg.Jobs, Seconds: secs, JobsPerSecond: float64(cfg.Jobs) / secs, WorkerPeakRSSBytes: peak,
		Statements: statements.costs(ctx)}, nil
}

// ---- enqueue ----

// EnqueueResult is COPY batches and single transactional enqueues.
type EnqueueResult struct {
	CopyJobs          int     `json:"copy_jobs"`
	CopyBatchSize     int     `json:"copy_batch_size"`
	CopyJobsPerSecond float64 `json:"copy_jobs_per_second"`
	Singles           int     `json:"singles"`
	SingleP50Ms       float64 `json:"single_p50_ms"`
	SingleP99Ms       float64 `json:"single_p99_ms"`
}

func runEnqueue(ctx context.Context, cfg Config) (*EnqueueResult, error) {
	s, err := newScratch(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	r := &EnqueueResult{CopyJobs: cfg.Jobs, CopyBatchSize: cfg.BatchSize, Singles: cfg.Singles}
	began := time.Now()
	if err := enqueueCopy(ctx, s.pool, noop, cfg.Jobs, cfg.BatchSize, cfg.payload()); err != nil {
		return nil, err
	}
	r.CopyJobsPerSecond = float64(cfg.Jobs) / time.Since(began).Seconds()

	lat := make([]time.Duration, 0, cfg.Singles)
	payload := cfg.payload()
	for range cfg.Singles {
		t0 := time.Now()
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		if _, err := noop.Enqueue(ctx, tx, payload); err != nil {
			_ = tx.Rollback(ctx)
			return nil, err
		}
		if err := tx.Commit(ctx); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t0))
	}
	r.SingleP50Ms, r.SingleP99Ms = ms(percentile(lat, 50)), ms(percentile(lat, 99))
	return r, nil
}

// ---- latency ----

// LatencyResult is pickup latency at idle: enqueue commit to handler start.
type LatencyResult struct {
	Samples int     `json:"samples"`
	P50Ms   float64 `json:"p50_ms"`
	P95Ms   float64 `json:"p95_ms"`
	P99Ms   float64 `json:"p99_ms"`
}

func runLatency(ctx context.Context, cfg Config) (*LatencyResult, error) {
	s, err := newScratch(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	started := make(chan time.Time, 1)
	w, err := worker.New(s.pool, worker.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	if err := worker.Handle(w, noop, func(context.Context, *jobs.Job[benchJob]) error {
		started <- time.Now()
		return nil
	}); err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(runCtx) }()
	defer func() { stop(); <-errc }()
	time.Sleep(200 * time.Millisecond) // let it reach idle

	lat := make([]time.Duration, 0, cfg.Samples)
	for range cfg.Samples {
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		if _, err := noop.Enqueue(ctx, tx, benchJob{}); err != nil {
			return nil, err
		}
		if err := tx.Commit(ctx); err != nil {
			return nil, err
		}
		committed := time.Now()
		select {
		case at := <-started:
			lat = append(lat, max(at.Sub(committed), 0))
		case <-time.After(time.Minute): // a stuck worker, not a slow one
			return nil, fmt.Errorf("a job was not picked up within a minute")
		case err := <-errc:
			return nil, fmt.Errorf("worker stopped: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // idle again
	}
	return &LatencyResult{Samples: len(lat), P50Ms: ms(percentile(lat, 50)), P95Ms: ms(percentile(lat, 95)), P99Ms: ms(percentile(lat, 99))}, nil
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p / 100 * float64(len(s)-1))
	return s[i]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
