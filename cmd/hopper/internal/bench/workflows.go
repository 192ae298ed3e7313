package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// The workflows mode: what a workflow step costs next to a plain job, how
// soon a child starts once its parents have ended, and how soon a batch's
// callback runs. In one session, each part in a scratch schema of its own
// on the same server:
//
//   - Drains of the same number of jobs, enqueued before the workers start
//     (no producer), then vacuumed and analyzed as autovacuum would:
//     Diamonds × 5 plain no-op jobs; the same kept in the history as long
//     as the steps are (what the history costs by itself); and Diamonds
//     diamond workflows (a root, three steps after it, one after those
//     three: 1 → 3 → 1), all no-op. Each runs twice, mirrored (plain,
//     kept, diamonds, diamonds, kept, plain), as the sequences mode does,
//     so that whatever drifts over the session weighs on each alike. The
//     worker process keeps completed steps in the history
//     (worker.Config.KeepWorkflowSteps, 7 days by default): that is part of
//     a step's cost.
//   - The latency from a parent's end to its child's start, at a trickle
//     of TrickleRate diamonds a second for TrickleDuration, worked by a
//     worker in this process with default settings. The parent's end is
//     its acknowledgement: hopper_job_history.finished_at, which is now()
//     of the acknowledging transaction (its start, a little before its
//     commit: the figure is an upper bound); a step with several parents
//     starts after the last of them. The child's start is its handler's
//     first instruction. The same from the parent handler's return (which
//     adds the wait of the acknowledgement batch, worker.Config's
//     AckFlushInterval) is printed too.
//   - A batch (jobs.NewBatch) of BatchJobs no-op jobs and a callback: how
//     long EnqueueWorkflow takes, the drain, and the time from the last
//     job's acknowledgement (its finished_at) to the callback's start (a
//     traced job: its handler reports when it started).

// WorkflowOptions scales the workflows mode.
type WorkflowOptions struct {
	// Diamonds is the diamond workflows (5 steps each) a drain holds; the
	// plain drains hold 5 × Diamonds jobs.
	Diamonds int `json:"diamonds"`
	// TrickleRate diamonds a second are enqueued for TrickleDuration, one
	// workflow per transaction, to time parent → child at low load.
	TrickleRate     int           `json:"trickle_rate"`
	TrickleDuration time.Duration `json:"trickle_duration"`
	// BatchJobs is the jobs of the batch before its callback.
	BatchJobs int `json:"batch_jobs"`
}

// WorkflowsResult is the workflows mode's report.
type WorkflowsResult struct {
	Diamonds int `json:"diamonds"`
	// Enqueue says how the drains' jobs arrived: all before the workers
	// started.
	Enqueue string `json:"enqueue"`
	// Order is the drains' kinds in the order they ran.
	Order []string `json:"order"`
	// Rows is one row per kind: plain, plain_kept, diamonds.
	Rows []*WorkflowRow `json:"rows"`
	// Ratio is the diamonds' mean steps per second over the plain jobs'
	// (the target is 0.70); RatioToKept over the plain jobs kept in the
	// history.
	Ratio       float64 `json:"ratio_steps_to_plain"`
	RatioToKept float64 `json:"ratio_steps_to_plain_kept"`
	// Latency is parent → child at a trickle.
	Latency *WorkflowLatency `json:"latency,omitempty"`
	// Batch is the batch with a callback.
	Batch *WorkflowBatch `json:"batch,omitempty"`
	// Acks, with --explain: what the acknowledgement's DELETE costs with
	// and without workflow steps, trigger included.
	Acks []*AckTiming `json:"acks,omitempty"`
	// Enqueues times enqueueing small workflows one by one and batched.
	Enqueues []*WorkflowEnqueueRun `json:"enqueues,omitempty"`
}

// WorkflowRow is one kind of drain.
type WorkflowRow struct {
	Name  string           `json:"name"`
	Label string           `json:"label"`
	Runs  []*WorkflowDrain `json:"runs"`
	// JobsPerSecond is the mean of the runs' rates (steps for the
	// diamonds), Ratio that over plain's.
	JobsPerSecond float64 `json:"jobs_per_second"`
	Ratio         float64 `json:"ratio_to_plain"`
}

