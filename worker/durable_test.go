package worker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// records counts a job's durable records.
func (b *bundle) records(t *testing.T, id int64) (n int) {
	t.Helper()
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT count(*) FROM hopper_job_steps WHERE job_id = $1`, id).Scan(&n))
	return n
}

func (b *bundle) jobState(t *testing.T, id int64) string {
	t.Helper()
	var s string
	err := b.Pool.QueryRow(b.Ctx, `SELECT state FROM hopper_jobs WHERE id = $1`, id).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) {
		return "gone"
	}
	require.NoError(t, err)
	return s
}

// TestDurableStepsReplayAfterFailure: a run that fails after its steps
// is retried; the retry replays both steps' records instead of running
// them again, and the transactional step's write happened once. The
// records go with the job when it completes.
func TestDurableStepsReplayAfterFailure(t *testing.T) {
	b := setup(t)
	_, err := b.Pool.Exec(b.Ctx, `CREATE TABLE ledger (job_id bigint, step text)`)
	require.NoError(t, err)
	k := kind(t, "durable_replay")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{N: 1})
	require.NoError(t, err)
	var plainRuns, txRuns, runs atomic.Int32
	got := make(chan [2]int, 2)
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			a, err := worker.Step(ctx, j, "plain", func(context.Context) (int, error) {
				return 40 + int(plainRuns.Add(1)), nil
			})
			if err != nil {
				return err
			}
			c, err := worker.StepTx(ctx, j, "tx", func(ctx context.Context, tx pgx.Tx) (int, error) {
				txRuns.Add(1)
				_, err := tx.Exec(ctx, `INSERT INTO ledger VALUES ($1, 'tx')`, j.ID)
				return 7, err
			})
			if err != nil {
				return err
			}
			got <- [2]int{a, c}
			if runs.Add(1) == 1 {
				return errors.New("fail after the steps")
			}
			return nil
		}))
	})
	require.Equal(t, [2]int{41, 7}, <-got)
	require.Equal(t, [2]int{41, 7}, <-got, "the retry returns the recorded results")
	testdb.WaitFor(t, "job completed", func() bool { return b.jobState(t, res.ID) == "gone" })
	require.EqualValues(t, 1, plainRuns.Load())
	require.EqualValues(t, 1, txRuns.Load())
	var ledger int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT count(*) FROM ledger`).Scan(&ledger))
	require.Equal(t, 1, ledger)
	require.Zero(t, b.records(t, res.ID), "the records go with the completed job")
}

// TestDurableStepTxRollsBackWithItsRecord: a transactional step whose
// work fails records nothing and writes nothing.
func TestDurableStepTxRollsBackWithItsRecord(t *testing.T) {
	b := setup(t)
	_, err := b.Pool.Exec(b.Ctx, `CREATE TABLE ledger (job_id bigint)`)
	require.NoError(t, err)
	k := kind(t, "durable_rollback")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{}, jobs.MaxAttempts(2))
	require.NoError(t, err)
	var runs atomic.Int32
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			_, err := worker.StepTx(ctx, j, "write", func(ctx context.Context, tx pgx.Tx) (int, error) {
				if _, err := tx.Exec(ctx, `INSERT INTO ledger VALUES ($1)`, j.ID); err != nil {
					return 0, err
				}
				if runs.Add(1) == 1 {
					return 0, errors.New("boom")
				}
				return 1, nil
			})
			return err
		}))
	})
	testdb.WaitFor(t, "job completed", func() bool { return b.jobState(t, res.ID) == "gone" })
	var ledger int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT count(*) FROM ledger`).Scan(&ledger))
	require.Equal(t, 1, ledger, "the failed step's write rolled back")
}

// TestDurableSleepIsUnchargedAndKept: a sleep gives the job back without
// charging an attempt (MaxAttempts 1 still completes), its wake time is
// recorded, and the job runs again only after it.
func TestDurableSleepIsUnchargedAndKept(t *testing.T) {
	b := setup(t)
	k := kind(t, "durable_sleep")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{}, jobs.MaxAttempts(1))
	require.NoError(t, err)
	var started time.Time
	var mu sync.Mutex
	var runs []time.Time
	const nap = 400 * time.Millisecond
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			mu.Lock()
			if started.IsZero() {
				started = time.Now()
			}
			runs = append(runs, time.Now())
			mu.Unlock()
			if err := worker.Sleep(ctx, j, "nap", nap); err != nil {
				require.ErrorIs(t, err, worker.ErrSuspended)
				return err
			}
			return nil
		}))
	})
	testdb.WaitFor(t, "job completed", func() bool { return b.jobState(t, res.ID) == "gone" })
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, 2, "one run to sleep, one after it")
	require.GreaterOrEqual(t, runs[1].Sub(started), nap, "never woken early")
}

// TestDurableSleepWithoutReturningItStillSuspends: a handler that drops
// Sleep's error is suspended all the same, not acked.
func TestDurableSleepWithoutReturningItStillSuspends(t *testing.T) {
	b := setup(t)
	k := kind(t, "durable_sleep_dropped")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	var runs atomic.Int32
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			runs.Add(1)
			_ = worker.Sleep(ctx, j, "nap", 200*time.Millisecond)
			return nil
		}))
	})
	testdb.WaitFor(t, "job completed", func() bool { return b.jobState(t, res.ID) == "gone" })
	require.EqualValues(t, 2, runs.Load())
}

// TestDurableAwaitEvent: an event emitted after the wait wakes the job at
// once (its deadline is an hour away); one emitted before the wait counts;
// a wait whose timeout passes gets ErrEventTimeout and may go on.
func TestDurableAwaitEvent(t *testing.T) {
	b := setup(t)
	k := kind(t, "durable_event")
	type paid struct {
		Cents int `json:"cents"`
	}
	results := make(chan string, 10)
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			timeout := time.Hour
			if j.Payload.N == 3 {
				timeout = 300 * time.Millisecond
			}
			p, err := worker.AwaitEvent[paid](ctx, j, fmt.Sprintf("paid-%d", j.Payload.N), timeout)
			switch {
			case errors.Is(err, worker.ErrEventTimeout):
				results <- fmt.Sprintf("%d: timed out", j.Payload.N)
				return nil
			case err != nil:
				return err
			}
			results <- fmt.Sprintf("%d: %d", j.Payload.N, p.Cents)
			return nil
		}))
	})
	_, err := b.Pool.Exec(b.Ctx, `SELECT hopper_emit_event('paid-2', '{"cents": 200}')`)
	require.NoError(t, err)
	one, err := k.Enqueue(b.Ctx, b.Pool, Task{N: 1})
	require.NoError(t, err)
	testdb.WaitFor(t, "job 1 waiting", func() bool { return b.jobState(t, one.ID) == "scheduled" })
	_, err = k.Enqueue(b.Ctx, b.Pool, Task{N: 2})
	require.NoError(t, err)
	require.Equal(t, "2: 200", <-results, "an event emitted before the wait counts")
	var woken int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT hopper_emit_event('paid-1', '{"cents": 100}')`).Scan(&woken))
	require.Equal(t, 1, woken)
	require.Equal(t, "1: 100", <-results)
	_, err = k.Enqueue(b.Ctx, b.Pool, Task{N: 3})
	require.NoError(t, err)
	require.Equal(t, "3: timed out", <-results)
}

