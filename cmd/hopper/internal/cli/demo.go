package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/cmd/hopper/internal/bench"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/worker"
)

// The demo runs in a schema of its own, recreated at every run and kept
// afterwards for exploring. DDL takes no bind parameters, and the name is
// a constant.
const (
	demoSchema    = "hopper_demo"
	dropDemoSQL   = "DROP SCHEMA IF EXISTS hopper_demo CASCADE"
	createDemoSQL = "CREATE SCHEMA hopper_demo"
	// The demo marks the schema it creates, so that it never drops one it
	// did not create without being told to (--reset).
	demoMark       = "created by hopper demo; dropped and recreated by every run"
	markDemoSQL    = "COMMENT ON SCHEMA hopper_demo IS 'created by hopper demo; dropped and recreated by every run'"
	demoSchemaSQL  = "SELECT coalesce(obj_description(oid, 'pg_namespace'), '') FROM pg_namespace WHERE nspname = $1"
	demoWorkers    = 3
	demoLease      = time.Second
	demoSlowFor    = 2500 * time.Millisecond // outlives two leases: the heartbeat keeps it
	demoTick       = 100 * time.Millisecond
	demoReportWait = 3 * time.Second

	// The summary's reading of the table: every job of the producer's
	// carries the sequence number it gave it (the schedule's jobs do not).
	demoLiveSeqsSQL = "SELECT (payload->>'seq')::bigint FROM hopper_jobs WHERE kind <> 'demo.heartbeat'"
	demoDeadSeqsSQL = "SELECT (payload->>'seq')::bigint FROM hopper_dead_jobs WHERE kind <> 'demo.heartbeat'"

	// The periodic job every demo worker defines: whichever takes the slot
	// fires it, once. Its jobs run in a queue of their own, apart from the
	// producer's accounting.
	demoSchedule      = "demo.heartbeat"
	demoScheduleEvery = "@every 5s"
	demoScheduleQueue = "demo.schedules"

	// doomedKind always fails: the demo's dead jobs are its own.
	doomedKind = "demo.doomed"
)

type demoJob struct {
	Seq int64 `json:"seq"`
}

// demoHeartbeat is the schedule's payload: the slot it was fired for.
type demoHeartbeat struct {
	Slot time.Time `json:"slot"`
}

var demoHeartbeatKind = jobs.MustDefine[demoHeartbeat](demoSchedule)

func demoCommand() *command {
	var duration time.Duration
	var rate int
	var reset, drop bool
	return &command{
		name:    "demo",
		args:    "[--duration D] [--rate N] [--reset] | --drop",
		summary: "one producer, three workers and the sweep on schema hopper_demo, with live progress and a summary that accounts for every job",
		flags: func(fs *flag.FlagSet) {
			durationVar(fs, &duration, "duration", 30*time.Second, "how long to produce (0: until Ctrl-C)")
			fs.IntVar(&rate, "rate", 2000, "jobs enqueued per second")
			fs.BoolVar(&reset, "reset", false, "drop a hopper_demo schema that the demo did not create (and everything in it)")
			fs.BoolVar(&drop, "drop", false, "drop the demo's schema hopper_demo, which the demo keeps for exploring, and run nothing")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			if len(args) > 0 || duration < 0 || rate < 10 {
				return fmt.Errorf("%w: demo takes no argument, a non-negative --duration and --rate of 10 or more", errUsage)
			}
			if e.schema != "" {
				// Taken and ignored, it would say that the demo ran there.
				return fmt.Errorf("%w: the demo runs in a schema of its own, %s: it takes no --schema", errUsage, demoSchema)
			}
			if drop {
				return dropDemoSchema(e, reset)
			}
			return runDemo(e, duration, rate, reset)
		},
	}
}