// WorkflowDrain is one drain: the jobs enqueued first (EnqueueSeconds),
// then worked off.
type WorkflowDrain struct {
	DrainResult
	EnqueueSeconds     float64 `json:"enqueue_seconds"`
	WorkerCPUPer1000   float64 `json:"worker_cpu_seconds_per_1000_jobs"`
	PostgresCPUPer1000 float64 `json:"postgres_cpu_seconds_per_1000_jobs,omitempty"`
	// Kept is the rows in hopper_job_history at the end.
	Kept int64 `json:"kept"`
	// AckSamples is the acknowledgement statements (AckBatch,
	// AckBatchKeep) found running in pg_stat_activity, sampled every 10ms
	// during the drain, and AckLockWaits those of them waiting for a lock
	// (another transaction's row lock): their ratio is about the share of
	// the acknowledgements' time spent waiting for one another.
	AckSamples   int64 `json:"ack_samples"`
	AckLockWaits int64 `json:"ack_lock_waits"`
}

// WorkflowLatency is parent → child at a trickle.
type WorkflowLatency struct {
	Rate      int     `json:"rate"`
	Seconds   float64 `json:"seconds"`
	Workflows int     `json:"workflows"`
	// Samples is the children timed: 3 per diamond after its root (one
	// parent each), 1 after its three middle steps (the last of them).
	Samples int `json:"samples"`
	// From the parent's acknowledgement (finished_at) to the child's
	// handler start: all children, those of one parent (fan-out) and the
	// last steps (fan-in).
	P50Ms      float64 `json:"p50_ms"`
	P90Ms      float64 `json:"p90_ms"`
	P99Ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
	FanOutP50  float64 `json:"fan_out_p50_ms"`
	FanInP50Ms float64 `json:"fan_in_p50_ms"`
	// From the parent handler's return to the child's handler start.
	FromReturnP50Ms float64 `json:"from_return_p50_ms"`
	FromReturnP99Ms float64 `json:"from_return_p99_ms"`
	// RootPickupP50Ms is the roots' pickup: EnqueueWorkflow's return to
	// the root's handler start.
	RootPickupP50Ms float64 `json:"root_pickup_p50_ms"`
	RootPickupP99Ms float64 `json:"root_pickup_p99_ms"`
}

// WorkflowBatch is a batch of Jobs jobs and its callback.
type WorkflowBatch struct {
	Jobs           int     `json:"jobs"`
	EnqueueSeconds float64 `json:"enqueue_seconds"`
	DrainSeconds   float64 `json:"drain_seconds"`
	JobsPerSecond  float64 `json:"jobs_per_second"`
	// CallbackAfterMs is the last job's acknowledgement (finished_at) to
	// the callback's handler start.
	CallbackAfterMs    float64         `json:"callback_after_ms"`
	PostgresCPUPer1000 float64         `json:"postgres_cpu_seconds_per_1000_jobs,omitempty"`
	Statements         []StatementCost `json:"statements,omitempty"`
	// AckSamples and AckLockWaits are as WorkflowDrain's: every
	// acknowledgement of the batch counts its one callback down.
	AckSamples   int64 `json:"ack_samples"`
	AckLockWaits int64 `json:"ack_lock_waits"`
}

// The kinds of drain, in the order of WorkflowsResult.Rows.
const (
	wfPlain    = "plain"
	wfKept     = "plain_kept"
	wfDiamonds = "diamonds"
)

// workflowsOrder is the kinds' indexes in the order they drain: forward,
// then mirrored.
var workflowsOrder = []int{0, 1, 2, 2, 1, 0}

// workflowKeep is how long the "kept" plain jobs stay in the history: as
// long as the worker keeps workflow steps by default.
const workflowKeep = 7 * 24 * time.Hour

