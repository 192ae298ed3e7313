package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// Durable handlers under worker crashes: three worker processes run jobs
// of up to ten durable calls (steps, transactional steps, sleeps, event
// waits) while one of them is SIGKILLed every ~2s and restarted. Steps
// fail and retry; events are emitted before their jobs reach them, while
// they wait, and at random moments (racing their waits); some events are
// awaited by several jobs, and some are never emitted (their waits time
// out). The verdict comes from tables the handlers write: each run of a
// step's function (dchaos_step_runs, committed at once), each
// transactional step's effect (dchaos_ledger, in the step's own
// transaction), and each time a run enters and passes a sleep or a wait
// (dchaos_marks), all stamped by the database's clock; and from each
// job's result, the values its calls returned, kept in the history.

const durableChaosEnv = "HOPPER_DCHAOS_WORKER_URL"

// DurableChaosCall is one durable call of a job's handler.
type DurableChaosCall struct {
	// Kind: step, tx (worker.StepTx), sleep or event.
	Kind string `json:"kind"`
	// WorkMs: how long a step's function works (kills land in it).
	WorkMs int `json:"work_ms,omitempty"`
	// Fails: a step's function fails its first Fails runs.
	Fails int `json:"fails,omitempty"`
	// Ms: a sleep's length, or an event wait's timeout.
	Ms int `json:"ms,omitempty"`
	// Event: the name of the event a wait awaits.
	Event string `json:"event,omitempty"`
}

// DurableChaosJob is a job of the durable chaos test: its calls, in
// order.
type DurableChaosJob struct {
	Idx   int                `json:"idx"`
	Calls []DurableChaosCall `json:"calls"`
}

var durableChaosKind = jobs.MustDefine[DurableChaosJob]("dchaos.job")

// The emit plans of an event.
const (
	emitBefore = "before" // before the workers start: a wait finds it emitted
	emitWait   = "wait"   // once a job is seen waiting for it
	emitRandom = "random" // at a random moment: before, during or after the waits
	emitNever  = "never"  // never: its waits time out
)

// durableEvent is an event of the plan.
type durableEvent struct {
	name, emit string
	at         time.Duration // emitRandom: after the workers start
	emitted    bool
}

// timedOut is the value a wait whose event never came returns.
const timedOut = "timeout"

// eventValue is the payload an event carries, and what its waits return.
func eventValue(name string) string { return "payload of " + name }