// TestDurableEmitRacesSuspension: jobs suspend for their events while the
// events are emitted at random moments around the suspension; every job
// receives its event, none waits for its (hour-long) deadline. A wake-up
// lost between a suspension and an emit would hang here. Seeded.
func TestDurableEmitRacesSuspension(t *testing.T) {
	b := setup(t)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	k := kind(t, "durable_race")
	n := testdb.Rounds(60)
	var received atomic.Int32
	start(t, b, worker.Config{Queues: map[string]int{"default": 20}}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			v, err := worker.AwaitEvent[int](ctx, j, fmt.Sprintf("race-%d", j.Payload.N), time.Hour)
			if err != nil {
				return err
			}
			if v != j.Payload.N {
				return worker.Permanent(fmt.Errorf("got %d", v))
			}
			received.Add(1)
			return nil
		}))
	})
	delays := make([]time.Duration, n)
	for i := range delays {
		delays[i] = time.Duration(rng.IntN(40)) * time.Millisecond
	}
	var wg sync.WaitGroup
	for i := range n {
		_, err := k.Enqueue(b.Ctx, b.Pool, Task{N: i})
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(delays[i])
			_, err := b.Pool.Exec(b.Ctx, `SELECT hopper_emit_event($1, to_jsonb($2::int))`, fmt.Sprintf("race-%d", i), i)
			if err != nil {
				t.Errorf("emit %d: %v (seed %d)", i, err, seed)
			}
		}()
	}
	wg.Wait()
	testdb.WaitFor(t, fmt.Sprintf("every job received its event (seed %d)", seed), func() bool { return int(received.Load()) == n })
}

// TestDurableNonDeterminismFailsTheJob: a handler whose calls differ from
// the job's records goes dead with ErrNonDeterministic's message.
func TestDurableNonDeterminismFailsTheJob(t *testing.T) {
	b := setup(t)
	k := kind(t, "durable_changed")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	var runs atomic.Int32
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			name := "first"
			if runs.Add(1) > 1 {
				name = "renamed"
			}
			if _, err := worker.Step(ctx, j, name, func(context.Context) (int, error) { return 1, nil }); err != nil {
				return err
			}
			if runs.Load() == 1 {
				return errors.New("retry me")
			}
			return nil
		}))
	})
	d := waitDead(t, b, res.ID)
	require.Contains(t, d.Reason, "durable calls differ from the job's records")
	require.Contains(t, d.Reason, `step "renamed"`)
	require.Contains(t, d.Reason, "to recover: deploy again the handler that made the records and retry the dead job")
	require.Contains(t, d.Reason, "hopper dead retry ID")
	require.Equal(t, 1, b.records(t, res.ID), "a dead job keeps its records for a retry")
	_, err = b.Pool.Exec(b.Ctx, `DELETE FROM hopper_dead_jobs WHERE id = $1`, res.ID)
	require.NoError(t, err)
	require.Zero(t, b.records(t, res.ID), "a purged job's records go with it")
}

// TestDurableProgress: progress is written, throttled, and readable while
// the job runs; an oversized value is refused.
func TestDurableProgress(t *testing.T) {
	b := setup(t)
	k := kind(t, "durable_progress")
	_, err := k.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	release := make(chan struct{})
	tooLarge := make(chan error, 1)
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			for i := range 5 {
				if err := worker.SetProgress(ctx, j, map[string]int{"done": i}); err != nil {
					return err
				}
			}
			tooLarge <- worker.SetProgress(ctx, j, make([]byte, worker.MaxProgressSize))
			<-release
			return nil
		}))
	})
	require.ErrorIs(t, <-tooLarge, worker.ErrRecordTooLarge)
	testdb.WaitFor(t, "the last value written after the throttle", func() bool {
		var p string
		err := b.Pool.QueryRow(b.Ctx, `SELECT progress::text FROM hopper_job_progress`).Scan(&p)
		return err == nil && p == `{"done": 4}`
	})
	close(release)
	testdb.WaitFor(t, "progress gone with the job", func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT count(*) FROM hopper_job_progress`).Scan(&n))
		return n == 0
	})
}
