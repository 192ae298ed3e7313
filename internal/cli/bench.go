package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/hopperq/hopper/internal/bench"
)

func benchCommand() *command {
	cfg := bench.Config{}
	var asJSON bool
	var role string
	return &command{
		name:    "bench",
		args:    "[--mode continuous|drain|enqueue|latency|all] [--baseline] [--json] [flags]",
		summary: "measure throughput, latency, memory and PostgreSQL CPU on a scratch schema, with a pgbench raw-SQL baseline",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&cfg.Mode, "mode", "all", "continuous, drain, enqueue, latency or all")
			fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "continuous and baseline: how long to measure")
			fs.IntVar(&cfg.Jobs, "jobs", 1_000_000, "drain: backlog size; enqueue: jobs sent with COPY")
			fs.IntVar(&cfg.Workers, "workers", 2, "worker instances in the worker process")
			fs.IntVar(&cfg.Concurrency, "concurrency", 1000, "handler slots per worker")
			fs.IntVar(&cfg.BatchSize, "batch-size", 5000, "producer and COPY batch size (also the baseline's)")
			fs.IntVar(&cfg.Producers, "producers", 2, "producer connections (continuous)")
			fs.IntVar(&cfg.PayloadSize, "payload-size", 0, "bytes of padding in each payload")
			fs.DurationVar(&cfg.HandlerTime, "handler-time", 0, "how long each handler works (0: no-op)")
			fs.IntVar(&cfg.Scheduled, "scheduled", 0, "continuous: measure again with this many far-future jobs in the table; drain: add them first")
			fs.BoolVar(&cfg.Baseline, "baseline", false, "also run pgbench's insert / SKIP LOCKED claim / delete cycle and report ratios")
			fs.IntVar(&cfg.Singles, "singles", 2000, "enqueue: single transactional enqueues timed")
			fs.IntVar(&cfg.Samples, "samples", 300, "latency: jobs timed")
			fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
			fs.StringVar(&role, "role", "", "internal: 'worker' runs the benchmark's worker process")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("%w: bench takes no argument", errUsage)
			}
			if role == "worker" {
				return bench.RunWorkerProcess(e.ctx, e.url(), cfg.Workers, cfg.Concurrency, cfg.HandlerTime, e.stdout)
			}
			switch cfg.Mode {
			case "continuous", "drain", "enqueue", "latency", "all":
			default:
				return fmt.Errorf("%w: unknown mode %q", errUsage, cfg.Mode)
			}
			if cfg.Duration < time.Second || cfg.Jobs < 1 || cfg.Workers < 1 || cfg.Concurrency < 1 || cfg.BatchSize < 1 ||
				cfg.Producers < 1 || cfg.PayloadSize < 0 || cfg.HandlerTime < 0 || cfg.Scheduled < 0 || cfg.Singles < 1 || cfg.Samples < 1 {
				return fmt.Errorf("%w: sizes and counts must be positive, --duration at least 1s", errUsage)
			}
			pool, err := e.connect() // fail early, with the usual message
			if err != nil {
				return err
			}
			pool.Close()
			self, err := os.Executable()
			if err != nil {
				return err
			}
			cfg.DatabaseURL = e.url()
			cfg.WorkerCommand = []string{self, "bench", "--role", "worker"}
			cfg.Log = e.stderr
			if !asJSON {
				cfg.Log = e.stdout
			}
			report, err := bench.Run(e.ctx, cfg)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(e.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(report)
			}
			printBench(e.stdout, report)
			return nil
		},
	}
}

func printBench(w io.Writer, r *bench.Report) {
	m := r.Machine
	fmt.Fprintf(w, "\nmachine: %d CPUs, %s/%s, %s, PostgreSQL %s\n", m.CPUs, m.GoOS, m.GoArch, m.Go, m.Postgres)
	if c := r.Continuous; c != nil {
		fmt.Fprintf(w, "continuous: %.0f jobs/s worked, %.0f jobs/s enqueued over %.0fs; worker peak RSS %.0f MB; CPU per 1000 jobs: worker %.3fs, PostgreSQL %.3fs\n",
			c.WorkedPerSecond, c.EnqueuedPerSecond, c.Seconds, float64(c.WorkerPeakRSSBytes)/1e6, c.WorkerCPUPer1000, c.PostgresCPUPer1000)
		if c.BacklogWorkedPerSecond > 0 {
			fmt.Fprintf(w, "  with the scheduled backlog: %.0f jobs/s (%.1f%% slower)\n", c.BacklogWorkedPerSecond, 100*c.BacklogSlowdown)
		}
	}
	if d := r.Drain; d != nil {
		fmt.Fprintf(w, "drain: %d jobs in %.1fs = %.0f jobs/s; worker peak RSS %.0f MB\n", d.Jobs, d.Seconds, d.JobsPerSecond, float64(d.WorkerPeakRSSBytes)/1e6)
	}
	if e := r.Enqueue; e != nil {
		fmt.Fprintf(w, "enqueue: COPY %.0f jobs/s (batches of %d); single transactional enqueue p50 %.2f ms, p99 %.2f ms\n",
			e.CopyJobsPerSecond, e.CopyBatchSize, e.SingleP50Ms, e.SingleP99Ms)
	}
	if l := r.Latency; l != nil {
		fmt.Fprintf(w, "pickup latency at idle: p50 %.2f ms, p95 %.2f ms, p99 %.2f ms (%d jobs)\n", l.P50Ms, l.P95Ms, l.P99Ms, l.Samples)
	}
	if b := r.Baseline; b != nil {
		fmt.Fprintf(w, "baseline (pgbench, %d clients, batch %d): %.0f jobs/s; CPU per 1000 jobs: pgbench %.3fs, PostgreSQL %.3fs\n",
			b.Clients, b.BatchSize, b.JobsPerSecond, b.ClientCPUPer1000, b.PostgresCPUPer1000)
		for k, v := range r.Ratios {
			fmt.Fprintf(w, "  ratio %s: %.2f\n", k, v)
		}
	}
}
