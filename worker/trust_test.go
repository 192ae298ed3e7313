package worker_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// outcomes collects what a worker reports for each claim.
type outcomes struct {
	mu  sync.Mutex
	got map[[2]int64][]string
}

func observe(w *worker.Worker) *outcomes {
	o := &outcomes{got: map[[2]int64][]string{}}
	worker.ObserveOutcomes(w, func(id int64, attempt int32, outcome string) {
		o.mu.Lock()
		defer o.mu.Unlock()
		key := [2]int64{id, int64(attempt)}
		o.got[key] = append(o.got[key], outcome)
	})
	return o
}

func (o *outcomes) of(id int64, attempt int32) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.got[[2]int64{id, int64(attempt)}]...)
}

// waitExtensions blocks until the worker's heartbeat has done n more lease
// extensions, or ctx ends.
func waitExtensions(ctx context.Context, w *worker.Worker, n int64) error {
	target := worker.Extensions(w) + n
	for worker.Extensions(w) < target {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// TestExtendLeaseSurvivesHeartbeats: a handler's long ExtendLease is not
// undone by the worker's lease extension, which is much shorter.
func TestExtendLeaseSurvivesHeartbeats(t *testing.T) {
	b := setup(t)
	k := kind(t, "long_step")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	extended := make(chan error, 1)
	beaten := make(chan error, 1)
	// Nobody sweeps: the test is about the lease extension and ExtendLease, and a
	// sweep could take the job before its handler extends the lease.
	start(t, b, worker.Config{LeaseDuration: time.Second, ExtendInterval: 50 * time.Millisecond, ShutdownTimeout: 100 * time.Millisecond,
		SweepInterval: time.Hour}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			extended <- worker.ExtendLease(ctx, j, 2*time.Hour)
			beaten <- waitExtensions(ctx, w, 3)
			<-ctx.Done() // until the test ends
			return nil
		}))
	})
	require.NoError(t, <-extended)
	require.NoError(t, <-beaten)
	require.WithinDuration(t, time.Now().Add(2*time.Hour), *b.job(t, res.ID).LeaseUntil, time.Minute,
		"three lease extensions later the lease is still the handler's two hours")
}

// TestLostClaimLeavesHeartbeat: a claim found lost leaves at once the set
// whose leases the heartbeat extends, not re-sent for the life of the
// process.
func TestLostClaimLeavesHeartbeat(t *testing.T) {
	b := setup(t)
	k := kind(t, "vanishing")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	started := make(chan struct{})
	cause := make(chan error, 1)
	r := start(t, b, worker.Config{ExtendInterval: 50 * time.Millisecond}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, _ *jobs.Job[Task]) error {
			close(started)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil
		}))
	})
	<-started
	require.Equal(t, 1, worker.HeldClaims(r.w))
	_, err = b.Pool.Exec(b.Ctx, "DELETE FROM hopper_jobs WHERE id = $1", res.ID) // cancelled by an operator, say
	require.NoError(t, err)
	require.ErrorIs(t, <-cause, worker.ErrLeaseLost)
	testdb.WaitFor(t, "the lost claim left the extension's set", func() bool { return worker.HeldClaims(r.w) == 0 })
}

// TestAckTxRolledBack: a handler that acks in its transaction, rolls it
// back and returns nil takes the normal path: the worker acks the job
// itself, at once, and counts it done once — no lease expiry, no rerun.
func TestAckTxRolledBack(t *testing.T) {
	b := setup(t)
	k := kind(t, "rolled_back")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	runs := make(chan int, 10)
	reg := prometheus.NewRegistry()
	var seen *outcomes
	start(t, b, worker.Config{Registerer: reg}, func(w *worker.Worker) {
		seen = observe(w)
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			runs <- j.Attempt
			tx, err := b.Pool.Begin(ctx)
			if err != nil {
				return err
			}
			if err := worker.AckTx(ctx, tx, j); err != nil {
				return err
			}
			return tx.Rollback(ctx)
		}))
	})
	// The worker reports once it has read the ack's reply, a moment after
	// the database shows the row gone: wait for both.
	testdb.WaitFor(t, "job acked by the worker", func() bool {
		live, _ := b.Totals(t)
		return live == 0 && len(seen.of(res.ID, 1)) > 0
	})
	require.Equal(t, []string{string(worker.OutcomeDone)}, seen.of(res.ID, 1))
	require.Equal(t, 1.0, metricValue(t, reg, `hopper_job_outcomes_total{outcome="done"}`))
	require.Equal(t, 1, <-runs)
	require.Empty(t, runs, "ran once")
	_, dead := b.Totals(t)
	require.Zero(t, dead)
}