// dropDemoSchema drops the schema a demo left for exploring: the demo's
// own, or with --reset any hopper_demo.
func dropDemoSchema(e *env, reset bool) error {
	base, err := e.connect()
	if err != nil {
		return err
	}
	defer base.Close()
	var mark string
	switch err := base.QueryRow(e.ctx, demoSchemaSQL, demoSchema).Scan(&mark); {
	case errors.Is(err, pgx.ErrNoRows):
		fmt.Fprintf(e.stdout, "no schema %s: nothing to drop\n", demoSchema)
		return nil
	case err != nil:
		return fmt.Errorf("look for schema %s: %w", demoSchema, err)
	case mark != demoMark && !reset:
		return fmt.Errorf("schema %s was not created by the demo; pass --reset with --drop to drop it and everything in it", demoSchema)
	}
	if _, err := base.Exec(e.ctx, dropDemoSQL); err != nil {
		return fmt.Errorf("drop schema %s: %w", demoSchema, err)
	}
	fmt.Fprintf(e.stdout, "dropped schema %s and everything the demo left in it\n", demoSchema)
	return nil
}

// resetDemoSchema drops the demo's schema from an earlier run and creates
// it anew, marked as the demo's. A hopper_demo schema the demo did not
// create is dropped only with --reset.
func resetDemoSchema(e *env, base *pgxpool.Pool, reset bool) error {
	var mark string
	err := base.QueryRow(e.ctx, demoSchemaSQL, demoSchema).Scan(&mark)
	exists := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("look for schema %s: %w", demoSchema, err)
	}
	if exists && mark != demoMark && !reset {
		return fmt.Errorf("schema %s exists and was not created by the demo; pass --reset to drop it and everything in it", demoSchema)
	}
	for _, stmt := range []string{dropDemoSQL, createDemoSQL, markDemoSQL} {
		if _, err := base.Exec(e.ctx, stmt); err != nil {
			return fmt.Errorf("recreate schema %s: %w", demoSchema, err)
		}
	}
	switch {
	case !exists:
		fmt.Fprintf(e.stdout, "created schema %s for the demo (the next run drops and recreates it)\n", demoSchema)
	case mark == demoMark:
		fmt.Fprintf(e.stdout, "recreated schema %s, the demo's own from an earlier run\n", demoSchema)
	default:
		fmt.Fprintf(e.stdout, "dropped schema %s as --reset asked, and created it anew for the demo\n", demoSchema)
	}
	return nil
}

type demoKinds struct {
	email, flaky, doomed, report, slow *jobs.Kind[demoJob]
}