func runDurableChaosWorker() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv(durableChaosEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer pool.Close()
	log := quietLog
	if os.Getenv("HOPPER_DCHAOS_VERBOSE") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("proc", os.Getenv("HOPPER_DCHAOS_ID"))
	}
	w, err := worker.New(pool, worker.Config{
		ID:     os.Getenv("HOPPER_DCHAOS_ID"),
		Queues: map[string]int{jobs.DefaultQueue: 16},
		// The lease outlasts the stale window of three 1s beats: a killed
		// worker's jobs come back through the registry.
		LeaseDuration:   10 * time.Second,
		PollInterval:    100 * time.Millisecond,
		SweepInterval:   200 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second,
		RetryBackoff:    worker.Backoff{Base: 10 * time.Millisecond, Max: 100 * time.Millisecond},
		Logger:          log,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	err = worker.HandleWithResult(w, durableChaosKind, func(ctx context.Context, job *jobs.Job[DurableChaosJob]) ([]string, error) {
		return durableChaosHandle(ctx, pool, job)
	}, worker.KeepHistory(time.Hour))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	if err := w.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	return 0
}

// durableChaosHandle makes the job's calls in order and returns the value
// of each. A step's value is new at each run of its function, so that the
// verdict can tell which run's value the job kept; a transactional step
// writes the values it saw before it, so that the verdict can tell that
// every run replayed the same ones.
func durableChaosHandle(ctx context.Context, pool *pgxpool.Pool, job *jobs.Job[DurableChaosJob]) ([]string, error) {
	var values []string
	mark := func(pos int, what string) error {
		_, err := pool.Exec(ctx, "INSERT INTO dchaos_marks (job_id, pos, what) VALUES ($1, $2, $3)", job.ID, pos, what)
		return err
	}
	for pos, c := range job.Payload.Calls {
		name := fmt.Sprintf("%s-%d", c.Kind, pos)
		var v string
		var err error
		switch c.Kind {
		case "step":
			v, err = worker.Step(ctx, job, name, func(ctx context.Context) (string, error) {
				select {
				case <-time.After(time.Duration(c.WorkMs) * time.Millisecond):
				case <-ctx.Done():
					return "", context.Cause(ctx)
				}
				var failed int
				if err := pool.QueryRow(ctx, "SELECT count(*) FROM dchaos_step_runs WHERE job_id = $1 AND pos = $2 AND failed",
					job.ID, pos).Scan(&failed); err != nil {
					return "", err
				}
				value := fmt.Sprintf("step %d.%d #%x", job.Payload.Idx, pos, rand.Uint32())
				if _, err := pool.Exec(ctx, "INSERT INTO dchaos_step_runs (job_id, pos, value, failed) VALUES ($1, $2, $3, $4)",
					job.ID, pos, value, failed < c.Fails); err != nil {
					return "", err
				}
				if failed < c.Fails {
					return "", fmt.Errorf("planned failure %d of %d", failed+1, c.Fails)
				}
				return value, nil
			})
		case "tx":
			seen := strings.Join(values, "|")
			v, err = worker.StepTx(ctx, job, name, func(ctx context.Context, tx pgx.Tx) (string, error) {
				value := fmt.Sprintf("tx %d.%d #%x", job.Payload.Idx, pos, rand.Uint32())
				_, err := tx.Exec(ctx, "INSERT INTO dchaos_ledger (job_id, pos, value, seen) VALUES ($1, $2, $3, $4)", job.ID, pos, value, seen)
				return value, err
			})
		case "sleep":
			if err := mark(pos, "enter"); err != nil {
				return nil, err
			}
			if err = worker.Sleep(ctx, job, name, time.Duration(c.Ms)*time.Millisecond); err == nil {
				v, err = "slept", mark(pos, "pass")
			}
		case "event":
			if err := mark(pos, "enter"); err != nil {
				return nil, err
			}
			var got string
			got, err = worker.AwaitEvent[string](ctx, job, c.Event, time.Duration(c.Ms)*time.Millisecond)
			if errors.Is(err, worker.ErrEventTimeout) {
				got, err = timedOut, nil
			}
			if err == nil {
				v, err = got, mark(pos, "pass")
			}
		}
		if err != nil {
			return nil, err
		}
		values = append(values, v)
		if err := worker.SetProgress(ctx, job, map[string]int{"done": pos + 1, "of": len(job.Payload.Calls)}); err != nil {
			return nil, err
		}
	}
	return values, nil
}

// planDurable draws n jobs of 3 to 10 calls and the events they await.
func planDurable(rng *rand.Rand, n int) ([]DurableChaosJob, []*durableEvent) {
	var events []*durableEvent
	newEvent := func() *durableEvent {
		e := &durableEvent{name: fmt.Sprintf("dchaos-event-%d", len(events))}
		switch r := rng.IntN(10); {
		case r < 2:
			e.emit = emitBefore
		case r < 5:
			e.emit = emitWait
		case r < 8:
			e.emit, e.at = emitRandom, time.Duration(rng.IntN(15_000))*time.Millisecond
		default:
			e.emit = emitNever
		}
		events = append(events, e)
		return e
	}
	var shared []*durableEvent // awaited by several jobs
	for range max(n/10, 1) {
		shared = append(shared, newEvent())
	}
	plans := make([]DurableChaosJob, n)
	for i := range plans {
		plans[i].Idx = i
		awaited := map[string]bool{}
		for range 3 + rng.IntN(8) {
			c := DurableChaosCall{}
			switch r := rng.IntN(10); {
			case r < 4:
				c.Kind, c.WorkMs = "step", 20+rng.IntN(200)
				if rng.IntN(5) == 0 {
					c.Fails = 1 + rng.IntN(2)
				}
			case r < 6:
				c.Kind = "tx"
			case r < 8:
				c.Kind, c.Ms = "sleep", 200+rng.IntN(1800)
			default:
				e := newEvent()
				if rng.IntN(3) == 0 {
					e = shared[rng.IntN(len(shared))]
				}
				if awaited[e.name] { // one wait per event and job: a second would find it at once
					e = newEvent()
				}
				awaited[e.name] = true
				c.Kind, c.Event, c.Ms = "event", e.name, 10*60_000
				if e.emit == emitNever {
					c.Ms = 300 + rng.IntN(1200)
				}
			}
			plans[i].Calls = append(plans[i].Calls, c)
		}
	}
	// A never-emitted event that a job awaits with the long timeout would
	// hold the test: every wait for it takes a short one.
	never := map[string]bool{}
	for _, e := range events {
		never[e.name] = e.emit == emitNever
	}
	for i := range plans {
		for j, c := range plans[i].Calls {
			if c.Kind == "event" && never[c.Event] && c.Ms > 2000 {
				plans[i].Calls[j].Ms = 300 + rng.IntN(1200)
			}
		}
	}
	return plans, events
}

// TestDurableChaos: durable handlers under SIGKILLs, failing steps, and
// events emitted before, during and after their waits. Per job: completed
// once, with the values its calls returned; each transactional step's
// effect exactly once, having seen the values the job kept; each step's
// value one its function returned; each event's payload received by every
// job that awaited it, and a timeout only where it was never emitted; no
// sleep or timeout shorter than asked; the records gone with the job.
func TestDurableChaos(t *testing.T) {
	testdb.Slow(t, "durable handlers across killed worker processes")
	n, limit := 40, 6*time.Minute
	if chaosFull() {
		n, limit = 300, 20*time.Minute
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("HOPPER_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "HOPPER_SEED")
	}
	t.Logf("seed %d: repeat with HOPPER_SEED=%d go test -count=1 -run TestDurableChaos -v ./tests/chaos", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0xd0a))
	plans, events := planDurable(rng, n)

	b := newProcessBed(t, limit,
		"CREATE TABLE dchaos_step_runs (job_id bigint NOT NULL, pos int NOT NULL, value text NOT NULL, failed boolean NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())",
		"CREATE TABLE dchaos_ledger (job_id bigint NOT NULL, pos int NOT NULL, value text NOT NULL, seen text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())",
		"CREATE TABLE dchaos_marks (job_id bigint NOT NULL, pos int NOT NULL, what text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())")
	client := hopper.NewClient(b.db.Pool)
	url := b.db.URL
	if strings.Contains(url, "://") {
		url += "&pool_max_conns=24&application_name=" + b.db.Schema
	} else {
		url += " pool_max_conns=24 application_name=" + b.db.Schema
	}
	ended := func() int64 {
		return b.count("SELECT (SELECT count(*) FROM hopper_job_history WHERE kind = $1) + (SELECT count(*) FROM hopper_dead_jobs WHERE kind = $1)", durableChaosKind.Name())
	}
	b.explain = func() string {
		return fmt.Sprintf("ended %d of %d, live %d, waiting records %d", ended(), n,
			b.count("SELECT count(*) FROM hopper_jobs"), b.count("SELECT count(*) FROM hopper_job_steps WHERE state = 'waiting'"))
	}

	ids := make([]int64, n)
	for i, p := range plans {
		// Every kill may charge an attempt: only planned failures fail.
		res, err := durableChaosKind.Enqueue(b.ctx, b.db.Pool, p, jobs.MaxAttempts(1000))
		require.NoError(t, err)
		ids[i] = res.ID
	}
	emit := func(e *durableEvent) {
		_, err := client.EmitEvent(b.ctx, e.name, eventValue(e.name))
		require.NoError(t, err)
		e.emitted = true
	}
	for _, e := range events {
		if e.emit == emitBefore {
			emit(e)
		}
	}
	start := func(id string) {
		b.spawn(id, durableChaosEnv+"="+url, "HOPPER_DCHAOS_ID="+id)
	}
	names := []string{"w1", "w2", "w3"}
	for _, name := range names {
		start(name)
	}
	began := time.Now()
	kills := 0
	nextKill := time.Now().Add(time.Duration(1500+rng.IntN(1000)) * time.Millisecond)
	b.waitWithin("every job ran to its end", limit-time.Minute, func() bool {
		waiting := map[string]bool{}
		rows, err := b.db.Pool.Query(b.ctx, "SELECT DISTINCT name FROM hopper_job_steps WHERE kind = 'event' AND state = 'waiting'")
		require.NoError(t, err)
		awaited, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		for _, name := range awaited {
			waiting[name] = true
		}
		for _, e := range events {
			if !e.emitted && (e.emit == emitWait && waiting[e.name] || e.emit == emitRandom && time.Since(began) >= e.at) {
				emit(e)
			}
		}
		if ended() == int64(n) {
			return true
		}
		if time.Now().After(nextKill) {
			id := names[rng.IntN(len(names))]
			b.stop(id, syscall.SIGKILL)
			start(id)
			kills++
			nextKill = time.Now().Add(time.Duration(1500+rng.IntN(1000)) * time.Millisecond)
		}
		return false
	})
	took := time.Since(began)
	for _, name := range names {
		cmd := b.workers[name]
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		_ = cmd.Wait() // a worker still waiting out its killed predecessor's ID exits with an error
		delete(b.workers, name)
	}

	// Completed once each, none dead.
	require.Zero(t, b.count("SELECT count(*) FROM hopper_dead_jobs WHERE kind = $1", durableChaosKind.Name()), "no job died")
	results := map[int64][]string{}
	rows, err := b.db.Pool.Query(b.ctx, "SELECT id, result FROM hopper_job_history WHERE kind = $1", durableChaosKind.Name())
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		var raw json.RawMessage
		require.NoError(t, rows.Scan(&id, &raw))
		var values []string
		require.NoError(t, json.Unmarshal(raw, &values), "job %d: result %s", id, raw)
		_, twice := results[id]
		require.False(t, twice, "job %d completed twice", id)
		results[id] = values
	}
	require.NoError(t, rows.Err())
	require.Len(t, results, n)

	stepRuns := map[[2]int64]map[string]bool{}
	rows, err = b.db.Pool.Query(b.ctx, "SELECT job_id, pos, value FROM dchaos_step_runs WHERE NOT failed")
	require.NoError(t, err)
	for rows.Next() {
		var id, pos int64
		var v string
		require.NoError(t, rows.Scan(&id, &pos, &v))
		k := [2]int64{id, pos}
		if stepRuns[k] == nil {
			stepRuns[k] = map[string]bool{}
		}
		stepRuns[k][v] = true
	}
	require.NoError(t, rows.Err())
	type effect struct{ value, seen string }
	ledger := map[[2]int64][]effect{}
	rows, err = b.db.Pool.Query(b.ctx, "SELECT job_id, pos, value, seen FROM dchaos_ledger")
	require.NoError(t, err)
	for rows.Next() {
		var id, pos int64
		var e effect
		require.NoError(t, rows.Scan(&id, &pos, &e.value, &e.seen))
		ledger[[2]int64{id, pos}] = append(ledger[[2]int64{id, pos}], e)
	}
	require.NoError(t, rows.Err())
	// How long after its first entry each sleep or wait was first passed.
	waited := map[[2]int64]time.Duration{}
	rows, err = b.db.Pool.Query(b.ctx, `SELECT job_id, pos, max(at) FILTER (WHERE what = 'pass') - min(at) FILTER (WHERE what = 'enter')
		FROM (SELECT job_id, pos, what, min(at) AS at FROM dchaos_marks GROUP BY job_id, pos, what) AS m GROUP BY job_id, pos`)
	require.NoError(t, err)
	for rows.Next() {
		var id, pos int64
		var d *time.Duration
		require.NoError(t, rows.Scan(&id, &pos, &d))
		if d != nil {
			waited[[2]int64{id, pos}] = *d
		}
	}
	require.NoError(t, rows.Err())

	emitted := map[string]bool{}
	for _, e := range events {
		emitted[e.name] = e.emitted
	}
	stats := map[string]int{}
	for i, p := range plans {
		id := ids[i]
		values := results[id]
		require.Len(t, values, len(p.Calls), "job %d (plan %d): a value per call", id, i)
		for pos, c := range p.Calls {
			k := [2]int64{id, int64(pos)}
			where := fmt.Sprintf("job %d (plan %d), call %d (%s)", id, i, pos, c.Kind)
			stats[c.Kind]++
			switch c.Kind {
			case "step":
				require.True(t, stepRuns[k][values[pos]], "%s: kept %q, which no run of its function returned (%v)", where, values[pos], stepRuns[k])
			case "tx":
				require.Len(t, ledger[k], 1, "%s: its effect exactly once", where)
				require.Equal(t, values[pos], ledger[k][0].value, "%s: the value kept is the effect's", where)
				require.Equal(t, strings.Join(values[:pos], "|"), ledger[k][0].seen, "%s: the run that made the effect saw the values the job kept", where)
			case "sleep":
				require.Equal(t, "slept", values[pos], where)
				require.GreaterOrEqual(t, waited[k], time.Duration(c.Ms)*time.Millisecond-time.Millisecond, "%s: slept less than %dms", where, c.Ms)
			case "event":
				if emitted[c.Event] {
					require.Equal(t, eventValue(c.Event), values[pos], "%s: event %s was emitted: its payload, not a timeout", where, c.Event)
					stats["event received"]++
					continue
				}
				require.Equal(t, timedOut, values[pos], where)
				require.GreaterOrEqual(t, waited[k], time.Duration(c.Ms)*time.Millisecond-time.Millisecond, "%s: timed out before %dms", where, c.Ms)
				stats["event timed out"]++
			}
		}
	}
	require.Zero(t, b.count("SELECT count(*) FROM hopper_job_steps"), "the records went with their jobs")
	require.Zero(t, b.count("SELECT count(*) FROM hopper_job_progress"), "and their progress")
	fails := b.count("SELECT count(*) FROM dchaos_step_runs WHERE failed")
	reruns := b.count("SELECT count(*) - count(DISTINCT (job_id, pos)) FROM dchaos_step_runs WHERE NOT failed")
	require.Positive(t, kills, "the workers were killed")
	t.Logf("%d jobs in %v under %d kills: calls %v; %d planned step failures; %d steps whose function ran again after a kill",
		n, took.Round(time.Second), kills, stats, fails, reruns)
}
