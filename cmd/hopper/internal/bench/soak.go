package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/jobs"
)

// The soak: a steady mixed load for a long time (an hour at full size),
// with completed jobs and dead jobs kept and pruned as a production queue
// keeps them, sampled every few minutes. What it answers is whether
// storage and throughput stay flat: each table's size and dead tuples, the
// autovacuums run, and the rates, sample by sample; then whether any job
// was lost.

// SoakOptions is the soak's load and sampling.
type SoakOptions struct {
	Duration time.Duration // how long the load runs
	Sample   time.Duration // the tables and rates are read this often
	Rate     int           // jobs offered per second, all kinds together
	Keep     time.Duration // completed jobs (workflow steps too) and dead jobs are kept this long
	Chart    string        // an SVG chart of the samples is written here ("": none)
}

func (o SoakOptions) summary() map[string]any {
	return map[string]any{"duration": o.Duration.String(), "sample": o.Sample.String(), "rate": o.Rate, "keep": o.Keep.String(), "chart": o.Chart}
}

// soakTables are the tables each sample reads, the live one first.
var soakTables = []string{"hopper_jobs", "hopper_job_history", "hopper_dead_jobs"}

// The soak's mix of the offered rate; plain jobs take the rest. Workflow
// steps come as diamonds of five steps, failures go straight to the dead
// table (bench.fail), and the schedule adds a job a second of its own.
const (
	soakSequenceShare = 0.10
	soakWorkflowShare = 0.10
	soakFailShare     = 0.01
	soakSequenceKeys  = 20
	soakTick          = 100 * time.Millisecond // the producer enqueues this often
)

// SoakTable is one table in one sample.
type SoakTable struct {
	Name        string `json:"name"`
	TableBytes  int64  `json:"table_bytes"`
	IndexBytes  int64  `json:"index_bytes"`
	LiveTuples  int64  `json:"live_tuples"`
	DeadTuples  int64  `json:"dead_tuples"`
	Autovacuums int64  `json:"autovacuums"`
	Partitions  int    `json:"partitions"` // leaf partitions (1: a plain table)
}

// Bytes is the table's whole size: heap, TOAST and indexes.
func (t SoakTable) Bytes() int64 { return t.TableBytes + t.IndexBytes }

// SoakSample is the state at one moment of the soak, and the rates since
// the sample before it.
type SoakSample struct {
	Seconds           float64     `json:"seconds"` // since the load began
	WorkedPerSecond   float64     `json:"worked_per_second"`
	EnqueuedPerSecond float64     `json:"enqueued_per_second"`
	Backlog           int64       `json:"backlog"` // rows in hopper_jobs
	Tables            []SoakTable `json:"tables"`
}

// SoakResult is the soak's report.
type SoakResult struct {
	Samples []SoakSample `json:"samples"`
	// Reference is the sample the last one is judged against: the one at
	// ten minutes, or at a third of a shorter run (the warm-up: history
	// and dead jobs reach their retention by then).
	Reference int `json:"reference_sample"`
	// SizeRatios is each table's size in the last sample over its size in
	// the reference sample; WorkedRatio the same for the rate worked.
	SizeRatios  map[string]float64 `json:"size_ratios"`
	WorkedRatio float64            `json:"worked_ratio"`
	// What went in and what came out: jobs enqueued by the producer (of
	// which Failing fail on purpose), fired by the schedule, and the
	// worker's counters. Checked against the tables at the end.
	Enqueued    int64 `json:"enqueued"`
	Failing     int64 `json:"failing"`
	Ticks       int64 `json:"ticks"`
	Completed   int64 `json:"completed"`
	Unconfirmed int64 `json:"unconfirmed"`
	Dead        int64 `json:"dead"`
	// SkippedTicks counts the producer's turns skipped because the
	// backlog was over a minute of load: the workers fell behind.
	SkippedTicks       int64   `json:"skipped_ticks"`
	WorkerCPUPer1000   float64 `json:"worker_cpu_seconds_per_1000_jobs"`
	PostgresCPUPer1000 float64 `json:"postgres_cpu_seconds_per_1000_jobs,omitempty"`
	WorkerPeakRSSBytes int64   `json:"worker_peak_rss_bytes"`
	Chart              string  `json:"chart,omitempty"`
}

// soakLoad is the producer's side of the soak.
type soakLoad struct {
	pool    *pgxpool.Pool
	payload benchJob
	// per tick, in jobs: the shares of the offered rate, fractions carried
	// from one tick to the next in owed.
	perTick [4]float64
	owed    [4]float64
	diamond int // workflows enqueued so far, for their names

	enqueued, failing, skipped atomic.Int64
}