func runDemo(e *env, duration time.Duration, rate int, reset bool) error {
	base, err := e.connect()
	if err != nil {
		return err
	}
	defer base.Close()
	if err := resetDemoSchema(e, base, reset); err != nil {
		return err
	}
	cfg := base.Config()
	cfg.ConnConfig.RuntimeParams["search_path"] = demoSchema
	cfg.MaxConns = 4 + 4*demoWorkers
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := schema.Up(e.ctx, pool); err != nil {
		return err
	}

	k := demoKinds{
		email:  jobs.MustDefine[demoJob]("demo.email"),
		flaky:  jobs.MustDefine[demoJob]("demo.flaky"),
		doomed: jobs.MustDefine[demoJob](doomedKind, jobs.Defaults(jobs.MaxAttempts(3))),
		report: jobs.MustDefine[demoJob]("demo.report"),
		slow:   jobs.MustDefine[demoJob]("demo.slow"),
	}
	fmt.Fprintf(e.stdout, "hopper demo on %s, schema %s: 1 producer (%d jobs/s), %d workers, sweep every 1s",
		e.target(), demoSchema, rate, demoWorkers)
	if duration > 0 {
		fmt.Fprintf(e.stdout, ", for %v", duration)
	}
	fmt.Fprintln(e.stdout, " (Ctrl-C stops)")

	// Workers run until the producer is done; they get their own context
	// so that Ctrl-C stops production first and then shuts them down.
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(e.ctx))
	defer stopWork()
	registries := make([]*prometheus.Registry, demoWorkers)
	var wg sync.WaitGroup
	errs := make(chan error, demoWorkers)
	ran := &demoLedger{}
	for i := range demoWorkers {
		registries[i] = prometheus.NewRegistry()
		w, err := newDemoWorker(pool, i, registries[i], k, ran)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs <- w.Run(workCtx) }()
	}
	beats := &demoBeats{ran: map[int64]int{}}
	beater, err := newDemoBeater(pool, beats)
	if err != nil {
		return err
	}
	beaterDone := make(chan error, 1)
	go func() { beaterDone <- beater.Run(workCtx) }()

	prodCtx := e.ctx
	if duration > 0 {
		var cancel context.CancelFunc
		prodCtx, cancel = context.WithTimeout(e.ctx, duration)
		defer cancel()
	}
	var enqueued atomic.Int64
	prodErr := make(chan error, 1)
	go func() { prodErr <- produce(prodCtx, pool, k, rate, &enqueued) }()

	began := time.Now()
	ticker := time.NewTicker(time.Second)
	lastDone := int64(0)
	for running := true; running; {
		select {
		case err := <-prodErr:
			if err != nil {
				stopWork()
				wg.Wait()
				return err
			}
			running = false
		case <-ticker.C:
			done := bench.CounterSum(bench.CompletedCounter, registries...)
			line, err := demoProgress(e.ctx, pool, time.Since(began), done-lastDone, registries)
			if err == nil {
				fmt.Fprintln(e.stdout, line+fmt.Sprintf("  done %d", done))
			}
			lastDone = done
		}
	}
	ticker.Stop()

	fmt.Fprintln(e.stdout, "producer stopped; shutting the workers down (unfinished jobs are given back)")
	stopWork()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	if err := <-beaterDone; err != nil {
		return err
	}
	if err := demoSummary(e.stdout, e.commandLine("--schema "+demoSchema+" dead list"), pool, enqueued.Load(), bench.CounterSum(bench.CompletedCounter, registries...),
		bench.CounterSum(bench.UnconfirmedCounter, registries...), ran); err != nil {
		return err
	}
	fired := bench.CounterSum(`hopper_schedule_fires_total{outcome="enqueued"}`, registries...)
	verdict, err := beats.verdict(5 * time.Second)
	fmt.Fprintf(e.stdout, "  %-11s %8d   (schedule %s, %s, defined by all %d workers, fired by whichever took the slot; %s)\n",
		"scheduled", fired, demoSchedule, demoScheduleEvery, demoWorkers, verdict)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "schema %s is kept for exploring (%s); the next demo drops and recreates it, or drop it now: %s\n",
		demoSchema, e.commandLine("--schema "+demoSchema+" stats"), e.commandLine("demo --drop"))
	return nil
}

// demoBeats counts the runs of each slot of the demo's schedule.
type demoBeats struct {
	mu  sync.Mutex
	ran map[int64]int // by slot, in Unix milliseconds
}

// verdict checks that every slot ran once, a period apart with none
// missing between the first and the last that ran.
func (b *demoBeats) verdict(period time.Duration) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	slots := make([]time.Time, 0, len(b.ran))
	for ms, n := range b.ran {
		slot := time.UnixMilli(ms).UTC()
		if n > 1 {
			return "", fmt.Errorf("demo: the slot %s of schedule %s ran %d times", slot.Format(time.RFC3339), demoSchedule, n)
		}
		slots = append(slots, slot)
	}
	slices.SortFunc(slots, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(slots); i++ {
		if gap := slots[i].Sub(slots[i-1]); gap != period {
			return "", fmt.Errorf("demo: schedule %s skipped from %s to %s", demoSchedule, slots[i-1].Format(time.RFC3339), slots[i].Format(time.RFC3339))
		}
	}
	if len(slots) == 1 {
		return "1 slot ran", nil
	}
	return fmt.Sprintf("%d slots ran, each once, none skipped", len(slots)), nil
}