// TestAckTxRefusesOtherIsolation: AckTx of a sequence's head from a
// handler's REPEATABLE READ or SERIALIZABLE transaction is refused with
// ErrIsolation (it would pass the turn with a stale snapshot and strand
// the key's next job); the handler then returns nil, the worker acks the
// job itself, and the next job of the key runs.
func TestAckTxRefusesOtherIsolation(t *testing.T) {
	b := setup(t)
	k := kind(t, "isolated")
	var ids []int64
	for range 3 {
		res, err := k.Enqueue(b.Ctx, b.Pool, Task{}, jobs.Sequence("k"))
		require.NoError(t, err)
		ids = append(ids, res.ID)
	}
	levels := []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable, pgx.ReadCommitted}
	refused := make(chan error, len(ids))
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			level := levels[slices.Index(ids, j.ID)]
			tx, err := b.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(ctx) }()
			err = worker.AckTx(ctx, tx, j)
			if level == pgx.ReadCommitted {
				if err != nil {
					return err
				}
				return tx.Commit(ctx)
			}
			refused <- err
			return nil
		}))
	})
	testdb.WaitFor(t, "every job of the key ran", func() bool {
		live, _ := b.Totals(t)
		return live == 0
	})
	for range 2 {
		err := <-refused
		require.ErrorIs(t, err, worker.ErrIsolation)
		require.ErrorIs(t, err, jobs.ErrIsolation)
		require.ErrorContains(t, err, "read committed required")
	}
	_, dead := b.Totals(t)
	require.Zero(t, dead)
}

// TestAckTxCommittedThenKeepsWorking: after its AckTx transaction
// committed, a handler that goes on working, even past its lease, is not
// cancelled as lease-lost, and the job counts completed once.
func TestAckTxCommittedThenKeepsWorking(t *testing.T) {
	b := setup(t)
	k := kind(t, "acked_early")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	after := make(chan error, 1)
	reg := prometheus.NewRegistry()
	var seen *outcomes
	start(t, b, worker.Config{Registerer: reg, LeaseDuration: 3 * time.Second, ExtendInterval: 50 * time.Millisecond},
		func(w *worker.Worker) {
			seen = observe(w)
			require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
				tx, err := b.Pool.Begin(ctx)
				if err != nil {
					return err
				}
				defer tx.Rollback(context.Background()) //nolint:errcheck
				if err := worker.AckTx(ctx, tx, j); err != nil {
					return err
				}
				if err := tx.Commit(ctx); err != nil {
					return err
				}
				// Work on for longer than a lease (3s at 50ms a beat): the
				// lease extension finds the row gone, which must neither cancel
				// the handler nor leave the outcome in doubt.
				err = waitExtensions(ctx, w, 80)
				if err == nil {
					err = worker.ExtendLease(ctx, j, time.Minute) // nothing left to keep: no error
				}
				after <- err
				return err
			}))
		})
	require.NoError(t, <-after, "not cancelled after its own committed ack")
	testdb.WaitFor(t, "outcome reported", func() bool { return len(seen.of(res.ID, 1)) == 1 })
	require.Equal(t, []string{string(worker.OutcomeDone)}, seen.of(res.ID, 1))
	require.Zero(t, metricValue(t, reg, "hopper_leases_lost_total"))
	require.Equal(t, 1.0, metricValue(t, reg, `hopper_job_outcomes_total{outcome="done"}`))
}

// TestStuckHandlerIsAbandoned: a handler that ignores its cancelled context
// past its timeout plus AbandonAfter no longer has its lease extended, so its job
// runs again after the lease; its slot goes back to the queue (the only
// slot here, so other jobs run meanwhile), and it is counted as stuck
// until it returns.
func TestStuckHandlerIsAbandoned(t *testing.T) {
	b := setup(t)
	stuck, quick := kind(t, "stuck"), kind(t, "quick")
	res, err := stuck.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	unstick := make(chan struct{})
	started := make(chan struct{})
	quickRuns := make(chan int64, 10)
	reg := prometheus.NewRegistry()
	var seen *outcomes
	start(t, b, worker.Config{
		Queues: map[string]int{"default": 1}, LeaseDuration: time.Second, ExtendInterval: 50 * time.Millisecond,
		AbandonAfter: 100 * time.Millisecond, Registerer: reg,
	}, func(w *worker.Worker) {
		seen = observe(w)
		require.NoError(t, worker.Handle(w, stuck, func(ctx context.Context, j *jobs.Job[Task]) error {
			if j.Attempt == 1 {
				close(started)
				<-unstick // ignores ctx
			}
			return nil
		}, worker.Timeout(100*time.Millisecond)))
		require.NoError(t, worker.Handle(w, quick, func(ctx context.Context, j *jobs.Job[Task]) error {
			quickRuns <- j.ID
			return nil
		}))
	})
	<-started
	_, err = quick.EnqueueMany(b.Ctx, b.Pool, jobs.Items(Task{}, Task{}, Task{}))
	require.NoError(t, err)
	// The attempt that finished the stuck job: the second, unless a loaded
	// machine let a lease of 1s lapse once more (at least once delivery).
	finishedBy := func() int32 {
		for a := int32(2); a <= 5; a++ {
			if slices.Equal(seen.of(res.ID, a), []string{string(worker.OutcomeDone)}) {
				return a
			}
		}
		return 0
	}
	testdb.WaitFor(t, "the stuck job ran again, and the quick ones ran in the freed slot", func() bool {
		live, _ := b.Totals(t)
		return live == 0 && finishedBy() > 0 // reported, not only gone
	})
	ran := map[int64]bool{}
	for len(quickRuns) > 0 {
		ran[<-quickRuns] = true
	}
	require.Len(t, ran, 3, "every quick job ran in the freed slot")
	require.Empty(t, seen.of(res.ID, 1), "the abandoned attempt reports nothing")
	require.Equal(t, 1.0, metricValue(t, reg, `hopper_job_outcomes_total{outcome="abandoned"}`))
	require.Equal(t, 1.0, metricValue(t, reg, "hopper_handlers_stuck"))
	close(unstick)
	testdb.WaitFor(t, "the stuck handler returned", func() bool { return metricValue(t, reg, "hopper_handlers_stuck") == 0 })
}

