package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// The durable mode: what a durable handler's steps cost next to the same
// work done as plain jobs, and what a transactional step costs next to the
// same write in a plain transaction. In one session, each part in a
// scratch schema of its own on the same server:
//
//   - Drains of the same work, enqueued before the workers start (no
//     producer), then vacuumed and analyzed as autovacuum would: Jobs
//     durable jobs, each a handler of durableSteps worker.Step calls that
//     return a small struct, and durableSteps × Jobs plain no-op jobs, one
//     unit of work each. Both run in the worker process the other modes
//     use, and each drain runs twice, mirrored (plain, durable, durable,
//     plain), so that whatever drifts over the session weighs on each
//     alike. The figures are steps (or plain jobs) per second, the wall
//     time a step adds over a plain job, and the worker's and PostgreSQL's
//     CPU per 1,000 steps.
//   - Calls timed one job at a time, durableSteps calls a job, by a worker
//     in this process with one slot: worker.StepTx writing one row into a
//     scratch table, and the same write in a plain transaction (pool.Begin,
//     Exec, Commit) in a plain job, mirrored as the drains are. Each call's
//     latency is taken around the call in the handler. Its round trips are
//     counted from pg_stat_statements when the server loads it (the
//     statements the calls sent, nothing else), else from pg_stat_database's
//     xact_commit (the transactions every session of the database
//     committed, the worker's claims and acknowledgements included): the
//     report says which. Either counts every session of the database, so
//     the figures are the calls' alone on a server no one else uses, as
//     --scratch-cluster's.

// DurableOptions scales the durable mode.
type DurableOptions struct {
	// Jobs is the durable jobs a drain holds, durableSteps steps each; the
	// plain drains hold durableSteps × Jobs jobs. The default, 5,000, makes
	// a durable drain last about 13s on a 2-core machine.
	Jobs int `json:"jobs"`
	// Calls is the transactional calls timed each way (rounded up to whole
	// jobs of durableSteps calls, in two halves).
	Calls int `json:"calls"`
}

// DurableResult is the durable mode's report.
type DurableResult struct {
	StepsPerJob int `json:"steps_per_job"`
	// Enqueue says how the drains' jobs arrived: all before the workers
	// started.
	Enqueue string `json:"enqueue"`
	// Order is the drains' kinds in the order they ran.
	Order []string `json:"order"`
	// Rows is one row per kind: plain, durable.
	Rows []*DurableRow `json:"rows"`
	// Ratio is the durable drains' mean steps per second over the plain
	// drains' jobs per second.
	Ratio float64 `json:"ratio_steps_to_plain"`
	// OverheadPerStepUs is the wall time of the drain a step adds over a
	// plain job, in microseconds: 1/steps per second less 1/plain jobs per
	// second, at the worker process's full concurrency. The CPU figures
	// are the same difference in the worker's and PostgreSQL's CPU.
	OverheadPerStepUs            float64 `json:"overhead_per_step_us"`
	WorkerCPUOverheadPerStepUs   float64 `json:"worker_cpu_overhead_per_step_us"`
	PostgresCPUOverheadPerStepUs float64 `json:"postgres_cpu_overhead_per_step_us,omitempty"`
	// Tx is worker.StepTx against a plain transaction.
	Tx *DurableTxResult `json:"tx,omitempty"`
}

// DurableRow is one kind of drain.
type DurableRow struct {
	Name  string           `json:"name"`
	Label string           `json:"label"`
	Runs  []*WorkflowDrain `json:"runs"`
	// StepsPerJob is durableSteps for durable jobs, 1 for plain ones.
	StepsPerJob int `json:"steps_per_job"`
	// JobsPerSecond is the mean of the runs' rates, StepsPerSecond that
	// times StepsPerJob, and the CPU figures the runs' mean per 1,000
	// steps.
	JobsPerSecond           float64 `json:"jobs_per_second"`
	StepsPerSecond          float64 `json:"steps_per_second"`
	WorkerCPUPer1000Steps   float64 `json:"worker_cpu_seconds_per_1000_steps"`
	PostgresCPUPer1000Steps float64 `json:"postgres_cpu_seconds_per_1000_steps,omitempty"`
}