func runWorkflows(ctx context.Context, cfg Config, logf func(string, ...any)) (*WorkflowsResult, error) {
	o := cfg.Workflows
	base := cfg
	base.Scheduled, base.keep, base.queues, base.keyed, base.sequenced, base.flow = 0, 0, 0, 0, 0, workerFlow{}
	jobsN := 5 * o.Diamonds
	r := &WorkflowsResult{Diamonds: o.Diamonds, Enqueue: "before the workers start (no producer)"}
	r.Rows = []*WorkflowRow{
		{Name: wfPlain, Label: fmt.Sprintf("%d plain jobs", jobsN)},
		{Name: wfKept, Label: fmt.Sprintf("%d plain jobs, kept in history", jobsN)},
		{Name: wfDiamonds, Label: fmt.Sprintf("%d diamonds (1→3→1), %d steps", o.Diamonds, jobsN)},
	}
	payload := cfg.payload()
	for i, ki := range workflowsOrder {
		row := r.Rows[ki]
		run := base
		enqueue := func(ctx context.Context, pool *pgxpool.Pool) error {
			return enqueueSpread(ctx, pool, jobsN, queueNames(1), payload)
		}
		switch row.Name {
		case wfKept:
			run.keep = workflowKeep
		case wfDiamonds:
			enqueue = func(ctx context.Context, pool *pgxpool.Pool) error {
				return enqueueDiamonds(ctx, pool, o.Diamonds, fmt.Sprintf("d%d-", i), payload)
			}
		}
		logf("workflows: drain %d of %d: %s", i+1, len(workflowsOrder), row.Label)
		d, err := workflowDrain(ctx, run, jobsN, enqueue, nil)
		if err != nil {
			return r, fmt.Errorf("%s: %w", row.Label, err)
		}
		r.Order = append(r.Order, row.Name)
		row.Runs = append(row.Runs, d)
	}
	for _, row := range r.Rows {
		sum := 0.0
		for _, d := range row.Runs {
			sum += d.JobsPerSecond
		}
		row.JobsPerSecond = sum / float64(len(row.Runs))
	}
	if plain := r.Rows[0].JobsPerSecond; plain > 0 {
		for _, row := range r.Rows {
			row.Ratio = row.JobsPerSecond / plain
		}
		r.Ratio = r.Rows[2].Ratio
	}
	if kept := r.Rows[1].JobsPerSecond; kept > 0 {
		r.RatioToKept = r.Rows[2].JobsPerSecond / kept
	}

	logf("workflows: parent → child latency, %d diamonds a second for %v", o.TrickleRate, o.TrickleDuration)
	var err error
	if r.Latency, err = workflowLatency(ctx, cfg); err != nil {
		return r, fmt.Errorf("latency: %w", err)
	}
	logf("workflows: a batch of %d jobs and a callback", o.BatchJobs)
	if r.Batch, err = workflowBatch(ctx, base); err != nil {
		return r, fmt.Errorf("batch: %w", err)
	}
	if r.Enqueues, err = timeWorkflowEnqueues(ctx, cfg, o.Diamonds, logf); err != nil {
		return r, err
	}
	if cfg.Explain {
		logf("workflows: acknowledgements timed with and without workflow steps")
		if r.Acks, err = timeAcks(ctx, cfg.DatabaseURL, o.BatchJobs); err != nil {
			return r, fmt.Errorf("explain: %w", err)
		}
	}
	return r, nil
}

// diamond is the workflow fetch → (a, b, c) → publish, all no-op jobs.
func diamond(id string, payload benchJob) *jobs.Workflow {
	e := func() jobs.Entry { return noop.Entry(payload) }
	return jobs.NewWorkflow(id).
		Add("fetch", e()).
		Add("a", e(), jobs.After("fetch")).
		Add("b", e(), jobs.After("fetch")).
		Add("c", e(), jobs.After("fetch")).
		Add("publish", e(), jobs.After("a", "b", "c"))
}

// enqueueDiamonds enqueues n diamonds named prefix0, prefix1 …, in
// EnqueueWorkflows calls from four connections.
func enqueueDiamonds(ctx context.Context, pool *pgxpool.Pool, n int, prefix string, payload benchJob) error {
	return enqueueWorkflowsBatched(ctx, pool, n, prefix, workflowShapes[0], payload)
}