const (
	soakPlain = iota
	soakSequence
	soakWorkflow
	soakFail
)

func newSoakLoad(pool *pgxpool.Pool, o SoakOptions, payload benchJob) *soakLoad {
	n := float64(o.Rate) * soakTick.Seconds()
	l := &soakLoad{pool: pool, payload: payload}
	l.perTick[soakSequence] = n * soakSequenceShare
	l.perTick[soakWorkflow] = n * soakWorkflowShare
	l.perTick[soakFail] = n * soakFailShare
	l.perTick[soakPlain] = n - l.perTick[soakSequence] - l.perTick[soakWorkflow] - l.perTick[soakFail]
	return l
}

// due is how many jobs of class c this tick owes, the fraction carried
// to the next.
func (l *soakLoad) due(c int) int {
	l.owed[c] += l.perTick[c]
	n := math.Floor(l.owed[c])
	l.owed[c] -= n
	return int(n)
}

// tick enqueues one tick's jobs: each kind in its own statement, the
// workflows in one transaction. Not cancelled midway: what commits is
// counted.
func (l *soakLoad) tick(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	if n := l.due(soakPlain); n > 0 {
		res, err := noop.EnqueueMany(ctx, l.pool, jobs.Items(repeat(l.payload, n)...))
		if err != nil {
			return fmt.Errorf("plain jobs: %w", err)
		}
		l.enqueued.Add(int64(res.Inserted))
	}
	if n := l.due(soakSequence); n > 0 {
		items := sequenceItems(l.payload, n, soakSequenceKeys, "soak-seq-", nil)
		for {
			res, err := noop.EnqueueMany(ctx, l.pool, items)
			if headRace(err) {
				continue // the batch rolled back: send it again
			}
			if err != nil {
				return fmt.Errorf("sequence jobs: %w", err)
			}
			l.enqueued.Add(int64(res.Inserted))
			break
		}
	}
	if n := l.due(soakFail); n > 0 {
		res, err := failing.EnqueueMany(ctx, l.pool, jobs.Items(repeat(l.payload, n)...))
		if err != nil {
			return fmt.Errorf("failing jobs: %w", err)
		}
		l.enqueued.Add(int64(res.Inserted))
		l.failing.Add(int64(res.Inserted))
	}
	// Workflows come whole: the steps owed are paid in diamonds, the rest
	// carried to the next tick.
	l.owed[soakWorkflow] += l.perTick[soakWorkflow]
	if n := int(l.owed[soakWorkflow] / diamondSteps); n > 0 {
		l.owed[soakWorkflow] -= float64(n * diamondSteps)
		steps, err := l.diamonds(ctx, n)
		if err != nil {
			return fmt.Errorf("workflows: %w", err)
		}
		l.enqueued.Add(steps)
	}
	return nil
}

// diamonds enqueues n diamond workflows in one transaction and returns
// their steps.
func (l *soakLoad) diamonds(ctx context.Context, n int) (int64, error) {
	var steps int64
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		steps = 0
		for i := range n {
			res, err := jobs.EnqueueWorkflow(ctx, tx, diamond(fmt.Sprintf("soak-%d", l.diamond+i), l.payload))
			if err != nil {
				return err
			}
			steps += int64(len(res.Steps))
		}
		return nil
	})
	if err == nil {
		l.diamond += n
	}
	return steps, err
}

