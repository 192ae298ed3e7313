package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// benchJob is the payload every benchmark job carries.
type benchJob struct {
	Pad string `json:"pad,omitempty"`
}

var noop = jobs.Define[benchJob]("bench.noop")

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
// completed count on stdout.
type workerProc struct {
	cmd       *exec.Cmd
	completed atomic.Int64
	ready     chan struct{}
	exited    chan struct{}
}

func startWorkers(cfg Config, dbURL string) (*workerProc, error) {
	args := append(cfg.WorkerCommand[1:len(cfg.WorkerCommand):len(cfg.WorkerCommand)],
		"--workers", fmt.Sprint(cfg.Workers), "--concurrency", fmt.Sprint(cfg.Concurrency),
		"--handler-time", cfg.HandlerTime.String())
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
			if n, err := strconv.ParseInt(strings.TrimPrefix(line, "completed "), 10, 64); err == nil {
				p.completed.Store(n)
			}
		}
	}()
	select {
	case <-p.ready:
		return p, nil
	case <-p.exited:
		_ = cmd.Wait()
		return nil, fmt.Errorf("worker process exited at start")
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("worker process did not start")
	}
}

// stop ends the worker process and returns its peak memory.
func (p *workerProc) stop() (peak int64) {
	peak, _ = peakRSS(p.cmd.Process.Pid)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.exited
	_ = p.cmd.Wait()
	return peak
}

func (p *workerProc) cpu() float64 {
	s, _ := cpuSeconds(p.cmd.Process.Pid)
	return s
}