// DurableTxResult is worker.StepTx against the same write in a plain
// transaction.
type DurableTxResult struct {
	// Calls is the calls timed each way, CallsPerJob in each job.
	Calls       int `json:"calls"`
	CallsPerJob int `json:"calls_per_job"`
	// Order is the kinds in the order they ran.
	Order []string `json:"order"`
	// Rows is one row per kind: plain_tx, step_tx.
	Rows []*DurableTxRow `json:"rows"`
	// RoundTripsFrom names what RoundTripsPerCall counts:
	// "pg_stat_statements" (the statements the calls sent: BEGIN, the
	// write, the records, COMMIT) or "pg_stat_database xact_commit" (the
	// transactions every session of the database committed).
	RoundTripsFrom string `json:"round_trips_from"`
	// ExtraRoundTripsPerCall is step_tx's count per call less plain_tx's.
	ExtraRoundTripsPerCall float64 `json:"extra_round_trips_per_call"`
}

// DurableTxRow is one kind of call: its latency around the call, and its
// round trips per call (see DurableTxResult.RoundTripsFrom).
type DurableTxRow struct {
	Name              string  `json:"name"`
	Label             string  `json:"label"`
	P50Ms             float64 `json:"p50_ms"`
	P99Ms             float64 `json:"p99_ms"`
	RoundTripsPerCall float64 `json:"round_trips_per_call"`
}

// durableSteps is the calls each durable job makes, in the drains and the
// timed calls alike.
const durableSteps = 10

// The kinds of drain and of timed call, in the order of the rows.
const (
	durPlain   = "plain"
	durSteps   = "durable"
	durPlainTx = "plain_tx"
	durStepTx  = "step_tx"
)

// durableOrder is the kinds' indexes in the order they run: forward, then
// mirrored.
var durableOrder = []int{0, 1, 1, 0}

var (
	// durable is the drains' durable job: durableSteps worker.Step calls.
	durable = jobs.MustDefine[benchJob]("bench.durable")
	// stepTx and plainTx are the timed calls' jobs: durableSteps calls of
	// worker.StepTx, or of a plain transaction, each writing one row.
	stepTx  = jobs.MustDefine[benchJob]("bench.step_tx")
	plainTx = jobs.MustDefine[benchJob]("bench.plain_tx")
)

// stepNames are the steps' names, made once so that a handler measures its
// steps and not the formatting of their names.
var stepNames = func() []string {
	names := make([]string, durableSteps)
	for i := range names {
		names[i] = fmt.Sprintf("step-%d", i)
	}
	return names
}()

// stepResult is what each step returns: small, as the answer of a call to
// another service usually is.
type stepResult struct {
	Call int    `json:"call"`
	Ref  string `json:"ref"`
}

