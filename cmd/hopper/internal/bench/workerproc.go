package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/metricsum"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// The worker process every mode runs its workers in, and the check of its
// counters against the table.

// workerProc is a worker process started for a measurement; it reports its
// counters on stdout: jobs completed, and results unconfirmed (a job's
// ack sent, its reply lost: the job may be done or not, only the table
// tells).
type workerProc struct {
	cmd         *exec.Cmd
	completed   atomic.Int64
	unconfirmed atomic.Int64
	dead        atomic.Int64 // jobs the workers moved to the dead table
	ready       chan struct{}
	exited      chan struct{}

	mu     sync.Mutex
	traces []jobTrace // the traced jobs worked, as reported
}

// finished is every job whose ack was sent: completed, or perhaps
// completed.
func (p *workerProc) finished() int64 { return p.completed.Load() + p.unconfirmed.Load() }

// startWorkers starts the worker process of a measurement; label names
// it in its profiles' files.
func startWorkers(cfg Config, dbURL, label string) (*workerProc, error) {
	args := append(cfg.WorkerCommand[1:len(cfg.WorkerCommand):len(cfg.WorkerCommand)],
		"--workers", fmt.Sprint(cfg.Workers), "--concurrency", fmt.Sprint(cfg.Concurrency), "--queue-count", fmt.Sprint(max(1, cfg.queues)),
		"--handler-time", cfg.HandlerTime.String(), "--keep-history", cfg.keep.String(),
		"--dead-retention", cfg.deadRetention.String(), fmt.Sprintf("--ticks=%t", cfg.ticks),
		// always explicit: the flags' defaults are the flow modes' own
		fmt.Sprintf("--fair=%t", cfg.flow.fair), "--key-limit", fmt.Sprint(cfg.flow.keyLimit),
		"--rate", fmt.Sprint(cfg.flow.rate), "--rate-per", cfg.flow.ratePer.String(),
		fmt.Sprintf("--rate-exact-starts=%t", cfg.flow.rateExactStarts))
	cmd := exec.Command(cfg.WorkerCommand[0], args...)
	cmd.Env = append(append(os.Environ(), "DATABASE_URL="+dbURL), profileEnv(cfg, label)...)
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
			var completed, unconfirmed, dead int64
			if _, err := fmt.Sscanf(line, workerReport, &completed, &unconfirmed, &dead); err == nil {
				p.completed.Store(completed)
				p.unconfirmed.Store(unconfirmed)
				p.dead.Store(dead)
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
const workerReport = "completed %d unconfirmed %d dead %d"

// WorkerOptions is how the benchmark's worker process runs its workers.
type WorkerOptions struct {
	Workers     int           // worker instances
	Concurrency int           // handler slots per worker
	Queues      int           // queues served, the slots split evenly (0 or 1: the default queue)
	HandlerTime time.Duration // how long each handler waits (0: no-op)
	Keep        time.Duration // how long completed jobs are kept (0: not), workflow steps included
	// DeadRetention is how long dead jobs are kept (0: for ever).
	DeadRetention time.Duration
	// Ticks fires the soak's schedule: a bench.tick job every second in
	// the queue tickQueue, whose completed jobs are kept a day, so that
	// the ticks fired can be counted.
	Ticks bool
	// Flow control of the default queue: the zero values are none.
	Fair     bool
	KeyLimit int
	Rate     int
	RatePer  time.Duration
	// RateExactStarts counts each claim from its last handler start.
	RateExactStarts bool
}

// queueSlots splits the worker's slots evenly over its queues (at least
// one each).
func (o WorkerOptions) queueSlots() map[string]int {
	names := queueNames(o.Queues)
	slots := map[string]int{}
	for _, name := range names {
		slots[name] = max(1, o.Concurrency/len(names))
	}
	if o.Ticks {
		slots[tickQueue] = 1
	}
	return slots
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
// traced job worked. It also runs the durable mode's durable jobs
// (handleDurable).
func RunWorkerProcess(ctx context.Context, dbURL string, o WorkerOptions, out io.Writer) (err error) {
	stopProfiles, err := startProfiles()
	if err != nil {
		return err
	}
	defer func() {
		if perr := stopProfiles(); err == nil {
			err = perr
		}
	}()
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
		wcfg := worker.Config{Queues: o.queueSlots(), Registerer: r, Logger: quiet,
			KeepHistoryByQueue: map[string]time.Duration{jobs.DefaultQueue: o.Keep, tickQueue: 24 * time.Hour}, FlowControl: o.flowControl(),
			DeadRetention: o.DeadRetention}
		if o.Keep > 0 {
			wcfg.KeepWorkflowSteps = o.Keep
			// Pruning runs on the sweep interval (5s by default): a keep
			// shorter than two of those, as in a CI-size soak, is pruned
			// twice per keep instead, so that the history holds what its
			// keep says rather than up to three keeps' worth.
			if o.Keep < 10*time.Second {
				wcfg.SweepInterval = max(o.Keep/2, 100*time.Millisecond)
			}
			// Partitions a quarter of the keep wide, so that a row outlives
			// its keep by at most a quarter; a keep too short for the
			// narrowest partition (1 minute) keeps none and prunes rows.
			wcfg.HistoryPartitionWidth = -1
			if w := o.Keep / 4; w >= time.Minute {
				wcfg.HistoryPartitionWidth = w
			}
		}
		w, err := worker.New(pool, wcfg)
		if err != nil {
			return err
		}
		if err := handleSoak(w, o.Ticks); err != nil {
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
		if err := handleDurable(w, work); err != nil {
			return err
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs <- w.Run(runCtx) }()
	}
	say("ready")
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	report := func() {
		say(workerReport, CounterSum(CompletedCounter, reg), CounterSum(UnconfirmedCounter, reg), CounterSum(DeadCounter, reg))
	}
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
	DeadCounter        = `hopper_job_outcomes_total{outcome="dead"}`
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
