// Package bench measures Hopper on the machine it runs on: throughput,
// latency, memory and the CPU a queue costs PostgreSQL, with a raw-SQL
// baseline (pgbench) measured in the same run so a noisy machine can
// neither flatter nor hide anything. It works in a scratch schema it
// creates and drops.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"time"

	"github.com/hopperq/hopper/internal/testbed/pgcluster"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/internal/pgurl"
	"github.com/hopperq/hopper/schema"
)

// Config is what a run measures and how.
type Config struct {
	Mode        string        // continuous, drain, enqueue, latency, all; noisy, keys, rate, flow (those three); queues; sequences; workflows; durable; soak; retention; citus
	Duration    time.Duration // continuous and baseline
	Jobs        int           // drain: backlog size; enqueue: COPY total
	Workers     int           // worker instances in the worker process
	Concurrency int           // handler slots per worker
	BatchSize   int           // producer batch (continuous) / COPY batch (enqueue)
	Producers   int           // producer goroutines (continuous)
	PayloadSize int           // bytes of payload padding
	HandlerTime time.Duration // simulated handler work
	Scheduled   int           // far-future jobs added before measuring (backlog effect)
	// History: measure the continuous run again with the workers keeping
	// every completed job in the history this long (pruned as they expire).
	History time.Duration
	// DrainSizes: the drain runs once per size instead of once with Jobs,
	// each on a schema of its own (a burst enqueued, then ANALYZE, as
	// autovacuum would run it, then drained): a statement whose plan
	// depends on the table's size or statistics shows up as one size
	// draining far slower than another.
	DrainSizes []int
	// QueueCounts: the queues mode drains Jobs once per count, spread
	// evenly over that many queues served by one worker process whose
	// Concurrency slots are split evenly among them: what the claim costs
	// as an application's slots are split over more queues.
	QueueCounts []int
	Baseline    bool // also run pgbench's raw-SQL cycle
	Singles     int  // enqueue: single transactional enqueues timed
	Samples     int  // latency: jobs timed

	// Window is the length of one reported window of the continuous run
	// and the baseline; the headline rate is the mean of the last half of
	// the windows (the steady state), not the warm-up.
	Window time.Duration
	// HoldSnapshot keeps a REPEATABLE READ transaction with a snapshot open
	// for the whole continuous run (a long report, an idle-in-transaction
	// session): dead tuples can then not be removed.
	HoldSnapshot bool
	// Burst adds this many ready jobs at once, a third of the way into the
	// continuous run.
	Burst int
	// Recover: with HoldSnapshot, release the snapshot after Duration and
	// go on measuring this long, with the job table's dead tuples and size
	// in every window.
	Recover time.Duration
	// Pressure runs the pressure suite after the other modes: a continuous
	// run with a snapshot held for HoldFor then released for Recover (or 6
	// minutes), and one with a burst of Burst (or 1,000,000) jobs, compared
	// with the clean continuous and drain runs of the same report.
	Pressure bool
	HoldFor  time.Duration
	// ScratchCluster: the run starts its own PostgreSQL cluster with
	// production defaults (initdb into a temporary directory, its own port)
	// and removes it afterwards; DatabaseURL is then that cluster's.
	ScratchCluster bool

	// The flow-control modes. noisy: tenant A enqueues Flood jobs at once,
	// then Neighbours other tenants NeighbourJobs each, worked by Workers
	// workers of NoisyConcurrency slots with a handler of NoisyHandlerTime,
	// with fairness off and on. keys: the continuous run, then again with
	// Keys distinct concurrency keys under a per-key limit of KeyLimit (0:
	// no flow control, the keys alone).
	// rate: a limit of Rate jobs per RatePer across RateProcesses worker
	// processes for RateDuration.
	Flood            int
	Neighbours       int
	NeighbourJobs    int
	NoisyConcurrency int
	NoisyHandlerTime time.Duration
	Keys             int
	KeyLimit         int
	Rate             int
	RatePer          time.Duration
	RateProcesses    int
	RateDuration     time.Duration
	// sequences: keyless, Keys concurrency keys without and with a limit
	// of KeyLimit, and Keys sequence keys, each a continuous run of
	// SequenceDuration, twice (sequences.go); Explain adds the plans of
	// the promotion and the claim over ExplainJobs sequence jobs.
	SequenceDuration time.Duration
	Explain          bool
	ExplainJobs      int
	// workflows: the drains, the trickle and the batch (workflows.go).
	Workflows WorkflowOptions
	// durable: durable handlers' steps against plain jobs, and
	// transactional steps against plain transactions (durable.go).
	Durable DurableOptions
	// soak: hours of mixed load with history kept, sampled (soak.go).
	Soak SoakOptions
	// retention: expired history deleted against dropped (retention.go).
	Retention RetentionOptions
	// citus: drains on plain PostgreSQL and on a Citus formation, in
	// turn (citus.go).
	Citus CitusOptions

	// ProfileDir: each worker process writes its CPU and allocation
	// profiles here (profile.go).
	ProfileDir string

	// DatabaseURL is the server to use; WorkerCommand starts the worker
	// process (the hopper binary with "bench --role worker").
	DatabaseURL   string
	WorkerCommand []string
	Log           io.Writer

	// keep is how long the worker process keeps completed jobs (the run
	// with History, the soak).
	keep time.Duration
	// deadRetention is how long the worker process keeps dead jobs (0:
	// for ever); ticks has it fire the soak's schedule (the soak).
	deadRetention time.Duration
	ticks         bool
	// queues: the drain's jobs and the worker's slots are spread over this
	// many queues (0 or 1: the default queue alone).
	queues int
	// keyed: the producers spread their jobs over this many concurrency
	// keys (0: none); flow is the worker process's flow control.
	keyed int
	flow  workerFlow
	// tiers: the first tiers of the keys (key-0 …) get a limit of their
	// own, tierLimit, in hopper_key_limits (the keys mode's tiered runs).
	tiers, tierLimit int
	// sequenced: the producers spread their jobs over this many sequence
	// keys (0: none).
	sequenced int
}