// handleDurable registers the drains' durable handler on a worker of the
// worker process; each step does work, one plain job's worth.
func handleDurable(w *worker.Worker, work func()) error {
	return worker.Handle(w, durable, func(ctx context.Context, j *jobs.Job[benchJob]) error {
		for i, name := range stepNames {
			if _, err := worker.Step(ctx, j, name, func(context.Context) (stepResult, error) {
				work()
				return stepResult{Call: i, Ref: name}, nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
}

func runDurable(ctx context.Context, cfg Config, logf func(string, ...any)) (*DurableResult, error) {
	o := cfg.Durable
	base := cfg
	base.Scheduled, base.keep, base.queues, base.keyed, base.sequenced, base.flow = 0, 0, 0, 0, 0, workerFlow{}
	steps := durableSteps * o.Jobs
	r := &DurableResult{StepsPerJob: durableSteps, Enqueue: "before the workers start (no producer)"}
	r.Rows = []*DurableRow{
		{Name: durPlain, Label: fmt.Sprintf("%d plain jobs", steps), StepsPerJob: 1},
		{Name: durSteps, Label: fmt.Sprintf("%d durable jobs × %d steps", o.Jobs, durableSteps), StepsPerJob: durableSteps},
	}
	payload := cfg.payload()
	for i, ki := range durableOrder {
		row := r.Rows[ki]
		kind, n := noop, steps
		if row.Name == durSteps {
			kind, n = durable, o.Jobs
		}
		enqueue := func(ctx context.Context, pool *pgxpool.Pool) error {
			return enqueueCopy(ctx, pool, kind, n, cfg.BatchSize, payload)
		}
		logf("durable: drain %d of %d: %s", i+1, len(durableOrder), row.Label)
		d, err := workflowDrain(ctx, base, n, enqueue, nil)
		if err != nil {
			return r, fmt.Errorf("%s: %w", row.Label, err)
		}
		r.Order = append(r.Order, row.Name)
		row.Runs = append(row.Runs, d)
	}
	for _, row := range r.Rows {
		per := float64(row.StepsPerJob)
		for _, d := range row.Runs {
			row.JobsPerSecond += d.JobsPerSecond / float64(len(row.Runs))
			row.WorkerCPUPer1000Steps += d.WorkerCPUPer1000 / per / float64(len(row.Runs))
			row.PostgresCPUPer1000Steps += d.PostgresCPUPer1000 / per / float64(len(row.Runs))
		}
		row.StepsPerSecond = row.JobsPerSecond * per
	}
	plain, dur := r.Rows[0], r.Rows[1]
	if plain.StepsPerSecond > 0 && dur.StepsPerSecond > 0 {
		r.Ratio = dur.StepsPerSecond / plain.StepsPerSecond
		r.OverheadPerStepUs = 1e6/dur.StepsPerSecond - 1e6/plain.StepsPerSecond
	}
	// Seconds per 1,000 steps are milliseconds per step: × 1,000 for µs.
	r.WorkerCPUOverheadPerStepUs = 1000 * (dur.WorkerCPUPer1000Steps - plain.WorkerCPUPer1000Steps)
	r.PostgresCPUOverheadPerStepUs = 1000 * (dur.PostgresCPUPer1000Steps - plain.PostgresCPUPer1000Steps)

	logf("durable: %d calls of worker.StepTx and of a plain transaction, one job at a time", o.Calls)
	var err error
	if r.Tx, err = durableTx(ctx, cfg, logf); err != nil {
		return r, fmt.Errorf("transactional steps: %w", err)
	}
	return r, nil
}

// durableWorkerApp is the application_name of the timed calls' worker
// pool, by which the mode sees its backends gone.
const durableWorkerApp = "hopper-bench-durable"

// durableTx times worker.StepTx against a plain transaction (the mode's
// second part) in one scratch schema. Each kind runs twice, in
// durableOrder, half its calls each time, worked by a worker and a pool of
// their own (durableTxPhase), so that the counter can be read once the
// pool's backends have exited.
func durableTx(ctx context.Context, cfg Config, logf func(string, ...any)) (*DurableTxResult, error) {
	s, err := newScratch(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	sql := map[string]string{}
	for _, name := range []string{"durable_setup", "durable_write", "durable_round_trips", "durable_commits", "durable_backends"} {
		b, err := benchSQL.ReadFile("sql/" + name + ".sql")
		if err != nil {
			return nil, err
		}
		sql[name] = string(b)
	}
	if _, err := s.pool.Exec(ctx, sql["durable_setup"]); err != nil {
		return nil, err
	}
	r := &DurableTxResult{CallsPerJob: durableSteps, RoundTripsFrom: "pg_stat_statements"}
	counter := sql["durable_round_trips"]
	var probe int64
	if s.pool.QueryRow(ctx, counter).Scan(&probe) != nil {
		r.RoundTripsFrom, counter = "pg_stat_database xact_commit", sql["durable_commits"]
	}
	// Whole jobs, the same number in each of a kind's two halves.
	perHalf := max(1, (cfg.Durable.Calls+2*durableSteps-1)/(2*durableSteps))
	r.Calls = 2 * perHalf * durableSteps
	r.Rows = []*DurableTxRow{
		{Name: durPlainTx, Label: "plain transaction in a plain job"},
		{Name: durStepTx, Label: "worker.StepTx"},
	}
	phase := durableTxPhase{s: s, write: sql["durable_write"], counter: counter, backends: sql["durable_backends"], jobs: perHalf}
	latencies := make([][]time.Duration, len(r.Rows))
	trips := make([]int64, len(r.Rows))
	for i, ki := range durableOrder {
		row := r.Rows[ki]
		kind := plainTx
		if row.Name == durStepTx {
			kind = stepTx
		}
		logf("durable: calls %d of %d: %d × %d calls, %s", i+1, len(durableOrder), perHalf, durableSteps, row.Label)
		lat, n, err := phase.run(ctx, kind)
		if err != nil {
			return r, fmt.Errorf("%s: %w", row.Label, err)
		}
		r.Order = append(r.Order, row.Name)
		latencies[ki] = append(latencies[ki], lat...)
		trips[ki] += n
	}
	for ki, row := range r.Rows {
		row.P50Ms, row.P99Ms = ms(percentile(latencies[ki], 50)), ms(percentile(latencies[ki], 99))
		row.RoundTripsPerCall = float64(trips[ki]) / float64(r.Calls)
	}
	r.ExtraRoundTripsPerCall = r.Rows[1].RoundTripsPerCall - r.Rows[0].RoundTripsPerCall
	return r, nil
}

// durableTxPhase runs jobs jobs of one kind of timed call in s, by a
// worker of its own with one slot, and counts what they cost with counter.
type durableTxPhase struct {
	s                        *scratch
	write, counter, backends string
	jobs                     int
}

// run enqueues the phase's jobs, reads the counter, works them off with a
// new worker and pool, and reads the counter again once the pool's
// backends are gone (they report their statistics as they exit). It
// returns every call's latency and the counter's delta.
func (p durableTxPhase) run(ctx context.Context, kind *jobs.Kind[benchJob]) ([]time.Duration, int64, error) {
	if err := enqueueCopy(ctx, p.s.pool, kind, p.jobs, p.jobs, benchJob{}); err != nil {
		return nil, 0, err
	}
	pc, err := pgxpool.ParseConfig(p.s.url)
	if err != nil {
		return nil, 0, err
	}
	pc.ConnConfig.RuntimeParams["application_name"] = durableWorkerApp
	var before, after int64
	if err := p.s.pool.QueryRow(ctx, p.counter).Scan(&before); err != nil {
		return nil, 0, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, 0, err
	}
	lat, err := p.work(ctx, pool)
	pool.Close()
	if err != nil {
		return nil, 0, err
	}
	if err := p.awaitBackends(ctx); err != nil {
		return nil, 0, err
	}
	if err := p.s.pool.QueryRow(ctx, p.counter).Scan(&after); err != nil {
		return nil, 0, err
	}
	live, dead, err := TableCounts(ctx, p.s.pool)
	if err != nil {
		return nil, 0, err
	}
	if live != 0 || dead != 0 {
		return nil, 0, fmt.Errorf("%d jobs left and %d dead after the calls", live, dead)
	}
	return lat, after - before, nil
}

// work runs a worker on pool until every job's handler has returned, then
// stops it (which records the last acknowledgements), and returns the
// calls' latencies.
func (p durableTxPhase) work(ctx context.Context, pool *pgxpool.Pool) ([]time.Duration, error) {
	var mu sync.Mutex
	var lat []time.Duration
	var done atomic.Int64
	timed := func(call func() error) error {
		began := time.Now()
		if err := call(); err != nil {
			return err
		}
		d := time.Since(began)
		mu.Lock()
		lat = append(lat, d)
		mu.Unlock()
		return nil
	}
	w, err := worker.New(pool, worker.Config{Queues: map[string]int{jobs.DefaultQueue: 1},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	if err := worker.Handle(w, stepTx, func(ctx context.Context, j *jobs.Job[benchJob]) error {
		defer done.Add(1)
		for i, name := range stepNames {
			if err := timed(func() error {
				_, err := worker.StepTx(ctx, j, name, func(ctx context.Context, tx pgx.Tx) (stepResult, error) {
					_, err := tx.Exec(ctx, p.write, j.ID, i)
					return stepResult{Call: i, Ref: name}, err
				})
				return err
			}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := worker.Handle(w, plainTx, func(ctx context.Context, j *jobs.Job[benchJob]) error {
		defer done.Add(1)
		for i := range durableSteps {
			if err := timed(func() error { return plainWrite(ctx, pool, p.write, j.ID, i) }); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(runCtx) }()
	for done.Load() < int64(p.jobs) {
		select {
		case <-ctx.Done():
			stop()
			<-errc
			return nil, ctx.Err()
		case err := <-errc:
			stop()
			return nil, fmt.Errorf("worker stopped: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	stop()
	if err := <-errc; err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lat) != p.jobs*durableSteps {
		return nil, fmt.Errorf("%d calls timed, %d made (a job failed and ran again?)", len(lat), p.jobs*durableSteps)
	}
	return lat, nil
}

// plainWrite is the timed call's baseline: the same write as the
// transactional step's, in a plain transaction on the worker's pool.
func plainWrite(ctx context.Context, pool *pgxpool.Pool, write string, jobID int64, call int) (err error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if _, err = tx.Exec(ctx, write, jobID, call); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// awaitBackends waits until the closed pool's backends have left the
// server: only then have they reported their statistics.
func (p durableTxPhase) awaitBackends(ctx context.Context) error {
	for deadline := time.Now().Add(time.Minute); ; {
		var n int64
		if err := p.s.pool.QueryRow(ctx, p.backends, durableWorkerApp).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the worker's connections had not closed a minute after its pool")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Print writes the mode's report.
func (r *DurableResult) Print(w io.Writer) {
	fmt.Fprintf(w, "durable: drains of the same work, every job enqueued %s, in the order %s\n", r.Enqueue, strings.Join(r.Order, ", "))
	fmt.Fprintf(w, "  %-36s %9s %9s   %-22s %s\n", "kind", "jobs/s", "steps/s", "runs (steps/s)", "CPU per 1000 steps: worker, PostgreSQL")
	for _, row := range r.Rows {
		rates := make([]float64, len(row.Runs))
		for i, d := range row.Runs {
			rates[i] = d.JobsPerSecond * float64(row.StepsPerJob)
		}
		fmt.Fprintf(w, "  %-36s %9.0f %9.0f   %-22s %.3fs, %.3fs\n", row.Label, row.JobsPerSecond, row.StepsPerSecond, rateList(rates),
			row.WorkerCPUPer1000Steps, row.PostgresCPUPer1000Steps)
	}
	fmt.Fprintf(w, "  durable steps/s over plain jobs/s: %.2f; overhead per step %.1f µs of the drain's wall time, CPU %+.1f µs worker, %+.1f µs PostgreSQL\n",
		r.Ratio, r.OverheadPerStepUs, r.WorkerCPUOverheadPerStepUs, r.PostgresCPUOverheadPerStepUs)
	for _, row := range r.Rows {
		for i, d := range row.Runs {
			fmt.Fprintf(w, "  %s, run %d: enqueued in %.1fs, drained in %.1fs; worker peak RSS %.0f MB\n",
				row.Label, i+1, d.EnqueueSeconds, d.Seconds, float64(d.WorkerPeakRSSBytes)/1e6)
			printWorkflowStatements(w, d.Statements)
		}
	}
	if t := r.Tx; t != nil {
		fmt.Fprintf(w, "durable: one row written by worker.StepTx and by a plain transaction (pool.Begin, Exec, Commit) in a plain job, %d calls each,"+
			" %d a job, one job at a time, in the order %s\n", t.Calls, t.CallsPerJob, strings.Join(t.Order, ", "))
		unit := "round trips/call"
		if t.RoundTripsFrom != "pg_stat_statements" {
			unit = "transactions/call"
		}
		fmt.Fprintf(w, "  %-36s %9s %9s %18s\n", "kind", "p50 ms", "p99 ms", unit)
		for _, row := range t.Rows {
			fmt.Fprintf(w, "  %-36s %9.2f %9.2f %18.2f\n", row.Label, row.P50Ms, row.P99Ms, row.RoundTripsPerCall)
		}
		fmt.Fprintf(w, "  worker.StepTx adds %.2f %s (counted from %s)", t.ExtraRoundTripsPerCall, unit, t.RoundTripsFrom)
		if len(t.Rows) == 2 {
			fmt.Fprintf(w, " and %+.2f ms at p50", t.Rows[1].P50Ms-t.Rows[0].P50Ms)
		}
		fmt.Fprintln(w)
	}
}
