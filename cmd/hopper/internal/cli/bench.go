package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hopperq/hopper/cmd/hopper/internal/bench"
	"github.com/hopperq/hopper/jobs"
)

func benchCommand() *command {
	cfg := bench.Config{}
	var asJSON bool
	var role string
	var keep, deadRetention time.Duration
	var fair, exactStarts, ticks bool
	var drainSizes, queueCounts string
	var queueCount int
	return &command{
		name:    "bench",
		args:    "[--mode continuous|drain|enqueue|latency|all|noisy|keys|rate|flow|queues|sequences|workflows|durable|soak|retention|citus] [--drain-sizes N,N,…] [--queues N,N,…] [--baseline] [--json] [flags]",
		summary: "measure throughput, latency, memory and PostgreSQL CPU on a scratch schema, with a pgbench raw-SQL baseline",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&cfg.Mode, "mode", "all", "continuous, drain, enqueue, latency or all (those four); noisy, keys, rate or flow (those three); queues; sequences; workflows; durable; soak; retention; citus (a Citus formation of its own, plain PostgreSQL beside it)")
			durationVar(fs, &cfg.Duration, "duration", time.Minute, "continuous and baseline: how long to measure (the steady state is the last half)")
			durationVar(fs, &cfg.Window, "window", 10*time.Second, "continuous and baseline: the length of one reported window")
			fs.BoolVar(&cfg.HoldSnapshot, "hold-snapshot", false, "continuous: hold a REPEATABLE READ snapshot open for the whole run (a long report, an idle-in-transaction session)")
			fs.IntVar(&cfg.Burst, "burst", 0, "continuous: this many ready jobs arrive at once a third of the way in (--pressure: 1000000)")
			durationVar(fs, &cfg.Recover, "recover", 0, "with --hold-snapshot: release the snapshot after --duration and measure this much longer (--pressure: 6m)")
			fs.BoolVar(&cfg.Pressure, "pressure", false, "after the other modes: a continuous run with a snapshot held for --hold-for then released, and one with a --burst, compared with the clean runs")
			durationVar(fs, &cfg.HoldFor, "hold-for", 5*time.Minute, "--pressure: how long the snapshot is held")
			fs.IntVar(&cfg.Jobs, "jobs", 1_000_000, "drain: backlog size; enqueue: jobs sent with COPY")
			fs.StringVar(&drainSizes, "drain-sizes", "", "drain: drain once per backlog size instead of --jobs, comma-separated (e.g. 20000,50000,500000), each analyzed after its enqueue")
			fs.StringVar(&queueCounts, "queues", "1,10,50,200", "queues: drain --jobs once per queue count, comma-separated, the worker's --concurrency split evenly over the queues")
			fs.IntVar(&queueCount, "queue-count", 1, "internal: the worker process serves this many queues")
			fs.IntVar(&cfg.Workers, "workers", 2, "worker instances in the worker process")
			fs.IntVar(&cfg.Concurrency, "concurrency", 1000, "handler slots per worker")
			fs.IntVar(&cfg.BatchSize, "batch-size", 5000, "producer and COPY batch size (also the baseline's)")
			fs.IntVar(&cfg.Producers, "producers", 2, "producer connections (continuous)")
			fs.IntVar(&cfg.PayloadSize, "payload-size", 0, "bytes of padding in each payload")
			durationVar(fs, &cfg.HandlerTime, "handler-time", 0, "how long each handler works (0: no-op)")
			fs.IntVar(&cfg.Scheduled, "scheduled", 0, "continuous: measure again with this many far-future jobs in the table; drain: add them first")
			durationVar(fs, &cfg.History, "history", 0, "continuous: measure again with the workers keeping every completed job in the history this long (e.g. 30s: pruned as they expire)")
			durationVar(fs, &keep, "keep-history", 0, "internal: the worker process keeps completed jobs this long")
			durationVar(fs, &deadRetention, "dead-retention", 0, "internal: the worker process keeps dead jobs this long (0: for ever)")
			fs.BoolVar(&ticks, "ticks", false, "internal: the worker process fires the soak's schedule")
			fs.BoolVar(&cfg.Baseline, "baseline", false, "also run pgbench's insert / SKIP LOCKED claim / delete cycle and report ratios")
			fs.IntVar(&cfg.Singles, "singles", 2000, "enqueue: single transactional enqueues timed")
			fs.IntVar(&cfg.Samples, "samples", 300, "latency: jobs timed")
			fs.BoolVar(&cfg.ScratchCluster, "scratch-cluster", false, "start a throwaway PostgreSQL cluster with production defaults for the run (initdb, own port), removed afterwards")
			fs.IntVar(&cfg.Flood, "flood", 200_000, "noisy: tenant A's jobs, enqueued at once")
			fs.IntVar(&cfg.Neighbours, "neighbours", 10, "noisy: tenants enqueuing after A (B, C …; at most 25)")
			fs.IntVar(&cfg.NeighbourJobs, "neighbour-jobs", 100, "noisy: each neighbour's jobs")
			fs.IntVar(&cfg.NoisyConcurrency, "noisy-concurrency", 100, "noisy: handler slots per worker")
			durationVar(fs, &cfg.NoisyHandlerTime, "noisy-handler-time", 2*time.Millisecond, "noisy: how long each handler works")
			fs.IntVar(&cfg.Keys, "keys", 1000, "keys: distinct concurrency keys; sequences: distinct concurrency keys and sequence keys")
			fs.IntVar(&cfg.KeyLimit, "key-limit", 5, "keys: running jobs allowed per key (0: the keys with no flow control, what a key costs by itself); sequences: the limit of the flow-controlled runs (at least 1)")
			durationVar(fs, &cfg.SequenceDuration, "sequence-duration", 20*time.Second, "sequences: how long each of its eight continuous runs measures (keyless, keys, keys with --key-limit, sequences, then the reverse)")
			fs.BoolVar(&cfg.Explain, "explain", false, "sequences: also print EXPLAIN (ANALYZE, BUFFERS) of the sequence promotion and of DequeueQueues over --explain-jobs sequence jobs in --keys keys; workflows: of acknowledgements' DELETE with and without workflow steps")
			fs.IntVar(&cfg.ExplainJobs, "explain-jobs", 100_000, "sequences, with --explain: the jobs in the table explained")
			fs.IntVar(&cfg.Workflows.Diamonds, "diamonds", 10_000, "workflows: diamond workflows (1 → 3 → 1 no-op steps) drained, against 5 × as many plain jobs")
			fs.IntVar(&cfg.Workflows.TrickleRate, "trickle-rate", 50, "workflows: diamonds enqueued per second to time parent → child latency")
			durationVar(fs, &cfg.Workflows.TrickleDuration, "trickle-duration", 5*time.Second, "workflows: how long the trickle of diamonds runs")
			fs.IntVar(&cfg.Workflows.BatchJobs, "batch-jobs", 100_000, "workflows: jobs of the batch timed with its callback (jobs.NewBatch)")
			fs.IntVar(&cfg.Durable.Jobs, "durable-jobs", 5000, "durable: durable jobs of 10 worker.Step calls drained, against 10 × as many plain jobs")
			fs.IntVar(&cfg.Durable.Calls, "durable-calls", 2000, "durable: calls of worker.StepTx, and of a plain transaction, timed one job at a time")
			durationVar(fs, &cfg.Soak.Duration, "soak-duration", time.Hour, "soak: how long the mixed load runs")
			durationVar(fs, &cfg.Soak.Sample, "soak-sample", time.Minute, "soak: how often the tables' sizes, dead tuples, autovacuums and the rates are sampled")
			fs.IntVar(&cfg.Soak.Rate, "soak-rate", 2000, "soak: jobs offered per second (10% sequence jobs, 10% workflow steps, 1% failing, the rest plain; and a schedule's job every second)")
			durationVar(fs, &cfg.Soak.Keep, "soak-keep", 5*time.Minute, "soak: how long completed jobs (workflow steps too) and dead jobs are kept")
			fs.StringVar(&cfg.Soak.Chart, "soak-chart", "", "soak: write an SVG chart of the samples to this file")
			fs.Int64Var(&cfg.Retention.Kept, "retention-kept", 10_000_000, "retention: completed jobs kept in the history; a 24th of them expired, removed by DELETE batches and by dropping their partition")
			fs.IntVar(&cfg.Citus.Jobs, "citus-jobs", 20_000, "citus: each drain's jobs, split evenly over its shards")
			fs.IntVar(&cfg.Citus.Rounds, "citus-rounds", 2, "citus: every setup's drain, repeated in turn")
			fs.IntVar(&cfg.Rate, "rate", 500, "rate: jobs allowed per --rate-per, across the worker processes")
			durationVar(fs, &cfg.RatePer, "rate-per", time.Second, "rate: the limit's interval")
			fs.IntVar(&cfg.RateProcesses, "rate-processes", 3, "rate: worker processes sharing the limit")
			durationVar(fs, &cfg.RateDuration, "rate-duration", 30*time.Second, "rate: how long to measure")
			fs.BoolVar(&fair, "fair", false, "internal: the worker process claims fairly across keys")
			fs.BoolVar(&exactStarts, "rate-exact-starts", false, "internal: the worker process's rate limit counts claims from their last handler start")
			fs.StringVar(&cfg.ProfileDir, "profile", "", "write each worker process's CPU and allocation profiles into this directory (created if missing; read them with go tool pprof -top FILE)")
			fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
			fs.StringVar(&role, "role", "", "internal: 'worker' runs the benchmark's worker process")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("%w: bench takes no argument", errUsage)
			}
			if role == "worker" {
				return bench.RunWorkerProcess(e.ctx, e.url(), bench.WorkerOptions{Workers: cfg.Workers, Concurrency: cfg.Concurrency, Queues: queueCount,
					HandlerTime: cfg.HandlerTime, Keep: keep, DeadRetention: deadRetention, Ticks: ticks, Fair: fair, KeyLimit: cfg.KeyLimit, Rate: cfg.Rate, RatePer: cfg.RatePer, RateExactStarts: exactStarts}, e.stdout)
			}
			switch cfg.Mode {
			case "continuous", "drain", "enqueue", "latency", "all", "noisy", "keys", "rate", "flow", "queues", "sequences", "workflows", "durable", "soak", "retention", "citus":
			default:
				return fmt.Errorf("%w: unknown mode %q%s", errUsage, cfg.Mode,
					didYouMean(cfg.Mode, "", []string{"continuous", "drain", "enqueue", "latency", "all", "noisy", "keys", "rate", "flow", "queues", "sequences", "workflows", "durable", "soak", "retention", "citus"}))
			}
			if cfg.ProfileDir != "" {
				if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
					return fmt.Errorf("--profile: %w", err)
				}
			}
			sizes, err := parseCounts("--drain-sizes", "job counts", drainSizes)
			if err != nil {
				return err
			}
			cfg.DrainSizes = sizes
			if cfg.QueueCounts, err = parseCounts("--queues", "queue counts", queueCounts); err != nil {
				return err
			}
			if cfg.Mode == "queues" && len(cfg.QueueCounts) == 0 {
				return fmt.Errorf("%w: --mode queues needs --queues", errUsage)
			}
			if cfg.Duration < time.Second || cfg.Jobs < 1 || cfg.Workers < 1 || cfg.Concurrency < 1 || cfg.BatchSize < 1 ||
				cfg.Producers < 1 || cfg.PayloadSize < 0 || cfg.HandlerTime < 0 || cfg.Scheduled < 0 || cfg.Singles < 1 || cfg.Samples < 1 ||
				cfg.Window < time.Second || cfg.Burst < 0 || cfg.Recover < 0 || cfg.HoldFor < time.Second || cfg.History < 0 {
				return fmt.Errorf("%w: sizes and counts must be positive, --duration and --window at least 1s", errUsage)
			}
			if cfg.Flood < 1 || cfg.Neighbours < 1 || cfg.Neighbours > 25 || cfg.NeighbourJobs < 1 || cfg.NoisyConcurrency < 1 || cfg.NoisyHandlerTime < 0 ||
				cfg.Keys < 1 || cfg.KeyLimit < 0 || cfg.Rate < 1 || cfg.RatePer < time.Millisecond || cfg.RateProcesses < 1 || cfg.RateDuration < time.Second {
				return fmt.Errorf("%w: flow-control sizes must be positive (--key-limit may be 0), --neighbours at most 25, --rate-per at least 1ms, --rate-duration at least 1s", errUsage)
			}
			if cfg.Mode == "sequences" && (cfg.KeyLimit < 1 || cfg.SequenceDuration < time.Second || cfg.ExplainJobs < 1) {
				return fmt.Errorf("%w: --mode sequences needs --key-limit at least 1, --sequence-duration at least 1s and --explain-jobs positive", errUsage)
			}
			if o := cfg.Workflows; cfg.Mode == "workflows" && (o.Diamonds < 1 || o.TrickleRate < 1 || o.TrickleRate > 1000 ||
				o.TrickleDuration < time.Second || o.BatchJobs < 1 || o.BatchJobs >= jobs.MaxWorkflowSteps) {
				return fmt.Errorf("%w: --mode workflows needs --diamonds positive, --trickle-rate from 1 to 1000, --trickle-duration at least 1s and --batch-jobs from 1 to %d",
					errUsage, jobs.MaxWorkflowSteps-1)
			}
			if o := cfg.Soak; cfg.Mode == "soak" && (o.Duration < time.Second || o.Sample < time.Second || o.Sample > o.Duration || o.Rate < 10 || o.Keep < time.Second) {
				return fmt.Errorf("%w: --mode soak needs --soak-duration and --soak-sample at least 1s (the sample no longer than the run), --soak-rate at least 10 and --soak-keep at least 1s", errUsage)
			}
			if cfg.Mode == "retention" && cfg.Retention.Kept < 24_000 {
				return fmt.Errorf("%w: --mode retention needs --retention-kept at least 24000", errUsage)
			}
			if cfg.Mode == "citus" && (cfg.Citus.Jobs < 2 || cfg.Citus.Rounds < 1) {
				return fmt.Errorf("%w: --mode citus needs --citus-jobs at least 2 and --citus-rounds at least 1", errUsage)
			}
			if cfg.Mode == "durable" && (cfg.Durable.Jobs < 1 || cfg.Durable.Calls < 1) {
				return fmt.Errorf("%w: --mode durable needs --durable-jobs and --durable-calls positive", errUsage)
			}
			if !cfg.ScratchCluster { // the scratch cluster replaces the default database
				pool, err := e.connect() // fail early, with the usual message
				if err != nil {
					return err
				}
				pool.Close()
			}
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
			if report != nil && report.Server != nil {
				// Loud, on stderr, in both modes: figures taken under these
				// conditions are not what users will see.
				defer func() {
					for _, w := range report.Server.Warnings {
						fmt.Fprintf(e.stderr, "WARNING: %s\n", w)
					}
				}()
			}
			if err != nil {
				if report != nil && !asJSON { // what was measured before the failure
					printBench(e.stdout, report)
				}
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

// parseCounts reads a flag of positive counts separated by commas
// (--drain-sizes, --queues)
// ("" is none).
func parseCounts(flagName, what, s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var sizes []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w: %s takes positive %s separated by commas, not %q", errUsage, flagName, what, s)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

func printBench(w io.Writer, r *bench.Report) {
	printServer(w, r.Server)
	m := r.Machine
	fmt.Fprintf(w, "machine: %d CPUs, %s/%s, %s, PostgreSQL %s\n", m.CPUs, m.GoOS, m.GoArch, m.Go, m.Postgres)
	if c := r.Continuous; c != nil {
		printContinuous(w, "continuous", c)
	}
	if d := r.Drain; d != nil {
		printDrain(w, d)
	}
	for _, d := range r.Drains {
		printDrain(w, d)
	}
	for _, q := range r.Queues {
		fmt.Fprintf(w, "queues: %d jobs over %d queues × %d slots in %.1fs = %.0f jobs/s (%.2f of %d queue(s))\n",
			q.Jobs, q.Queues, q.SlotsPerQueue, q.Seconds, q.JobsPerSecond, q.Ratio, r.Queues[0].Queues)
		printStatements(w, q.Statements)
	}
	if e := r.Enqueue; e != nil {
		fmt.Fprintf(w, "enqueue: COPY %.0f jobs/s (batches of %d); single transactional enqueue p50 %.2f ms, p99 %.2f ms\n",
			e.CopyJobsPerSecond, e.CopyBatchSize, e.SingleP50Ms, e.SingleP99Ms)
	}
	if l := r.Latency; l != nil {
		fmt.Fprintf(w, "pickup latency at idle: p50 %.2f ms, p95 %.2f ms, p99 %.2f ms (%d jobs)\n", l.P50Ms, l.P95Ms, l.P99Ms, l.Samples)
	}
	if p := r.Pressure; p != nil {
		printContinuous(w, "pressure, snapshot held", p.Snapshot)
		printContinuous(w, "pressure, burst", p.Burst)
	}
	printFlow(w, r)
	if r.Sequences != nil {
		r.Sequences.Print(w)
	}
	if r.Workflows != nil {
		r.Workflows.Print(w)
	}
	if r.Durable != nil {
		r.Durable.Print(w)
	}
	if r.Soak != nil {
		r.Soak.Print(w)
	}
	if r.Retention != nil {
		r.Retention.Print(w)
	}
	if r.Citus != nil {
		r.Citus.Print(w)
	}
	if b := r.Baseline; b != nil {
		fmt.Fprintf(w, "baseline (pgbench, %d clients, batch %d): %.0f jobs/s; CPU per 1000 jobs: pgbench %.3fs, PostgreSQL %.3fs\n",
			b.Clients, b.BatchSize, b.JobsPerSecond, b.ClientCPUPer1000, b.PostgresCPUPer1000)
		if len(b.Windows) > 0 {
			fmt.Fprintf(w, "  steady state: %.0f jobs/s; windows: %s\n", b.SteadyJobsPerSecond, rates(b.Windows))
		}
	}
	names := make([]string, 0, len(r.Ratios))
	for k := range r.Ratios {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(w, "ratio %s: %.2f\n", k, r.Ratios[k])
	}
}

func printDrain(w io.Writer, d *bench.DrainResult) {
	fmt.Fprintf(w, "drain: %d jobs in %.1fs = %.0f jobs/s; worker peak RSS %.0f MB\n", d.Jobs, d.Seconds, d.JobsPerSecond, float64(d.WorkerPeakRSSBytes)/1e6)
	printStatements(w, d.Statements)
}

func printStatements(w io.Writer, stmts []bench.StatementCost) {
	for i, st := range stmts {
		if i == 0 {
			fmt.Fprintf(w, "  server time by statement (pg_stat_statements):\n")
		}
		if i == 6 {
			break
		}
		fmt.Fprintf(w, "    %-14s %9d calls  %9.0f ms  %7.3f ms/call  %8.1f buffers/call\n", st.Name, st.Calls, st.TotalMs, st.MeanMs, st.BuffersPerCall)
	}
}

func printContinuous(w io.Writer, label string, c *bench.ContinuousResult) {
	fmt.Fprintf(w, "%s: %.0f jobs/s worked, %.0f jobs/s enqueued over %.0fs; worker peak RSS %.0f MB; CPU per 1000 jobs: worker %.3fs, PostgreSQL %.3fs\n",
		label, c.WorkedPerSecond, c.EnqueuedPerSecond, c.Seconds, float64(c.WorkerPeakRSSBytes)/1e6, c.WorkerCPUPer1000, c.PostgresCPUPer1000)
	fmt.Fprintf(w, "  steady state (mean of the last half of %.0fs windows): %.0f jobs/s; last minute %.0f jobs/s; last window %.0f jobs/s\n",
		c.WindowSeconds, c.SteadyWorkedPerSecond, c.LastMinutePerSecond, c.LastWindowPerSecond)
	fmt.Fprintf(w, "  windows: %s\n", rates(c.Windows))
	if len(c.ClaimBuffersPerJob) > 0 {
		fmt.Fprintf(w, "  claim buffers per claimed job, per window (pg_stat_statements): %s\n", rates(c.ClaimBuffersPerJob))
	}
	if c.HoldSnapshot || c.Burst > 0 {
		fmt.Fprintf(w, "  under pressure: snapshot held %v, burst of %d jobs\n", c.HoldSnapshot, c.Burst)
	}
	if c.BurstDrainSeconds > 0 {
		fmt.Fprintf(w, "  the burst drained in %.1fs from its commit: %.0f jobs/s\n", c.BurstDrainSeconds, c.BurstDrainPerSecond)
	} else if c.Burst > 0 {
		fmt.Fprintf(w, "  the burst had not drained when the run ended\n")
	}
	if t := c.Table; t != nil {
		fmt.Fprintf(w, "  hopper_jobs at the end: %d dead / %d live tuples, table %.1f MB, indexes %.1f MB (ready index %.1f MB), autovacuums %d\n",
			t.DeadTuples, t.LiveTuples, float64(t.TableBytes)/1e6, float64(t.IndexBytes)/1e6, float64(t.ReadyIndexBytes)/1e6, t.Autovacuums)
	}
	printStatements(w, c.Statements)
	for i, rw := range c.Recovery {
		if i == 0 {
			fmt.Fprintf(w, "  after releasing the snapshot, per %.0fs window: jobs/s, dead tuples, table MB, indexes MB, autovacuums\n", c.WindowSeconds)
		}
		fmt.Fprintf(w, "    %6.0f %10d %8.1f %8.1f %3d\n", rw.WorkedPerSecond, rw.DeadTuples, float64(rw.TableBytes)/1e6, float64(rw.IndexBytes)/1e6, rw.Autovacuums)
	}
	if c.BacklogWorkedPerSecond > 0 {
		fmt.Fprintf(w, "  with the scheduled backlog: %.0f jobs/s (%.1f%% slower)\n", c.BacklogWorkedPerSecond, 100*c.BacklogSlowdown)
	}
	if c.History != nil {
		fmt.Fprintf(w, "  with history kept (every completed job, pruned as it expires): steady %.0f jobs/s (%.1f%% slower than without)\n",
			c.History.SteadyWorkedPerSecond, 100*c.HistorySlowdown)
		printContinuous(w, "  continuous with history", c.History)
	}
}

// printServer prints the settings that decide what the figures mean.
func printServer(w io.Writer, s *bench.ServerInfo) {
	fmt.Fprintln(w)
	if s == nil || s.Version == "" {
		fmt.Fprintln(w, "server: settings unknown")
		return
	}
	v := func(name string) string {
		if x, ok := s.Settings[name]; ok {
			return x
		}
		return "?"
	}
	origin := ""
	if s.ScratchCluster {
		origin = " (scratch cluster: initdb defaults"
		if s.PgStatStatements {
			origin += ", pg_stat_statements loaded for measurement"
		}
		origin += ")"
	}
	fmt.Fprintf(w, "server: PostgreSQL %s%s; autovacuum %s (naptime %s, cost_delay %s), synchronous_commit %s, fsync %s, full_page_writes %s\n",
		s.Version, origin, v("autovacuum"), v("autovacuum_naptime"), v("autovacuum_vacuum_cost_delay"),
		v("synchronous_commit"), v("fsync"), v("full_page_writes"))
	fmt.Fprintf(w, "  shared_buffers %s, max_wal_size %s, work_mem %s, max_connections %s, pg_stat_statements %s\n",
		v("shared_buffers"), v("max_wal_size"), v("work_mem"), v("max_connections"), map[bool]string{true: "loaded", false: "not loaded"}[s.PgStatStatements])
}

// rates prints a series of figures compactly: 41.8k 37.0k 32.3k …
func rates(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		switch {
		case x >= 10_000:
			parts[i] = fmt.Sprintf("%.1fk", x/1000)
		case x >= 100:
			parts[i] = fmt.Sprintf("%.0f", x)
		default:
			parts[i] = fmt.Sprintf("%.1f", x)
		}
	}
	return strings.Join(parts, " ")
}

// at is runs[i], nil past its end.
func at(runs []*bench.ContinuousResult, i int) *bench.ContinuousResult {
	if i < len(runs) {
		return runs[i]
	}
	return nil
}

// printFlow prints the flow-control modes' results.
func printFlow(w io.Writer, r *bench.Report) {
	if n := r.Noisy; n != nil {
		for _, run := range []*bench.NoisyResult{n.Off, n.On} {
			if run == nil {
				continue
			}
			label := "off"
			if run.Fair {
				label = "on"
			}
			fmt.Fprintf(w, "noisy neighbour, fairness %s: A floods %d jobs, then %d tenants %d each: their pickup p50 %.0f ms, p99 %.0f ms, max %.0f ms; all done %.2fs after their enqueue; A meanwhile %.0f jobs/s, %d of A's jobs left\n",
				label, run.Flood, run.Neighbours, run.NeighbourJobs, run.PickupP50Ms, run.PickupP99Ms, run.PickupMaxMs, run.CompletedAfter, run.FloodPerSecond, run.FloodLeft)
		}
	}
	if k := r.Keys; k != nil {
		// in the order they ran: without, with, (tiered, tiered,) with, without
		without := "keys: continuous without keys"
		with := "keys: continuous with " + bench.KeysLabel(k.Keys, k.KeyLimit)
		tiers := "keys: continuous with " + bench.TiersLabel(k.Keys, k.KeyLimit, k.TierKeys, k.TierLimit)
		for _, run := range []struct {
			label string
			c     *bench.ContinuousResult
		}{{without, at(k.Without, 0)}, {with, at(k.With, 0)}, {tiers, at(k.Tiered, 0)}, {tiers, at(k.Tiered, 1)},
			{with, at(k.With, 1)}, {without, at(k.Without, 1)}} {
			if run.c != nil {
				printContinuous(w, run.label, run.c)
			}
		}
		fmt.Fprintf(w, "keys: mean steady state with keys is %.0f%% of without\n", 100*k.Ratio)
		if len(k.Tiered) > 0 {
			fmt.Fprintf(w, "keys: mean steady state with tiers is %.0f%% of the fixed limit's\n", 100*k.TierRatio)
		}
	}
	for _, rt := range []*bench.RateResult{r.Rate, r.RateExactStarts} {
		if rt == nil {
			continue
		}
		label := "rate"
		if rt.ExactStarts {
			label = "rate, exact starts"
		}
		fmt.Fprintf(w, "%s: limit %d per %gs across %d processes: %.1f jobs/s over %.1fs (%.1f%% of the limit), %d claims of %.1f jobs; most in any %gs window: %d by claim time, %d by handler start\n",
			label, rt.Limit, rt.PerSeconds, rt.Processes, rt.AchievedPerSecond, rt.Seconds, 100*rt.AchievedToLimit, rt.Claims, rt.JobsPerClaim,
			rt.PerSeconds, rt.MaxClaimedInWindow, rt.MaxStartedInWindow)
	}
}