// Report is what a run found; --json prints it.
type Report struct {
	Machine    Machine           `json:"machine"`
	Server     *ServerInfo       `json:"server,omitempty"`
	Config     map[string]any    `json:"config"`
	Continuous *ContinuousResult `json:"continuous,omitempty"`
	Drain      *DrainResult      `json:"drain,omitempty"`
	Enqueue    *EnqueueResult    `json:"enqueue,omitempty"`
	Latency    *LatencyResult    `json:"latency,omitempty"`
	Baseline   *BaselineResult   `json:"baseline,omitempty"`
	Pressure   *PressureReport   `json:"pressure,omitempty"`
	Noisy      *NoisyReport      `json:"noisy,omitempty"`
	Keys       *KeysResult       `json:"keys,omitempty"`
	Rate       *RateResult       `json:"rate,omitempty"`
	Sequences  *SequencesResult  `json:"sequences,omitempty"`
	Workflows  *WorkflowsResult  `json:"workflows,omitempty"`
	Durable    *DurableResult    `json:"durable,omitempty"`
	Soak       *SoakResult       `json:"soak,omitempty"`
	Retention  *RetentionResult  `json:"retention,omitempty"`
	Citus      *CitusResult      `json:"citus,omitempty"`
	// RateExactStarts is the rate run again with Rate.ExactStarts.
	RateExactStarts *RateResult `json:"rate_exact_starts,omitempty"`
	// Drains is one drain per Config.DrainSizes.
	Drains []*DrainResult `json:"drains,omitempty"`
	// Queues is one drain per Config.QueueCounts.
	Queues []*QueuesResult    `json:"queues,omitempty"`
	Ratios map[string]float64 `json:"ratios,omitempty"`
}

// PressureReport is the pressure suite's two continuous runs.
type PressureReport struct {
	Snapshot *ContinuousResult `json:"snapshot"`
	Burst    *ContinuousResult `json:"burst"`
}

// scratch is a schema created for one run.
type scratch struct {
	name string
	url  string
	pool *pgxpool.Pool
	base string
}

func newScratch(ctx context.Context, baseURL string) (*scratch, error) {
	return createScratch(ctx, baseURL, nil)
}