// runSoak offers the soak's load for o.Duration with samples every
// o.Sample, then stops the producer, lets the workers finish what is
// left, and checks every job against the tables.
func runSoak(ctx context.Context, cfg Config, logf func(string, ...any)) (*SoakResult, error) {
	o := cfg.Soak
	s, err := newScratch(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	kept := cfg
	kept.keep, kept.deadRetention, kept.ticks = o.Keep, o.Keep, true
	p, err := startWorkers(kept, s.url, cfg.workerLabel("soak"))
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = p.stop()
		}
	}()

	load := newSoakLoad(s.pool, o, cfg.payload())
	prodCtx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	perr := make(chan error, 1)
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() {
		defer pwg.Done()
		t := time.NewTicker(soakTick)
		defer t.Stop()
		for {
			select {
			case <-prodCtx.Done():
				return
			case <-t.C:
			}
			// Over a minute of load waiting: the workers fell behind, and
			// more would only grow the table.
			if load.enqueued.Load()-p.finished()-p.dead.Load() > int64(60*o.Rate) {
				load.skipped.Add(1)
				continue
			}
			if err := load.tick(prodCtx); err != nil {
				perr <- err
				return
			}
		}
	}()

	r := &SoakResult{SizeRatios: map[string]float64{}}
	began := time.Now()
	startCPU := p.cpu()
	startDone := p.completed.Load()
	meter := startPGMeter()
	lastAt, lastDone, lastEnq := began, p.completed.Load(), int64(0)
	sample := func() error {
		now := time.Now()
		done, enq := p.completed.Load(), load.enqueued.Load()
		secs := now.Sub(lastAt).Seconds()
		smp := SoakSample{Seconds: now.Sub(began).Seconds()}
		if secs > 0 && len(r.Samples) > 0 {
			smp.WorkedPerSecond = float64(done-lastDone) / secs
			smp.EnqueuedPerSecond = float64(enq-lastEnq) / secs
		}
		lastAt, lastDone, lastEnq = now, done, enq
		var err error
		if smp.Tables, err = readSoakTables(ctx, s.pool); err != nil {
			return err
		}
		if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM hopper_jobs").Scan(&smp.Backlog); err != nil {
			return fmt.Errorf("backlog: %w", err)
		}
		r.Samples = append(r.Samples, smp)
		logf("  %s", smp.line())
		return nil
	}
	if err := sample(); err != nil {
		return nil, err
	}
	for next := began.Add(o.Sample); ; next = next.Add(o.Sample) {
		if end := began.Add(o.Duration); next.After(end) {
			next = end
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
			return nil, errors.New("worker process died")
		case <-time.After(time.Until(next)):
		}
		if err := sample(); err != nil {
			meter.seconds()
			return nil, err
		}
		if !next.Before(began.Add(o.Duration)) {
			break
		}
	}
	stopProducing()
	pwg.Wait()
	select {
	case err := <-perr:
		meter.seconds()
		return nil, err
	default:
	}
	workerCPU := p.cpu() - startCPU
	pgCPU, pgOK := meter.seconds()
	worked := p.completed.Load() - startDone
	if worked > 0 {
		r.WorkerCPUPer1000 = 1000 * workerCPU / float64(worked)
		if pgOK {
			r.PostgresCPUPer1000 = 1000 * pgCPU / float64(worked)
		}
	}
	r.judge(o)

	// What is left runs to its end (the ticks go on meanwhile), then
	// every job is accounted for.
	if err := waitDrained(ctx, s.pool, p); err != nil {
		return r, err
	}
	stopped = true
	if r.WorkerPeakRSSBytes, err = p.stop(); err != nil {
		return r, err
	}
	r.Enqueued, r.Failing, r.SkippedTicks = load.enqueued.Load(), load.failing.Load(), load.skipped.Load()
	r.Completed, r.Unconfirmed, r.Dead = p.completed.Load(), p.unconfirmed.Load(), p.dead.Load()
	if err := s.pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM hopper_all_jobs WHERE queue = $1)", tickQueue).Scan(&r.Ticks); err != nil {
		return r, fmt.Errorf("ticks: %w", err)
	}
	if err := r.check(ctx, s.pool); err != nil {
		return r, err
	}
	if o.Chart != "" {
		if err := writeChartFile(o.Chart, r); err != nil {
			return r, err
		}
		r.Chart = o.Chart
	}
	return r, nil
}

// waitDrained waits, up to two minutes, until no job but the schedule's is
// left in hopper_jobs.
func waitDrained(ctx context.Context, pool *pgxpool.Pool, p *workerProc) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var left int64
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM hopper_jobs WHERE queue <> $1", tickQueue).Scan(&left); err != nil {
			return fmt.Errorf("jobs left: %w", err)
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d jobs still in hopper_jobs two minutes after the load stopped", left)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.exited:
			return errors.New("worker process died")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// check accounts for every job: each failing job died once, nothing else
// did, and the jobs done (what went in less what is left and what died)
// are those the workers report (CheckOutcomes).
func (r *SoakResult) check(ctx context.Context, pool *pgxpool.Pool) error {
	if r.Dead != r.Failing {
		return fmt.Errorf("%d jobs enqueued to fail, the workers moved %d to the dead table", r.Failing, r.Dead)
	}
	var live int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM hopper_jobs").Scan(&live); err != nil {
		return fmt.Errorf("jobs left: %w", err)
	}
	_, err := CheckOutcomes(r.Enqueued+r.Ticks, r.Completed, r.Unconfirmed, live, r.Dead)
	return err
}