// RunWorkerProcess is the worker side of a benchmark (`hopper bench --role
// worker`): it runs workers workers with a no-op handler (or one that waits
// handlerTime) until ctx ends, printing "ready" and then its completed
// count every 50ms.
func RunWorkerProcess(ctx context.Context, dbURL string, workers, concurrency int, handlerTime time.Duration, out io.Writer) error {
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
	cfg.MaxConns = int32(4 * workers)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	reg := prometheus.NewRegistry()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := range workers {
		r := prometheus.WrapRegistererWith(prometheus.Labels{"instance": fmt.Sprint(i)}, reg)
		w, err := worker.New(pool, worker.Config{Queues: map[string]int{jobs.DefaultQueue: concurrency}, Registerer: r, Logger: quiet})
		if err != nil {
			return err
		}
		if err := worker.Handle(w, noop, func(ctx context.Context, _ *jobs.Job[benchJob]) error {
			if handlerTime > 0 {
				time.Sleep(handlerTime)
			}
			return nil
		}); err != nil {
			return err
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs <- w.Run(runCtx) }()
	}
	fmt.Fprintln(out, "ready")
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	report := func() { fmt.Fprintf(out, "completed %d\n", CounterSum("hopper_jobs_completed_total", reg)) }
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

// CounterSum adds up a counter family over every label and registry.
func CounterSum(name string, regs ...*prometheus.Registry) int64 {
	var sum float64
	for _, r := range regs {
		families, err := r.Gather()
		if err != nil {
			continue
		}
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return int64(sum)
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
}

func runContinuous(ctx context.Context, cfg Config) (*ContinuousResult, error) {
	r, err := continuousOnce(ctx, cfg, 0)
	if err != nil || cfg.Scheduled == 0 {
		return r, err
	}
	withBacklog, err := continuousOnce(ctx, cfg, cfg.Scheduled)
	if err != nil {
		return r, err
	}
	r.BacklogWorkedPerSecond = withBacklog.WorkedPerSecond
	r.BacklogSlowdown = 1 - withBacklog.WorkedPerSecond/r.WorkedPerSecond
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
	defer p.stop()

	var enqueued atomic.Int64
	prodCtx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	maxBacklog := int64(max(20*cfg.BatchSize, 4*cfg.Workers*cfg.Concurrency))
	items := jobs.Items(repeat(cfg.payload(), cfg.BatchSize)...)
	var pwg sync.WaitGroup
	perr := make(chan error, cfg.Producers)
	for range cfg.Producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for prodCtx.Err() == nil {
				if enqueued.Load()-p.completed.Load() > maxBacklog {
					time.Sleep(200 * time.Microsecond)
					continue
				}
				res, err := noop.EnqueueMany(prodCtx, s.pool, items)
				if err != nil {
					if prodCtx.Err() == nil {
						perr <- err
					}
					return
				}
				enqueued.Add(int64(res.Inserted))
			}
		}()
	}

	// Warm up, then measure.
	time.Sleep(2 * time.Second)
	startDone, startEnq, startAt := p.completed.Load(), enqueued.Load(), time.Now()
	startCPU := p.cpu()
	meter := startPGMeter()
	var samples []float64
	last := startDone
	for t := time.Now(); time.Since(startAt) < cfg.Duration; {
		select {
		case err := <-perr:
			return nil, err
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Until(t.Add(time.Second))):
		}
		t = t.Add(time.Second)
		now := p.completed.Load()
		samples = append(samples, float64(now-last))
		last = now
	}
	secs := time.Since(startAt).Seconds()
	done, enq := p.completed.Load()-startDone, enqueued.Load()-startEnq
	workerCPU := p.cpu() - startCPU
	pgCPU, pgOK := meter.seconds()
	stopProducing()
	pwg.Wait()
	r := &ContinuousResult{
		Seconds: secs, WorkedPerSecond: float64(done) / secs, EnqueuedPerSecond: float64(enq) / secs,
		Samples: samples, WorkerCPUPer1000: 1000 * workerCPU / float64(max(done, 1)),
	}
	if pgOK {
		r.PostgresCPUPer1000 = 1000 * pgCPU / float64(max(done, 1))
	}
	r.WorkerPeakRSSBytes = p.stop()
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
		rows := make([]db.EnqueueBatchAtParams, min(chunk, n-done))
		for i := range rows {
			rows[i] = db.EnqueueBatchAtParams{Queue: jobs.DefaultQueue, Kind: noop.Name(), Version: 1,
				Payload: json.RawMessage(`{}`), RunAt: far.Add(time.Duration(i) * time.Millisecond), State: "scheduled", MaxAttempts: 1}
		}
		if _, err := db.New(pool).EnqueueBatchAt(ctx, rows); err != nil {
			return err
		}
	}
	if n > 0 {
		return maintain(ctx, pool, "analyze.sql")
	}
	return nil
}

// enqueueCopy sends n ready jobs in COPY batches of batch.
func enqueueCopy(ctx context.Context, pool *pgxpool.Pool, n, batch int, payload benchJob) error {
	items := jobs.Items(repeat(payload, batch)...)
	for left := n; left > 0; left -= len(items) {
		if _, err := noop.EnqueueMany(ctx, pool, items[:min(len(items), left)]); err != nil {
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
	if err := enqueueCopy(ctx, s.pool, cfg.Jobs, 5000, cfg.payload()); err != nil {
		return nil, err
	}
	if err := maintain(ctx, s.pool, "vacuum.sql"); err != nil {
		return nil, err
	}
	p, err := startWorkers(cfg, s.url)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	for p.completed.Load() < int64(cfg.Jobs) {
		select {
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-p.exited:
			return nil, fmt.Errorf("worker process died")
		case <-time.After(5 * time.Millisecond):
		}
	}
	secs := time.Since(began).Seconds()
	return &DrainResult{Jobs: cfg.Jobs, Seconds: secs, JobsPerSecond: float64(cfg.Jobs) / secs, WorkerPeakRSSBytes: p.stop()}, nil
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
	if err := enqueueCopy(ctx, s.pool, cfg.Jobs, cfg.BatchSize, cfg.payload()); err != nil {
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
		case <-time.After(10 * time.Second):
			return nil, fmt.Errorf("a job was not picked up within 10s")
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