// createScratch creates and migrates a scratch schema from a session with
// the given settings: on Citus, citus.enable_schema_based_sharding makes
// it a distributed schema (citus.go).
func createScratch(ctx context.Context, baseURL string, settings map[string]string) (*scratch, error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	s := &scratch{name: "hopper_bench_" + hex.EncodeToString(b), base: baseURL}
	connCfg, err := pgx.ParseConfig(baseURL)
	if err != nil {
		return nil, err
	}
	maps.Copy(connCfg.RuntimeParams, settings)
	conn, err := pgx.ConnectConfig(ctx, connCfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	// DDL takes no bind parameters; the name is generated and quoted.
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{s.name}.Sanitize()); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(baseURL)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = s.name
	cfg.MaxConns = 32
	s.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := schema.Up(ctx, s.pool); err != nil {
		s.drop()
		return nil, err
	}
	s.url = pgurl.WithSearchPath(baseURL, s.name)
	return s, nil
}

func (s *scratch) drop() {
	if s.pool != nil {
		s.pool.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.base)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s.name}.Sanitize()+" CASCADE")
}

// Run measures what cfg asks for.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.ScratchCluster {
		c, err := pgcluster.Start(ctx, cfg.Log)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		defer c.Stop() // also when a mode fails or ctx is cancelled (Ctrl-C)
		// Everything connects here: the scratch schemas, hence the worker
		// process (startWorkers passes it the schema's URL), and pgbench.
		cfg.DatabaseURL = c.URL()
	}
	r := &Report{Machine: machine(ctx, cfg.DatabaseURL), Config: cfg.summary(), Ratios: map[string]float64{}}
	// The settings say what the figures mean; not reading them is no
	// reason to measure nothing.
	server, err := readServer(ctx, cfg.DatabaseURL)
	if err != nil {
		server = &ServerInfo{Warnings: []string{fmt.Sprintf("could not read the server's settings (%v): the figures' conditions are unknown", err)}}
	}
	server.ScratchCluster = cfg.ScratchCluster
	r.Server = server
	modes := map[string]bool{cfg.Mode: true}
	switch cfg.Mode {
	case "all":
		modes = map[string]bool{"continuous": true, "drain": true, "enqueue": true, "latency": true}
	case "flow":
		modes = map[string]bool{"noisy": true, "keys": true, "rate": true}
	}
	logf := func(format string, args ...any) { fmt.Fprintf(cfg.Log, format+"\n", args...) }
	if modes["enqueue"] {
		logf("enqueue: COPY in batches of %d, then %d single transactional enqueues", cfg.BatchSize, cfg.Singles)
		if r.Enqueue, err = runEnqueue(ctx, cfg); err != nil {
			return r, fmt.Errorf("enqueue: %w", err)
		}
	}
	if modes["latency"] {
		logf("latency: %d jobs, one at a time, to an idle worker", cfg.Samples)
		if r.Latency, err = runLatency(ctx, cfg); err != nil {
			return r, fmt.Errorf("latency: %w", err)
		}
	}
	if modes["drain"] && len(cfg.DrainSizes) > 0 {
		for _, n := range cfg.DrainSizes {
			logf("drain: %d waiting jobs", n)
			sized := cfg
			sized.Jobs = n
			d, err := runDrain(ctx, sized)
			if err != nil {
				return r, fmt.Errorf("drain of %d jobs: %w", n, err)
			}
			r.Drains = append(r.Drains, d)
		}
	} else if modes["drain"] {
		logf("drain: %d waiting jobs", cfg.Jobs)
		if r.Drain, err = runDrain(ctx, cfg); err != nil {
			return r, fmt.Errorf("drain: %w", err)
		}
	}
	if modes["queues"] {
		if r.Queues, err = runQueues(ctx, cfg, logf); err != nil {
			return r, fmt.Errorf("queues: %w", err)
		}
		if n := len(r.Queues); n > 1 {
			r.Ratios[fmt.Sprintf("queues_%d_to_%d", r.Queues[n-1].Queues, r.Queues[0].Queues)] = r.Queues[n-1].Ratio
		}
	}
	if modes["continuous"] {
		logf("continuous: %v of produce + work", cfg.Duration)
		clean := cfg
		if cfg.Pressure { // the pressure suite's runs have their own
			clean.HoldSnapshot, clean.Burst, clean.Recover = false, 0, 0
		}
		if r.Continuous, err = runContinuous(ctx, clean); err != nil {
			return r, fmt.Errorf("continuous: %w", err)
		}
	}
	if modes["noisy"] {
		logf("noisy neighbour: tenant A enqueues %d jobs, then %d tenants %d each; fairness off, then on", cfg.Flood, cfg.Neighbours, cfg.NeighbourJobs)
		if r.Noisy, err = runNoisy(ctx, cfg, logf); err != nil {
			return r, fmt.Errorf("noisy: %w", err)
		}
	}
	if modes["keys"] {
		logf("keys: continuous for %v without keys, then with %s", cfg.Duration, KeysLabel(cfg.Keys, cfg.KeyLimit))
		if r.Keys, err = runKeys(ctx, cfg); err != nil {
			return r, fmt.Errorf("keys: %w", err)
		}
		r.Ratios["keys_to_no_keys"] = r.Keys.Ratio
	}
	if modes["sequences"] {
		logf("sequences: keyless, %s, %s and %d sequence keys, %v each, twice", KeysLabel(cfg.Keys, 0), KeysLabel(cfg.Keys, cfg.KeyLimit),
			cfg.Keys, cfg.SequenceDuration)
		if r.Sequences, err = runSequences(ctx, cfg, logf); err != nil {
			return r, fmt.Errorf("sequences: %w", err)
		}
		for _, row := range r.Sequences.Rows[1:] {
			r.Ratios[row.Name+"_to_keyless"] = row.Ratio
		}
	}
	if modes["workflows"] {
		logf("workflows: drains of %d plain jobs and %d diamonds, a trickle of %d diamonds/s for %v, a batch of %d jobs",
			5*cfg.Workflows.Diamonds, cfg.Workflows.Diamonds, cfg.Workflows.TrickleRate, cfg.Workflows.TrickleDuration, cfg.Workflows.BatchJobs)
		if r.Workflows, err = runWorkflows(ctx, cfg, logf); err != nil {
			return r, fmt.Errorf("workflows: %w", err)
		}
		r.Ratios["workflow_steps_to_plain"] = r.Workflows.Ratio
	}
	if modes["durable"] {
		logf("durable: drains of %d durable jobs of %d steps and %d plain jobs, then %d calls of worker.StepTx and of a plain transaction",
			cfg.Durable.Jobs, durableSteps, durableSteps*cfg.Durable.Jobs, cfg.Durable.Calls)
		if r.Durable, err = runDurable(ctx, cfg, logf); err != nil {
			return r, fmt.Errorf("durable: %w", err)
		}
		r.Ratios["durable_steps_to_plain"] = r.Durable.Ratio
	}
	if modes["soak"] {
		o := cfg.Soak
		logf("soak: %d jobs/s offered for %v (plain, sequences, workflows, failures, a schedule), history and dead jobs kept %v, sampled every %v",
			o.Rate, o.Duration, o.Keep, o.Sample)
		if r.Soak, err = runSoak(ctx, cfg, logf); err != nil {
			return r, fmt.Errorf("soak: %w", err)
		}
	}
	if modes["retention"] {
		if r.Retention, err = runRetention(ctx, cfg, logf); err != nil {
			return r, fmt.Errorf("retention: %w", err)
		}
		r.Ratios["retention_delete_to_drop"] = r.Retention.DeleteToDrop
	}
	if modes["citus"] {
		if r.Citus, err = runCitus(ctx, cfg, logf); err != nil {
			return r, fmt.Errorf("citus: %w", err)
		}
		r.Ratios["citus_one_shard_to_plain"] = r.Citus.OneShardToPlain
		r.Ratios["citus_node_cpu_two_nodes_to_one"] = r.Citus.NodeCPUTwoToOne
		r.Ratios["citus_pinned_two_nodes_to_one"] = r.Citus.PinnedTwoToOne
	}
	if modes["rate"] {
		logf("rate: %d jobs per %v across %d worker processes for %v", cfg.Rate, cfg.RatePer, cfg.RateProcesses, cfg.RateDuration)
		if r.Rate, err = runRate(ctx, cfg, false); err != nil {
			return r, fmt.Errorf("rate: %w", err)
		}
		logf("rate: again with ExactStarts")
		if r.RateExactStarts, err = runRate(ctx, cfg, true); err != nil {
			return r, fmt.Errorf("rate, exact starts: %w", err)
		}
	}
	if cfg.Pressure {
		if r.Pressure, err = runPressure(ctx, cfg, logf); err != nil {
			return r, fmt.Errorf("pressure: %w", err)
		}
		if r.Continuous != nil && r.Continuous.SteadyWorkedPerSecond > 0 {
			r.Ratios["snapshot_last_minute_to_clean_steady"] = r.Pressure.Snapshot.LastMinutePerSecond / r.Continuous.SteadyWorkedPerSecond
		}
		if r.Drain != nil && r.Pressure.Burst.BurstDrainPerSecond > 0 {
			r.Ratios["burst_drain_to_clean_drain"] = r.Pressure.Burst.BurstDrainPerSecond / r.Drain.JobsPerSecond
		}
	}
	if cfg.Baseline {
		logf("baseline: pgbench insert / SKIP LOCKED claim / delete, batch %d, %v", cfg.BatchSize, cfg.Duration)
		if r.Baseline, err = runBaseline(ctx, cfg); err != nil {
			return r, fmt.Errorf("baseline: %w", err)
		}
		if r.Continuous != nil && r.Baseline.JobsPerSecond > 0 {
			r.Ratios["continuous_to_baseline"] = r.Continuous.WorkedPerSecond / r.Baseline.JobsPerSecond
		}
		if r.Continuous != nil && r.Baseline.SteadyJobsPerSecond > 0 {
			r.Ratios["steady_continuous_to_baseline"] = r.Continuous.SteadyWorkedPerSecond / r.Baseline.SteadyJobsPerSecond
		}
		if r.Drain != nil && r.Baseline.JobsPerSecond > 0 {
			r.Ratios["drain_to_baseline"] = r.Drain.JobsPerSecond / r.Baseline.JobsPerSecond
		}
	}
	return r, nil
}