// judge picks the reference sample and compares the last with it.
func (r *SoakResult) judge(o SoakOptions) {
	if len(r.Samples) < 2 {
		return
	}
	at := 10 * time.Minute
	if o.Duration < 2*at {
		at = o.Duration / 3
	}
	r.Reference = 1
	for i, smp := range r.Samples {
		if smp.Seconds <= at.Seconds()+1 && i > 0 {
			r.Reference = i
		}
	}
	ref, last := r.Samples[r.Reference], r.Samples[len(r.Samples)-1]
	for i, t := range last.Tables {
		if b := ref.Tables[i].Bytes(); b > 0 {
			r.SizeRatios[t.Name] = float64(t.Bytes()) / float64(b)
		}
	}
	if ref.WorkedPerSecond > 0 {
		r.WorkedRatio = last.WorkedPerSecond / ref.WorkedPerSecond
	}
}

func readSoakTables(ctx context.Context, pool *pgxpool.Pool) ([]SoakTable, error) {
	stmt, err := benchSQL.ReadFile("sql/soak_tables.sql")
	if err != nil {
		return nil, err
	}
	rows, err := pool.Query(ctx, string(stmt), soakTables)
	if err != nil {
		return nil, fmt.Errorf("soak tables: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (SoakTable, error) {
		var t SoakTable
		err := row.Scan(&t.Name, &t.TableBytes, &t.IndexBytes, &t.LiveTuples, &t.DeadTuples, &t.Autovacuums, &t.Partitions)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("soak tables: %w", err)
	}
	return out, nil
}

func (smp SoakSample) line() string {
	s := fmt.Sprintf("%6.0fs  worked %7.0f/s  enqueued %7.0f/s  backlog %7d", smp.Seconds, smp.WorkedPerSecond, smp.EnqueuedPerSecond, smp.Backlog)
	for _, t := range smp.Tables {
		s += fmt.Sprintf("  %s %s (dead %d, autovacuums %d)", shortTable(t.Name), mib(t.Bytes()), t.DeadTuples, t.Autovacuums)
	}
	return s
}

// shortTable is a table's name in the soak's lines: jobs, history, dead.
func shortTable(name string) string {
	switch name {
	case "hopper_jobs":
		return "jobs"
	case "hopper_job_history":
		return "history"
	case "hopper_dead_jobs":
		return "dead"
	}
	return name
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// Print writes the soak's table: one row per sample, then the verdict.
func (r *SoakResult) Print(w io.Writer) {
	fmt.Fprintf(w, "soak: %d samples; sizes are heap + TOAST + indexes\n", len(r.Samples))
	fmt.Fprintf(w, "  %8s %10s %10s %8s", "seconds", "worked/s", "enqueued/s", "backlog")
	for _, name := range soakTables {
		fmt.Fprintf(w, " %22s", shortTable(name)+" MiB (dead tup)")
	}
	fmt.Fprintln(w)
	for _, smp := range r.Samples {
		fmt.Fprintf(w, "  %8.0f %10.0f %10.0f %8d", smp.Seconds, smp.WorkedPerSecond, smp.EnqueuedPerSecond, smp.Backlog)
		for _, t := range smp.Tables {
			fmt.Fprintf(w, " %22s", fmt.Sprintf("%.1f (%d)", float64(t.Bytes())/(1<<20), t.DeadTuples))
		}
		fmt.Fprintln(w)
	}
	if len(r.Samples) > 1 {
		fmt.Fprintf(w, "  last sample against sample %d (%.0fs):", r.Reference, r.Samples[r.Reference].Seconds)
		for _, name := range soakTables {
			fmt.Fprintf(w, " %s ×%.2f", shortTable(name), r.SizeRatios[name])
		}
		fmt.Fprintf(w, ", worked/s ×%.2f\n", r.WorkedRatio)
		last := r.Samples[len(r.Samples)-1]
		for _, t := range last.Tables {
			fmt.Fprintf(w, "  %s: %d autovacuums in all, %d partitions\n", t.Name, t.Autovacuums, t.Partitions)
		}
	}
	fmt.Fprintf(w, "  jobs: %d enqueued (%d to fail) + %d fired by the schedule; %d completed, %d unconfirmed, %d dead; nothing lost; %d producer turns skipped\n",
		r.Enqueued, r.Failing, r.Ticks, r.Completed, r.Unconfirmed, r.Dead, r.SkippedTicks)
	fmt.Fprintf(w, "  CPU per 1,000 jobs: worker %.4fs, PostgreSQL %.4fs; worker peak RSS %s\n", r.WorkerCPUPer1000, r.PostgresCPUPer1000, mib(r.WorkerPeakRSSBytes))
	if r.Chart != "" {
		fmt.Fprintf(w, "  chart: %s\n", r.Chart)
	}
}

func writeChartFile(path string, r *SoakResult) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if err := writeSoakChart(f, r); err != nil {
		f.Close()
		return fmt.Errorf("chart: %w", err)
	}
	return f.Close()
}