// newDemoBeater runs the schedule's jobs, in their own queue.
func newDemoBeater(pool *pgxpool.Pool, beats *demoBeats) (*worker.Worker, error) {
	w, err := worker.New(pool, worker.Config{
		ID: "demo-beats", Queues: map[string]int{demoScheduleQueue: 1}, PollInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return nil, err
	}
	return w, worker.Handle(w, demoHeartbeatKind, func(_ context.Context, job *jobs.Job[demoHeartbeat]) error {
		beats.mu.Lock()
		defer beats.mu.Unlock()
		beats.ran[job.Payload.Slot.UnixMilli()]++
		return nil
	})
}

// demoLedger records, by sequence number, the jobs whose handler
// succeeded at least once.
type demoLedger struct {
	mu   sync.Mutex
	bits []uint64
}

func (l *demoLedger) add(seq int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for int64(len(l.bits)) <= seq/64 {
		l.bits = append(l.bits, 0)
	}
	l.bits[seq/64] |= 1 << (seq % 64)
}

func (l *demoLedger) has(seq int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return seq/64 < int64(len(l.bits)) && l.bits[seq/64]&(1<<(seq%64)) != 0
}

func newDemoWorker(pool *pgxpool.Pool, i int, reg *prometheus.Registry, k demoKinds, ran *demoLedger) (*worker.Worker, error) {
	w, err := worker.New(pool, worker.Config{
		ID:            fmt.Sprintf("demo-worker-%d", i+1),
		Queues:        map[string]int{jobs.DefaultQueue: 50},
		LeaseDuration: demoLease,
		PollInterval:  200 * time.Millisecond,
		SweepInterval: time.Second,
		RetryBackoff:  worker.Backoff{Base: 200 * time.Millisecond, Max: time.Second, Jitter: 0.2},
		Registerer:    reg,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return nil, err
	}
	quick := func(ctx context.Context, j *jobs.Job[demoJob]) error {
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		ran.add(j.Payload.Seq)
		return nil
	}
	return w, errors.Join(
		worker.Schedule(w, demoSchedule, demoHeartbeatKind, demoScheduleEvery,
			func(slot time.Time) demoHeartbeat { return demoHeartbeat{Slot: slot} },
			worker.OnMissed(worker.CatchUp(100)), // a loaded machine fires late, never skips
			worker.EnqueueOptions(jobs.Queue(demoScheduleQueue))),
		worker.Handle(w, k.email, quick),
		worker.Handle(w, k.report, quick),
		worker.Handle(w, k.flaky, func(ctx context.Context, j *jobs.Job[demoJob]) error {
			if j.Attempt == 1 {
				return errors.New("upstream timeout (the demo fails every first attempt)")
			}
			ran.add(j.Payload.Seq)
			return nil
		}),
		worker.Handle(w, k.doomed, func(context.Context, *jobs.Job[demoJob]) error {
			return errors.New("invalid recipient (the demo always fails this kind)")
		}),
		worker.Handle(w, k.slow, func(ctx context.Context, j *jobs.Job[demoJob]) error {
			select {
			case <-time.After(demoSlowFor):
				ran.add(j.Payload.Seq)
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}),
	)
}

// produce enqueues rate jobs per second, in one batch per kind per tick:
// mostly quick ones, some that fail once, a few that always fail, a few
// scheduled in the future, and now and then a slow one.
func produce(ctx context.Context, pool *pgxpool.Pool, k demoKinds, rate int, enqueued *atomic.Int64) error {
	t := time.NewTicker(demoTick)
	defer t.Stop()
	perTick := max(rate/int(time.Second/demoTick), 1)
	var seq int64
	batch := func(n int) []jobs.Item[demoJob] {
		items := make([]jobs.Item[demoJob], n)
		for i := range items {
			seq++
			items[i].Payload = demoJob{Seq: seq}
		}
		return items
	}
	for tick := 0; ; tick++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		plan := []struct {
			kind *jobs.Kind[demoJob]
			n    int
			opts []jobs.EnqueueOption
		}{
			{k.email, perTick * 80 / 100, nil},
			{k.flaky, perTick * 10 / 100, nil},
			{k.doomed, perTick * 3 / 100, nil},
			{k.report, perTick * 7 / 100, []jobs.EnqueueOption{jobs.Delay(demoReportWait)}},
		}
		if tick%10 == 0 {
			plan = append(plan, struct {
				kind *jobs.Kind[demoJob]
				n    int
				opts []jobs.EnqueueOption
			}{k.slow, 1, nil})
		}
		for _, p := range plan {
			if p.n == 0 {
				continue
			}
			// Enqueue even if ctx ends now: a batch is all or nothing.
			res, err := p.kind.EnqueueMany(context.WithoutCancel(ctx), pool, batch(p.n), p.opts...)
			if err != nil {
				return err
			}
			enqueued.Add(int64(res.Inserted))
		}
	}
}

func demoProgress(ctx context.Context, pool *pgxpool.Pool, elapsed time.Duration, doneSinceLast int64, regs []*prometheus.Registry) (string, error) {
	stats, err := hopper.NewClient(pool).GetStats(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%5.0fs  %6d jobs/s  depth %6d  claim lag %6s  retries %6d  dead %5d",
		elapsed.Seconds(), doneSinceLast, stats.Total.Live(), stats.Total.OldestReady.Round(time.Millisecond),
		bench.CounterSum(`hopper_job_outcomes_total{outcome="failed"}`, regs...), stats.Total.Dead), nil
}

// demoSummary accounts for every job twice. By the table: each job the
// producer numbered 1..enqueued is still live (pending), dead, or done
// (gone), and a done job must have had a successful handler run; one that
// had none is lost. By the workers' counters: the done count must lie
// between completed and completed + unconfirmed (a result whose reply was
// lost may or may not have committed; the table says which).
func demoSummary(w io.Writer, deadList string, pool *pgxpool.Pool, enqueued, completed, unconfirmed int64, ran *demoLedger) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seen := make([]bool, enqueued+1)
	var pending, dead int64
	for _, q := range []struct {
		sql string
		n   *int64
	}{{demoLiveSeqsSQL, &pending}, {demoDeadSeqsSQL, &dead}} {
		seqs, err := demoSeqs(ctx, pool, q.sql)
		if err != nil {
			return err
		}
		for _, seq := range seqs {
			if seq < 1 || seq > enqueued {
				return fmt.Errorf("the table holds job number %d, the producer enqueued 1 to %d", seq, enqueued)
			}
			if seen[seq] {
				return fmt.Errorf("job number %d is in the table twice", seq)
			}
			seen[seq] = true
			*q.n++
		}
	}
	var lost int64
	for seq := int64(1); seq <= enqueued; seq++ {
		if !seen[seq] && !ran.has(seq) {
			lost++
		}
	}
	done := enqueued - pending - dead
	fmt.Fprintln(w, "summary:")
	line := func(name string, n int64, note string) {
		fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("  %-11s %8d   %s", name, n, note), " "))
	}
	line("enqueued", enqueued, "")
	line("completed", completed, "(the workers' "+bench.CompletedCounter+")")
	line("unconfirmed", unconfirmed, "(the workers' "+bench.UnconfirmedCounter+": results whose reply was lost; the table says which committed)")
	line("dead", dead, "(the demo's deliberate failures: "+doomedKind+" always fails, dead after its 3 attempts; "+deadList+")")
	line("pending", pending, "(scheduled, retrying or given back at shutdown)")
	line("done", done, "(gone from the table: enqueued - dead - pending; must lie between completed and completed + unconfirmed)")
	line("lost", lost, "(gone from the table without a successful run, by the payloads' sequence numbers)")
	if lost != 0 {
		return fmt.Errorf("%d jobs unaccounted for", lost)
	}
	if _, err := bench.CheckOutcomes(enqueued, completed, unconfirmed, pending, dead); err != nil {
		return fmt.Errorf("the workers' counters disagree with the table: %w", err)
	}
	return nil
}

// demoSeqs reads the sequence numbers of the jobs a query selects.
func demoSeqs(ctx context.Context, pool *pgxpool.Pool, query string) ([]int64, error) {
	rows, err := pool.Query(ctx, query)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}