// workflowDrain is runDrain with a backlog of total jobs that enqueue
// writes, timed; after, when given, reads the schema before it is
// dropped (the worker process stopped).
func workflowDrain(ctx context.Context, cfg Config, total int, enqueue func(context.Context, *pgxpool.Pool) error,
	after func(*scratch, *workerProc) error) (*WorkflowDrain, error) {
	s, err := newScratch(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	began := time.Now()
	if err := enqueue(ctx, s.pool); err != nil {
		return nil, fmt.Errorf("enqueue: %w", err)
	}
	d := &WorkflowDrain{EnqueueSeconds: time.Since(began).Seconds()}
	if err := maintain(ctx, s.pool, "vacuum.sql"); err != nil {
		return nil, err
	}
	statements := newStatementMeter(ctx, s.pool)
	p, err := startWorkers(cfg, s.url, cfg.workerLabel("workflows"))
	if err != nil {
		return nil, err
	}
	startCPU := p.cpu()
	meter := startPGMeter()
	sampling, stopSampling := context.WithCancel(ctx)
	sampled := make(chan [2]int64, 1)
	go func() { sampled <- sampleAcks(sampling, s.pool) }()
	samples := sync.OnceValue(func() [2]int64 { stopSampling(); return <-sampled })
	defer samples()
	began = time.Now()
	fail := func(err error) (*WorkflowDrain, error) {
		meter.seconds()
		_, _ = p.stop()
		return nil, err
	}
	for drained := false; !drained; {
		select {
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-p.exited:
			meter.seconds()
			_ = p.cmd.Wait()
			return nil, fmt.Errorf("worker process died")
		case <-time.After(5 * time.Millisecond):
		}
		if p.finished() < int64(total) {
			if time.Since(began) > 10*time.Minute {
				return fail(fmt.Errorf("%d of %d jobs done after %v", p.finished(), total, time.Since(began).Round(time.Second)))
			}
			continue
		}
		if p.unconfirmed.Load() == 0 {
			break
		}
		live, _, err := TableCounts(ctx, s.pool)
		if err != nil {
			return fail(err)
		}
		drained = live == 0
	}
	secs := time.Since(began).Seconds()
	workerCPU := p.cpu() - startCPU
	pgCPU, pgOK := meter.seconds()
	acks := samples()
	d.AckSamples, d.AckLockWaits = acks[0], acks[1]
	peak, err := p.stop()
	if err != nil {
		return nil, err
	}
	if err := checkTable(ctx, s.pool, p, int64(total), 0); err != nil {
		return nil, err
	}
	d.DrainResult = DrainResult{Jobs: total, Seconds: secs, JobsPerSecond: float64(total) / secs, WorkerPeakRSSBytes: peak,
		Statements: statements.costs(ctx)}
	d.WorkerCPUPer1000 = 1000 * workerCPU / float64(total)
	if pgOK {
		d.PostgresCPUPer1000 = 1000 * pgCPU / float64(total)
	}
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM hopper_job_history").Scan(&d.Kept); err != nil {
		return nil, err
	}
	if after != nil {
		if err := after(s, p); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// sampleAcks counts, every 10ms until ctx ends, the acknowledgement
// statements running on the server and those of them waiting for a lock.
func sampleAcks(ctx context.Context, pool *pgxpool.Pool) (n [2]int64) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return n
		case <-t.C:
		}
		var running, waiting int64
		err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'Lock')
			FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'active' AND query LIKE '-- name: AckBatch%'`).Scan(&running, &waiting)
		if err == nil {
			n[0] += running
			n[1] += waiting
		}
	}
}

// stepTimes is when each step's handler started and returned, by job id.
type stepTimes struct {
	mu               sync.Mutex
	started, ended   map[int64]time.Time
	startedN, endedN atomic.Int64
}

func workflowLatency(ctx context.Context, cfg Config) (*WorkflowLatency, error) {
	o := cfg.Workflows
	s, err := newScratch(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	times := &stepTimes{started: map[int64]time.Time{}, ended: map[int64]time.Time{}}
	w, err := worker.New(s.pool, worker.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	if err := worker.Handle(w, noop, func(_ context.Context, j *jobs.Job[benchJob]) error {
		at := time.Now()
		times.mu.Lock()
		times.started[j.ID] = at
		times.mu.Unlock()
		times.startedN.Add(1)
		defer func() {
			at := time.Now()
			times.mu.Lock()
			times.ended[j.ID] = at
			times.mu.Unlock()
			times.endedN.Add(1)
		}()
		return nil
	}); err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(runCtx) }()
	defer func() { stop(); <-errc }()
	time.Sleep(200 * time.Millisecond) // let it reach idle

	type sent struct {
		steps     map[string]int64
		committed time.Time
	}
	var all []sent
	payload := cfg.payload()
	every := time.Second / time.Duration(o.TrickleRate)
	began := time.Now()
	tick := time.NewTicker(every)
	for i := 0; time.Since(began) < o.TrickleDuration; i++ {
		res, err := jobs.EnqueueWorkflow(ctx, s.pool, diamond(fmt.Sprintf("trickle-%d", i), payload))
		if err != nil {
			tick.Stop()
			return nil, err
		}
		all = append(all, sent{res.Steps, time.Now()})
		select {
		case <-ctx.Done():
			tick.Stop()
			return nil, ctx.Err()
		case err := <-errc:
			tick.Stop()
			return nil, fmt.Errorf("worker stopped: %v", err)
		case <-tick.C:
		}
	}
	tick.Stop()
	secs := time.Since(began).Seconds()
	// Every step has run and its acknowledgement has committed once the
	// history holds it (the steps are kept: KeepWorkflowSteps).
	want := int64(5 * len(all))
	for deadline := time.Now().Add(time.Minute); ; {
		var kept int64
		if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM hopper_job_history").Scan(&kept); err != nil {
			return nil, err
		}
		if kept >= want {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d steps done a minute after the trickle", kept, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ids := make([]int64, 0, want)
	for _, d := range all {
		for _, id := range d.steps {
			ids = append(ids, id)
		}
	}
	finished := map[int64]time.Time{}
	rows, err := s.pool.Query(ctx, "SELECT id, finished_at FROM hopper_job_history WHERE id = ANY ($1)", ids)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id int64
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			rows.Close()
			return nil, err
		}
		finished[id] = at
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	times.mu.Lock()
	defer times.mu.Unlock()
	var lat, fanOut, fanIn, fromReturn, pickup []time.Duration
	// since is the child's start less the last of its parents' ends.
	since := func(child int64, parents []int64, ends map[int64]time.Time) (time.Duration, error) {
		start, ok := times.started[child]
		if !ok {
			return 0, fmt.Errorf("step %d: no start recorded", child)
		}
		var last time.Time
		for _, p := range parents {
			end, ok := ends[p]
			if !ok {
				return 0, fmt.Errorf("step %d: no end recorded", p)
			}
			if end.After(last) {
				last = end
			}
		}
		return max(start.Sub(last), 0), nil
	}
	for _, d := range all {
		st := d.steps
		if start, ok := times.started[st["fetch"]]; ok {
			pickup = append(pickup, max(start.Sub(d.committed), 0))
		}
		for _, c := range []struct {
			child   string
			parents []string
		}{{"a", []string{"fetch"}}, {"b", []string{"fetch"}}, {"c", []string{"fetch"}}, {"publish", []string{"a", "b", "c"}}} {
			parents := make([]int64, len(c.parents))
			for i, p := range c.parents {
				parents[i] = st[p]
			}
			l, err := since(st[c.child], parents, finished)
			if err != nil {
				return nil, err
			}
			lat = append(lat, l)
			if len(parents) == 1 {
				fanOut = append(fanOut, l)
			} else {
				fanIn = append(fanIn, l)
			}
			if l, err = since(st[c.child], parents, times.ended); err != nil {
				return nil, err
			}
			fromReturn = append(fromReturn, l)
		}
	}
	return &WorkflowLatency{Rate: o.TrickleRate, Seconds: secs, Workflows: len(all), Samples: len(lat),
		P50Ms: ms(percentile(lat, 50)), P90Ms: ms(percentile(lat, 90)), P99Ms: ms(percentile(lat, 99)), MaxMs: ms(percentile(lat, 100)),
		FanOutP50: ms(percentile(fanOut, 50)), FanInP50Ms: ms(percentile(fanIn, 50)),
		FromReturnP50Ms: ms(percentile(fromReturn, 50)), FromReturnP99Ms: ms(percentile(fromReturn, 99)),
		RootPickupP50Ms: ms(percentile(pickup, 50)), RootPickupP99Ms: ms(percentile(pickup, 99)),
	}, nil
}

// workflowBatch enqueues a batch of BatchJobs no-op jobs with a traced
// callback (jobs.NewBatch), drains it with the worker process, and times
// the callback's start from the last job's acknowledgement.
func workflowBatch(ctx context.Context, cfg Config) (*WorkflowBatch, error) {
	n := cfg.Workflows.BatchJobs
	const id = "bench-batch"
	payload := cfg.payload()
	enqueue := func(ctx context.Context, pool *pgxpool.Pool) error {
		entries := make([]jobs.Entry, n)
		for i := range entries {
			entries[i] = noop.Entry(payload)
		}
		_, err := jobs.EnqueueWorkflow(ctx, pool, jobs.NewBatch(id, entries, traced.Entry(payload)))
		return err
	}
	var lastAck time.Time
	var callback []jobTrace
	after := func(s *scratch, p *workerProc) error {
		p.mu.Lock()
		callback = append(callback, p.traces...)
		p.mu.Unlock()
		return s.pool.QueryRow(ctx, `SELECT max(finished_at) FROM hopper_job_history
			WHERE meta ? 'hopper.workflow' AND (meta ->> 'hopper.workflow') = $1 AND (meta ->> 'hopper.step') <> 'callback'`, id).Scan(&lastAck)
	}
	d, err := workflowDrain(ctx, cfg, n+1, enqueue, after)
	if err != nil {
		return nil, err
	}
	if len(callback) != 1 {
		return nil, fmt.Errorf("the callback ran %d times", len(callback))
	}
	return &WorkflowBatch{Jobs: n, EnqueueSeconds: d.EnqueueSeconds, DrainSeconds: d.Seconds, JobsPerSecond: d.JobsPerSecond,
		CallbackAfterMs: ms(max(callback[0].Started.Sub(lastAck), 0)), PostgresCPUPer1000: d.PostgresCPUPer1000,
		Statements: d.Statements, AckSamples: d.AckSamples, AckLockWaits: d.AckLockWaits}, nil
}

// Print writes the mode's report.
func (r *WorkflowsResult) Print(w io.Writer) {
	fmt.Fprintf(w, "workflows: drains, every job enqueued %s, in the order %s\n", r.Enqueue, strings.Join(r.Order, ", "))
	fmt.Fprintf(w, "  %-44s %10s %7s   %s\n", "kind", "jobs/s", "ratio", "runs (jobs/s)")
	for _, row := range r.Rows {
		rates := make([]float64, len(row.Runs))
		for i, d := range row.Runs {
			rates[i] = d.JobsPerSecond
		}
		fmt.Fprintf(w, "  %-44s %10.0f %7.2f   %s\n", row.Label, row.JobsPerSecond, row.Ratio, rateList(rates))
	}
	fmt.Fprintf(w, "  workflow steps/s over plain jobs/s: %.2f (target 0.70); over plain jobs kept in history: %.2f\n", r.Ratio, r.RatioToKept)
	for _, row := range r.Rows {
		for i, d := range row.Runs {
			fmt.Fprintf(w, "  %s, run %d: enqueued in %.1fs, drained in %.1fs; CPU per 1000 jobs: worker %.3fs, PostgreSQL %.3fs; %d kept in history;"+
				" acks waiting for a lock in %d of %d samples\n",
				row.Label, i+1, d.EnqueueSeconds, d.Seconds, d.WorkerCPUPer1000, d.PostgresCPUPer1000, d.Kept, d.AckLockWaits, d.AckSamples)
			printWorkflowStatements(w, d.Statements)
		}
	}
	if l := r.Latency; l != nil {
		fmt.Fprintf(w, "workflows: parent done → child start at %d diamonds/s for %.0fs (%d workflows, %d children), from the parent's ack (finished_at):"+
			" p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms (target p50 10 ms)\n",
			l.Rate, l.Seconds, l.Workflows, l.Samples, l.P50Ms, l.P90Ms, l.P99Ms, l.MaxMs)
		fmt.Fprintf(w, "  after one parent p50 %.2f ms, after the last of three p50 %.2f ms; from the parent handler's return p50 %.2f ms, p99 %.2f ms;"+
			" roots' pickup p50 %.2f ms, p99 %.2f ms\n",
			l.FanOutP50, l.FanInP50Ms, l.FromReturnP50Ms, l.FromReturnP99Ms, l.RootPickupP50Ms, l.RootPickupP99Ms)
	}
	if b := r.Batch; b != nil {
		fmt.Fprintf(w, "workflows: batch of %d jobs and a callback: enqueued in %.2fs (one EnqueueWorkflow); drained in %.1fs = %.0f jobs/s;"+
			" last job's ack → callback start %.2f ms; PostgreSQL CPU per 1000 jobs %.3fs; acks waiting for a lock in %d of %d samples\n",
			b.Jobs, b.EnqueueSeconds, b.DrainSeconds, b.JobsPerSecond, b.CallbackAfterMs, b.PostgresCPUPer1000, b.AckLockWaits, b.AckSamples)
		printWorkflowStatements(w, b.Statements)
	}
	printWorkflowEnqueues(w, r.Enqueues)
	for i, a := range r.Acks {
		if i == 0 {
			fmt.Fprintf(w, "workflows: acknowledgements (the DELETE of AckBatch, in transactions rolled back, EXPLAIN ANALYZE):\n")
		}
		a.Print(w)
	}
}

func printWorkflowStatements(w io.Writer, stmts []StatementCost) {
	for j, st := range stmts {
		if j == 4 {
			break
		}
		fmt.Fprintf(w, "    %-18s %9d calls  %9.0f ms  %7.3f ms/call  %8.1f buffers/call\n", st.Name, st.Calls, st.TotalMs, st.MeanMs, st.BuffersPerCall)
	}
}

// AckTiming is one acknowledgement's DELETE, timed with EXPLAIN (ANALYZE,
// BUFFERS) in a transaction rolled back: the statement, and the part of it
// the workflow trigger took; Nested is each statement the trigger ran
// (auto_explain, when the server lets the session load it), the slowest
// first: its duration and its first line.
type AckTiming struct {
	Name      string  `json:"name"`
	Rows      int     `json:"rows"`
	TotalMs   float64 `json:"total_ms"`
	TriggerMs float64 `json:"trigger_ms"`
	// FirstMs and FirstTriggerMs are the first run in a new session, its
	// statements planned for their arguments.
	FirstMs        float64  `json:"first_ms"`
	FirstTriggerMs float64  `json:"first_trigger_ms"`
	Plan           string   `json:"plan"`
	Nested         []string `json:"nested,omitempty"`
	// NestedPlans are the nested statements' plans, as auto_explain
	// printed them, the slowest first.
	NestedPlans []string `json:"nested_plans,omitempty"`
}

// Print writes the timing and its nested statements.
func (a *AckTiming) Print(w io.Writer) {
	fmt.Fprintf(w, "  %-62s %6d rows  %8.2f ms, workflow trigger %8.2f ms (%.1f µs a row); first in a new session %.2f ms, trigger %.2f ms\n",
		a.Name, a.Rows, a.TotalMs, a.TriggerMs, 1000*a.TriggerMs/float64(max(a.Rows, 1)), a.FirstMs, a.FirstTriggerMs)
	for i, n := range a.Nested {
		if i == 6 {
			break
		}
		fmt.Fprintf(w, "    %s\n", n)
	}
}

// ackSteps is how many steps of each kind timeAcks deletes at once: about
// what one acknowledgement batch holds at speed.
const ackSteps = 1000

var (
	triggerTime = regexp.MustCompile(`Trigger hopper_jobs_workflow_advance: time=([0-9.]+)`)
	execTime    = regexp.MustCompile(`Execution Time: ([0-9.]+) ms`)
	nestedPlan  = regexp.MustCompile(`(?s)duration: ([0-9.]+) ms\s+plan:\s*Query Text: (.*?)\n`)
)

// timeAcks fills a scratch schema with ackSteps diamonds, ackSteps plain
// jobs and a batch of batchJobs jobs (as the mode's batch), analyzed, and
// times the DELETE an acknowledgement makes of: the plain jobs; the roots
// (each promotes three steps); the middle steps of the same diamonds,
// their roots gone (each third one promotes the last step); the last
// steps (no children); ackSteps jobs of the batch (each counts the
// callback down). Each is timed in a
// session of its own, in transactions rolled back (timeAckRuns).
func timeAcks(ctx context.Context, dbURL string, batchJobs int) ([]*AckTiming, error) {
	s, err := newScratch(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	if err := enqueueDiamonds(ctx, s.pool, ackSteps, "ack-", benchJob{}); err != nil {
		return nil, err
	}
	if err := enqueueCopy(ctx, s.pool, noop, ackSteps, ackSteps, benchJob{}); err != nil {
		return nil, err
	}
	entries := make([]jobs.Entry, batchJobs)
	for i := range entries {
		entries[i] = noop.Entry(benchJob{})
	}
	if _, err := jobs.EnqueueWorkflow(ctx, s.pool, jobs.NewBatch("ack-batch", entries, noop.Entry(benchJob{}))); err != nil {
		return nil, err
	}
	if err := maintain(ctx, s.pool, "vacuum.sql"); err != nil {
		return nil, err
	}
	ids := func(where string) ([]int64, error) {
		rows, err := s.pool.Query(ctx, "SELECT id FROM hopper_jobs WHERE "+where+" ORDER BY id")
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	plain, err := ids("NOT meta ? 'hopper.workflow' OR meta IS NULL")
	if err != nil {
		return nil, err
	}
	roots, err := ids(`meta ->> 'hopper.workflow' LIKE 'ack-%' AND meta ->> 'hopper.step' = 'fetch'`)
	if err != nil {
		return nil, err
	}
	mids, err := ids(`meta ->> 'hopper.workflow' LIKE 'ack-%' AND meta ->> 'hopper.step' IN ('a', 'b', 'c')`)
	if err != nil {
		return nil, err
	}
	sinks, err := ids(`meta ->> 'hopper.workflow' LIKE 'ack-%' AND meta ->> 'hopper.step' = 'publish'`)
	if err != nil {
		return nil, err
	}
	batch, err := ids(`meta ->> 'hopper.workflow' = 'ack-batch' AND meta ->> 'hopper.step' <> 'callback'`)
	if err != nil {
		return nil, err
	}
	const del = "DELETE FROM hopper_jobs WHERE id = ANY ($1)"
	var out []*AckTiming
	for _, c := range []struct {
		name   string
		ids    []int64
		before [][]int64 // deleted first, in the same transaction
	}{
		{"plain jobs", plain, nil},
		{"roots of diamonds (each promotes 3 steps)", roots, nil},
		{"middle steps, roots gone (each third promotes the last)", mids, [][]int64{roots}},
		{"last steps, parents gone (no children)", sinks, [][]int64{roots, mids}},
		{fmt.Sprintf("jobs of a batch of %d (each counts the callback down)", len(batch)), batch[:min(ackSteps, len(batch))], nil},
	} {
		a, err := timeAckRuns(ctx, s, del, c.ids, c.before)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		a.Name, a.Rows = c.name, len(c.ids)
		out = append(out, a)
	}
	return out, nil
}

// timeAckRuns times one acknowledgement in a new session, as a worker's
// new connection would run it: the first run plans the trigger's
// statements for their arguments (custom plans: FirstMs); four more warm
// the session up (PL/pgSQL then settles on generic plans, as a worker's
// connection soon does), three are timed (the median is the result), and
// one more runs under auto_explain for the nested statements (whose
// timing slows them: their shares matter, not their sum). Every run is
// rolled back and followed by a VACUUM, so that each finds the tables as
// the first did, not with the dead versions of the runs before.
func timeAckRuns(ctx context.Context, s *scratch, del string, ids []int64, before [][]int64) (*AckTiming, error) {
	cc, err := pgx.ParseConfig(s.url)
	if err != nil {
		return nil, err
	}
	var notices noticeLog
	cc.OnNotice = notices.add
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var runs []*AckTiming
	for i := range 9 {
		a, err := timeAck(ctx, conn, &notices, del, ids, before, i == 8)
		if err != nil {
			return nil, err
		}
		runs = append(runs, a)
		if _, err := s.pool.Exec(ctx, "VACUUM hopper_jobs, hopper_workflow_waits, hopper_workflow_deps, hopper_dead_jobs"); err != nil {
			return nil, err
		}
	}
	timed := append([]*AckTiming(nil), runs[5:8]...)
	sort.Slice(timed, func(i, j int) bool { return timed[i].TotalMs < timed[j].TotalMs })
	a := timed[1]
	a.FirstMs, a.FirstTriggerMs = runs[0].TotalMs, runs[0].TriggerMs
	a.Nested, a.NestedPlans = runs[8].Nested, runs[8].NestedPlans
	return a, nil
}

// noticeLog collects a session's notices while on.
type noticeLog struct {
	mu       sync.Mutex
	on       bool
	messages []string
}

func (l *noticeLog) add(_ *pgconn.PgConn, n *pgconn.Notice) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.on {
		l.messages = append(l.messages, n.Message)
	}
}

// collect starts collecting (on) or stops and returns what was collected.
func (l *noticeLog) collect(on bool) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on = on
	got := l.messages
	l.messages = nil
	return got
}

// timeAck runs EXPLAIN (ANALYZE, BUFFERS) of del for ids in a transaction
// rolled back, after deleting each of before (the trigger on, as an
// acknowledgement would); with nested, auto_explain logs the trigger's
// statements to the session (as notices), when it can be loaded.
func timeAck(ctx context.Context, conn *pgx.Conn, notices *noticeLog, del string, ids []int64, before [][]int64, nested bool) (*AckTiming, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SET LOCAL jit = off"); err != nil {
		return nil, err
	}
	for _, b := range before {
		if _, err := tx.Exec(ctx, del, b); err != nil {
			return nil, err
		}
	}
	if _, err := tx.Exec(ctx, "SAVEPOINT auto_explain"); err != nil {
		return nil, err
	}
	if nested {
		nested = autoExplain(ctx, tx)
	}
	if !nested {
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT auto_explain"); err != nil {
			return nil, err
		}
	}
	notices.collect(true)
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+del, ids)
	if err != nil {
		notices.collect(false)
		return nil, err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	got := notices.collect(false)
	if err != nil {
		return nil, err
	}
	a := &AckTiming{Plan: strings.Join(lines, "\n")}
	if m := execTime.FindStringSubmatch(a.Plan); m != nil {
		a.TotalMs, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := triggerTime.FindStringSubmatch(a.Plan); m != nil {
		a.TriggerMs, _ = strconv.ParseFloat(m[1], 64)
	}
	type stmt struct {
		ms         float64
		text, plan string
	}
	var stmts []stmt
	for _, n := range got {
		m := nestedPlan.FindStringSubmatch(n)
		if m == nil {
			continue
		}
		d, _ := strconv.ParseFloat(m[1], 64)
		text := strings.Join(strings.Fields(m[2]), " ")
		if strings.HasPrefix(text, "EXPLAIN") {
			continue // the statement itself
		}
		if len(text) > 110 {
			text = text[:110] + "…"
		}
		stmts = append(stmts, stmt{d, text, n})
	}
	sort.Slice(stmts, func(i, j int) bool { return stmts[i].ms > stmts[j].ms })
	for _, st := range stmts {
		a.Nested = append(a.Nested, fmt.Sprintf("%8.2f ms  %s", st.ms, st.text))
		a.NestedPlans = append(a.NestedPlans, st.plan)
	}
	return a, nil
}

// autoExplain loads auto_explain into the session and has it send the
// plans of every statement, nested ones included, as notices until the
// transaction ends; false when the server refuses (not a superuser, no
// such library).
func autoExplain(ctx context.Context, tx pgx.Tx) bool {
	if _, err := tx.Exec(ctx, "LOAD 'auto_explain'"); err != nil {
		return false
	}
	for _, set := range []string{"auto_explain.log_min_duration = 0", "auto_explain.log_analyze = on",
		"auto_explain.log_nested_statements = on", "auto_explain.log_level = notice", "auto_explain.log_timing = on"} {
		if _, err := tx.Exec(ctx, "SET LOCAL "+set); err != nil {
			return false
		}
	}
	return true
}