// TestTimeoutPrecedence: a run's timeout comes from the job (TimeoutBy),
// else its kind (Timeout), else the worker (Config.Timeout, default one
// minute); negative means none at that level.
func TestTimeoutPrecedence(t *testing.T) {
	const none = time.Duration(-1)
	for _, tc := range []struct {
		name          string
		worker, kind  time.Duration
		job           time.Duration // returned by a TimeoutBy func; 0: no func
		useJobTimeout bool
		want          time.Duration // none: no deadline
	}{
		{name: "worker default", want: time.Minute},
		{name: "worker set", worker: 3 * time.Minute, want: 3 * time.Minute},
		{name: "worker off", worker: none, want: none},
		{name: "kind over worker", worker: 3 * time.Minute, kind: 5 * time.Minute, want: 5 * time.Minute},
		{name: "kind off", kind: none, want: none},
		{name: "job over kind", kind: 5 * time.Minute, job: 2 * time.Minute, useJobTimeout: true, want: 2 * time.Minute},
		{name: "job zero keeps kind", kind: 5 * time.Minute, job: 0, useJobTimeout: true, want: 5 * time.Minute},
		{name: "job off", kind: 5 * time.Minute, job: none, useJobTimeout: true, want: none},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			k := kind(t, "timed")
			_, err := k.Enqueue(b.Ctx, b.Pool, Task{})
			require.NoError(t, err)
			left := make(chan time.Duration, 1)
			start(t, b, worker.Config{Timeout: tc.worker}, func(w *worker.Worker) {
				var opts []worker.HandleOption
				if tc.kind != 0 {
					opts = append(opts, worker.Timeout(tc.kind))
				}
				if tc.useJobTimeout {
					opts = append(opts, worker.TimeoutBy(func(*jobs.Job[Task]) time.Duration { return tc.job }))
				}
				require.NoError(t, worker.Handle(w, k, func(ctx context.Context, _ *jobs.Job[Task]) error {
					deadline, ok := ctx.Deadline()
					if !ok {
						left <- none
					} else {
						left <- time.Until(deadline)
					}
					return nil
				}, opts...))
			})
			got := <-left
			if tc.want == none {
				require.Equal(t, none, got, "no deadline")
				return
			}
			// The deadline was set when the run began, moments before.
			require.LessOrEqual(t, got, tc.want)
			require.Greater(t, got, tc.want-30*time.Second)
		})
	}
}

// TestShutdownWaitsForFinishingHandlers: a handler still running when
// shutdown begins, and finishing within ShutdownTimeout, is waited for and
// its result recorded — Run does not return before it, and the job is not
// given back.
func TestShutdownWaitsForFinishingHandlers(t *testing.T) {
	b := setup(t)
	k := kind(t, "finishing")
	_, err := k.EnqueueMany(b.Ctx, b.Pool, jobs.Items(Task{}, Task{}))
	require.NoError(t, err)
	w, err := worker.New(b.Pool, fast(worker.Config{ShutdownTimeout: time.Minute}))
	require.NoError(t, err)
	seen := observe(w)
	inHandler := make(chan int64, 2)
	release := make(chan struct{})
	var cancelled sync.Map
	require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
		inHandler <- j.ID
		<-release
		if ctx.Err() != nil {
			cancelled.Store(j.ID, true)
		}
		return nil
	}))
	ctx, cancel := context.WithCancel(b.Ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	ids := []int64{<-inHandler, <-inHandler}
	cancel() // shutdown begins while both handlers run
	select {
	case err := <-errc:
		t.Fatalf("Run returned (%v) before its running handlers finished", err)
	default:
	}
	close(release)
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("Run did not return")
	}
	live, dead := b.Totals(t)
	require.Zero(t, live, "recorded, not given back")
	require.Zero(t, dead)
	for _, id := range ids {
		require.Equal(t, []string{string(worker.OutcomeDone)}, seen.of(id, 1))
		_, wasCancelled := cancelled.Load(id)
		require.False(t, wasCancelled, "a handler within the deadline is not cancelled")
	}
}