func (cfg Config) summary() map[string]any {
	return map[string]any{
		"mode": cfg.Mode, "duration": cfg.Duration.String(), "jobs": cfg.Jobs, "drain_sizes": cfg.DrainSizes, "workers": cfg.Workers,
		"concurrency": cfg.Concurrency, "batch_size": cfg.BatchSize, "producers": cfg.Producers,
		"payload_size": cfg.PayloadSize, "handler_time": cfg.HandlerTime.String(), "scheduled_backlog": cfg.Scheduled,
		"history":       cfg.History.String(),
		"hold_snapshot": cfg.HoldSnapshot, "burst": cfg.Burst, "recover": cfg.Recover.String(),
		"pressure": cfg.Pressure, "hold_for": cfg.HoldFor.String(),
		"flood": cfg.Flood, "neighbours": cfg.Neighbours, "neighbour_jobs": cfg.NeighbourJobs,
		"noisy_concurrency": cfg.NoisyConcurrency, "noisy_handler_time": cfg.NoisyHandlerTime.String(),
		"keys": cfg.Keys, "key_limit": cfg.KeyLimit, "rate": cfg.Rate, "rate_per": cfg.RatePer.String(), "rate_processes": cfg.RateProcesses,
		"rate_duration":     cfg.RateDuration.String(),
		"sequence_duration": cfg.SequenceDuration.String(), "explain": cfg.Explain, "explain_jobs": cfg.ExplainJobs,
		"workflows": cfg.Workflows, "durable": cfg.Durable, "soak": cfg.Soak.summary(), "retention": cfg.Retention,
		"citus": cfg.Citus,
	}
}

// window is the reporting window: Window, but never longer than the run.
func (cfg Config) window() time.Duration {
	w := cfg.Window
	if w <= 0 {
		w = 10 * time.Second
	}
	return min(w, cfg.Duration)
}
