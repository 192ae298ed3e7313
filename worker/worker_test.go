package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// TestEndToEnd: 50,000 jobs across 3 queues and 3 kinds, 2 workers; every
// job is handled and the table is empty at the end.
func TestEndToEnd(t *testing.T) {
	testdb.Slow(t, "a whole run under load")
	b := setup(t)
	const perKindQueue = 50_000 / 9
	kinds := []*jobs.Kind[Task]{kind(t, "e2e.a"), kind(t, "e2e.b"), kind(t, "e2e.c")}
	queues := []string{"q1", "q2", "q3"}
	total := 0
	for _, k := range kinds {
		for _, q := range queues {
			payloads := make([]Task, perKindQueue)
			for i := range payloads {
				payloads[i] = Task{N: i}
			}
			res, err := k.EnqueueMany(b.Ctx, b.Pool, jobs.Items(payloads...), jobs.Queue(q))
			require.NoError(t, err)
			total += res.Inserted
		}
	}

	var handled sync.Map
	var count atomic.Int64
	register := func(w *worker.Worker) {
		for _, k := range kinds {
			require.NoError(t, worker.Handle(w, k, func(ctx context.Context, job *jobs.Job[Task]) error {
				if _, dup := handled.LoadOrStore(job.ID, true); dup {
					t.Errorf("job %d handled twice", job.ID)
				}
				count.Add(1)
				return nil
			}))
		}
	}
	cfg := worker.Config{Queues: map[string]int{"q1": 20, "q2": 10, "q3": 5}}
	start(t, b, cfg, register)
	start(t, b, cfg, register)
	testdb.WaitDrained(t, "every job handled and acked", func() int64 {
		live, _ := b.Totals(t)
		return live
	})
	require.EqualValues(t, total, count.Load())
	_, dead := b.Totals(t)
	require.Zero(t, dead)
}

// TestFailureOutcomes: each way a handler can fail leaves the right state
// and history entry.
func TestFailureOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name        string
		maxAttempts int
		handler     func(ctx context.Context, job *jobs.Job[Task]) error
		opts        []worker.HandleOption
		// check inspects the job after its first attempt was recorded.
		wantDead   string // dead reason, or "" when the job is retried
		wantError  string // in the history entry
		wantRunAt  time.Duration
		delayCheck bool
	}{
		{name: "error retries with backoff", maxAttempts: 3,
			handler:   func(context.Context, *jobs.Job[Task]) error { return errBoom },
			opts:      []worker.HandleOption{worker.RetryBackoff(worker.Backoff{Base: time.Hour, Max: time.Hour})},
			wantError: "boom", wantRunAt: time.Hour, delayCheck: true},
		{name: "panic is a failure with its stack", maxAttempts: 3,
			handler:   func(context.Context, *jobs.Job[Task]) error { panic("kaboom") },
			opts:      []worker.HandleOption{worker.RetryBackoff(worker.Backoff{Base: time.Hour, Max: time.Hour})},
			wantError: "panic: kaboom\ngoroutine"},
		{name: "timeout cancels the handler", maxAttempts: 3,
			handler: func(ctx context.Context, _ *jobs.Job[Task]) error {
				<-ctx.Done()
				return ctx.Err()
			},
			opts:      []worker.HandleOption{worker.Timeout(50 * time.Millisecond), worker.RetryBackoff(worker.Backoff{Base: time.Hour, Max: time.Hour})},
			wantError: "timed out after 50ms: context deadline exceeded"},
		{name: "per-job timeout", maxAttempts: 3,
			handler: func(ctx context.Context, _ *jobs.Job[Task]) error {
				<-ctx.Done()
				return ctx.Err()
			},
			opts: []worker.HandleOption{
				worker.Timeout(time.Hour),
				worker.TimeoutBy(func(j *jobs.Job[Task]) time.Duration { return time.Duration(j.Payload.N) * time.Millisecond }),
				worker.RetryBackoff(worker.Backoff{Base: time.Hour, Max: time.Hour}),
			},
			wantError: "timed out after 30ms"},
		{name: "retry at a chosen time", maxAttempts: 3,
			handler: func(context.Context, *jobs.Job[Task]) error {
				return worker.RetryAfter(2*time.Hour, errors.New("rate limited"))
			},
			wantError: "rate limited", wantRunAt: 2 * time.Hour, delayCheck: true},
		{name: "permanent failure skips retries", maxAttempts: 25,
			handler: func(context.Context, *jobs.Job[Task]) error {
				return worker.Permanent(errors.New("account closed"))
			},
			wantDead: "permanent failure: account closed", wantError: "account closed"},
		{name: "out of attempts", maxAttempts: 1,
			handler:  func(context.Context, *jobs.Job[Task]) error { return errBoom },
			wantDead: "out of attempts", wantError: "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			k := kind(t, "outcome")
			res, err := k.Enqueue(b.Ctx, b.Pool, Task{N: 30}, jobs.MaxAttempts(tc.maxAttempts))
			require.NoError(t, err)
			before := time.Now()
			start(t, b, worker.Config{}, func(w *worker.Worker) { require.NoError(t, worker.Handle(w, k, tc.handler, tc.opts...)) })

			var h []jobs.AttemptError
			if tc.wantDead != "" {
				var d db.HopperDeadJob
				testdb.WaitFor(t, "job dead", func() (ok bool) { d, ok = b.dead(t, res.ID); return ok })
				require.Equal(t, tc.wantDead, d.Reason)
				require.Equal(t, int32(1), d.Attempt)
				h = history(t, d.Errors)
			} else {
				var j db.HopperJob
				testdb.WaitFor(t, "failure recorded", func() bool { j = b.job(t, res.ID); return j.State == "scheduled" && j.Attempt == 1 })
				h = history(t, j.Errors)
				if tc.delayCheck {
					require.WithinDuration(t, before.Add(tc.wantRunAt), j.RunAt, time.Minute)
				}
			}
			require.Len(t, h, 1)
			require.Equal(t, 1, h[0].Attempt)
			require.Contains(t, h[0].Error, tc.wantError)
			require.NotEmpty(t, h[0].Owner)
		})
	}
}

// TestUndecodablePayloadIsDeadAtOnce: a payload the kind cannot decode (or
// upgrade) goes to the dead table with the reason, without retries, and
// the handler never sees it; good jobs around it are unaffected.
func TestUndecodablePayloadIsDeadAtOnce(t *testing.T) {
	b := setup(t)
	k := kind(t, "decode", jobs.Version(2), jobs.Upgrade(1, func(raw json.RawMessage) (json.RawMessage, error) {
		return nil, errors.New("v1 had no id")
	}))
	bad, err := b.Queries.Enqueue(b.Ctx, db.EnqueueParams{Queue: "default", Kind: "decode", Version: 2,
		Payload: json.RawMessage(`{"n":"not a number"}`), RunAt: time.Unix(0, 0), MaxAttempts: 25})
	require.NoError(t, err)
	oldBad, err := b.Queries.Enqueue(b.Ctx, db.EnqueueParams{Queue: "default", Kind: "decode", Version: 1,
		Payload: json.RawMessage(`{}`), RunAt: time.Unix(0, 0), MaxAttempts: 25})
	require.NoError(t, err)
	good, err := k.Enqueue(b.Ctx, b.Pool, Task{N: 1})
	require.NoError(t, err)

	var seen atomic.Int64
	var seenID atomic.Int64
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(_ context.Context, j *jobs.Job[Task]) error {
			seen.Add(1)
			seenID.Store(j.ID)
			return nil
		}))
	})
	for id, reason := range map[int64]string{bad.ID: "cannot unmarshal string", oldBad.ID: "upgrade from version 1 to 2: v1 had no id"} {
		var d db.HopperDeadJob
		testdb.WaitFor(t, "undecodable job dead", func() (ok bool) { d, ok = b.dead(t, id); return ok })
		require.True(t, strings.HasPrefix(d.Reason, "undecodable payload: "), d.Reason)
		require.Contains(t, d.Reason, reason)
		require.Equal(t, int32(1), d.Attempt, "no retries burnt")
	}
	testdb.WaitFor(t, "good job done", func() bool { live, _ := b.Totals(t); return live == 0 })
	require.EqualValues(t, 1, seen.Load())
	require.Equal(t, good.ID, seenID.Load(), "only the decodable job reached the handler")
}

// TestVersionGate: a v3 worker leaves a v4 job for a v4 worker.
func TestVersionGate(t *testing.T) {
	b := setup(t)
	v1 := kind(t, "gated")
	v2 := kind(t, "gated", jobs.Version(2), jobs.Upgrade(1, func(r json.RawMessage) (json.RawMessage, error) { return r, nil }))
	newer, err := v2.Enqueue(b.Ctx, b.Pool, Task{N: 2})
	require.NoError(t, err)
	older, err := v1.Enqueue(b.Ctx, b.Pool, Task{N: 1})
	require.NoError(t, err)

	var oldRan, newRan, oldID atomic.Int64
	old := start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, v1, func(_ context.Context, j *jobs.Job[Task]) error {
			oldRan.Add(1)
			oldID.Store(j.ID)
			return nil
		}))
	})
	testdb.WaitFor(t, "old worker took its job", func() bool { return oldRan.Load() == 1 })
	require.Equal(t, older.ID, oldID.Load())
	old.stop() // its polls since then left the v2 job alone
	require.Equal(t, "pending", b.job(t, newer.ID).State)
	require.Zero(t, b.job(t, newer.ID).Attempt, "never claimed by the old worker")

	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, v2, func(context.Context, *jobs.Job[Task]) error { newRan.Add(1); return nil }))
	})
	testdb.WaitFor(t, "new worker took the v2 job", func() bool { return newRan.Load() == 1 })
}

// TestHeartbeatKeepsLongJob: a job three times longer than its lease keeps
// the lease and runs once, though another worker sweeps all along. Its
// lease is extended twenty times a lease: only a stall of the whole lease
// (not a slow beat or two on a loaded machine) would let the sweep in.
func TestHeartbeatKeepsLongJob(t *testing.T) {
	b := setup(t)
	k := kind(t, "long")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	var runs atomic.Int64
	handler := func(ctx context.Context, _ *jobs.Job[Task]) error {
		runs.Add(1)
		select {
		case <-time.After(6500 * time.Millisecond): // more than three leases
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	cfg := worker.Config{LeaseDuration: 2 * time.Second, ExtendInterval: 100 * time.Millisecond, SweepInterval: 50 * time.Millisecond}
	start(t, b, cfg, func(w *worker.Worker) { require.NoError(t, worker.Handle(w, k, handler)) })
	start(t, b, cfg, func(w *worker.Worker) { require.NoError(t, worker.Handle(w, k, handler)) })
	testdb.WaitFor(t, "job done", func() bool { live, _ := b.Totals(t); return live == 0 })
	require.EqualValues(t, 1, runs.Load())
	_, dead := b.Totals(t)
	require.Zero(t, dead)
	_ = res
}

// TestLostLeaseCancelsHandler: when the lease is lost (expired in SQL and
// swept), the handler's context is cancelled with ErrLeaseLost and its late
// success is not recorded.
func TestLostLeaseCancelsHandler(t *testing.T) {
	b := setup(t)
	k := kind(t, "lost")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{}, jobs.MaxAttempts(5))
	require.NoError(t, err)
	cause := make(chan error, 1)
	started := make(chan struct{}, 1)
	start(t, b, worker.Config{ExtendInterval: 50 * time.Millisecond, SweepInterval: time.Hour, ShutdownTimeout: 100 * time.Millisecond},
		func(w *worker.Worker) {
			require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
				if j.Attempt > 1 {
					<-ctx.Done() // the second claim just waits for the end of the test
					return nil
				}
				started <- struct{}{}
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return nil // a late "success" that must not count
			}))
		})
	<-started
	b.takeAway(t, b.job(t, res.ID))

	select {
	case err := <-cause:
		require.ErrorIs(t, err, worker.ErrLeaseLost)
	case <-time.After(30 * time.Second):
		t.Fatal("handler not cancelled")
	}
	// The late success was not recorded: the job lives on (claimed again
	// by the worker, attempt 2) with the sweep's history entry.
	testdb.WaitFor(t, "claimed again", func() bool { return b.job(t, res.ID).Attempt == 2 })
	h := history(t, b.job(t, res.ID).Errors)
	require.Len(t, h, 1)
	require.Equal(t, "lease expired", h[0].Error)
}

// TestShutdownReleasesUnfinished: with jobs in flight, Run honours the
// shutdown deadline, gives unfinished jobs back uncharged, and another
// worker picks them up at once (woken, not polling).
func TestShutdownReleasesUnfinished(t *testing.T) {
	b := setup(t)
	k := kind(t, "inflight")
	res, err := k.EnqueueMany(b.Ctx, b.Pool, jobs.Items(Task{}, Task{}, Task{}), jobs.MaxAttempts(1))
	require.NoError(t, err)
	require.Equal(t, 3, res.Inserted)

	var inHandler atomic.Int64
	// The deadline leaves the release its reserve (a quarter, 500ms here)
	// even on a loaded machine: with 200ms, CI once saw the release miss
	// its 50ms and the jobs stay running for the next worker to take back.
	first := start(t, b, worker.Config{ShutdownTimeout: 2 * time.Second}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, _ *jobs.Job[Task]) error {
			inHandler.Add(1)
			<-ctx.Done()
			return context.Cause(ctx)
		}))
	})
	testdb.WaitFor(t, "all three running", func() bool { return inHandler.Load() == 3 })
	began := time.Now()
	first.stop()
	took := time.Since(began)
	require.GreaterOrEqual(t, took, 1500*time.Millisecond, "waited for the handlers until the shutdown's last quarter")

	stats, err := b.Queries.Stats(b.Ctx)
	require.NoError(t, err)
	require.Len(t, stats, 1)
	require.EqualValues(t, 3, stats[0].Ready, "released, ready at once")

	seen := make(chan [2]int, 3)
	start(t, b, worker.Config{PollInterval: time.Hour}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(_ context.Context, j *jobs.Job[Task]) error {
			seen <- [2]int{j.Attempt, j.MaxAttempts}
			return nil
		}))
	})
	for range 3 {
		// attempt 2 of max 2: the released claim was not charged.
		require.Equal(t, [2]int{2, 2}, <-seen, "attempt and max attempts of a released job")
	}
}

// TestShutdownWhileStarting: a shutdown asked for before the worker has
// started (ctx cancelled while it checks the schema and registers its
// queues) is a shutdown, not a failure to start: Run returns nil, and the
// worker claimed nothing.
func TestShutdownWhileStarting(t *testing.T) {
	b := setup(t)
	k := kind(t, "unstarted")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)

	w, err := worker.New(b.Pool, fast(worker.Config{}))
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, k, func(context.Context, *jobs.Job[Task]) error {
		t.Error("a worker shut down while starting ran a job")
		return nil
	}))
	ctx, cancel := context.WithCancel(b.Ctx)
	cancel()
	require.NoError(t, w.Run(ctx))

	j := b.job(t, res.ID)
	require.Equal(t, "pending", j.State, "still waiting")
	require.Zero(t, j.Attempt, "never claimed")
}

// TestAckTx: a handler acks inside its own transaction; rolled back, the
// job is retried; committed, it is gone and acked exactly once.
func TestAckTx(t *testing.T) {
	b := setup(t)
	_, err := b.Pool.Exec(b.Ctx, "CREATE TABLE effects (job_id bigint, attempt int)")
	require.NoError(t, err)
	k := kind(t, "tx")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)

	r := start(t, b, worker.Config{Registerer: prometheus.NewRegistry()}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			tx, err := b.Pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, "INSERT INTO effects VALUES ($1, $2)", j.ID, j.Attempt); err != nil {
				return err
			}
			if err := worker.AckTx(ctx, tx, j); err != nil {
				return err
			}
			if j.Attempt == 1 {
				return errors.New("rolled back after acking") // the deferred rollback undoes both
			}
			return tx.Commit(ctx)
		}))
	})
	testdb.WaitFor(t, "job done", func() bool { live, _ := b.Totals(t); return live == 0 })
	r.stop()
	var rows []int32
	r2, err := b.Pool.Query(b.Ctx, "SELECT attempt FROM effects WHERE job_id = $1", res.ID)
	require.NoError(t, err)
	for r2.Next() {
		var a int32
		require.NoError(t, r2.Scan(&a))
		rows = append(rows, a)
	}
	require.NoError(t, r2.Err())
	require.Equal(t, []int32{2}, rows, "only the committed attempt left effects")
	_, dead := b.Totals(t)
	require.Zero(t, dead)
}

// TestStableIdentityReleasesPredecessor: a worker restarted under the ID of
// a crashed predecessor gives back its leases at start.
func TestStableIdentityReleasesPredecessor(t *testing.T) {
	b := setup(t)
	k := kind(t, "stable")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	// The predecessor claimed with a long lease and died.
	claimed, err := b.Queries.Dequeue(b.Ctx, db.DequeueParams{Queue: "default", Kinds: []string{"stable"}, MaxVersions: []int32{1},
		MaxJobs: 1, Owner: "pod-7", LeaseMs: time.Hour.Milliseconds()})
	require.NoError(t, err)
	require.Len(t, claimed, 1)

	var ran atomic.Int64
	start(t, b, worker.Config{ID: "pod-7", SweepInterval: time.Hour}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(context.Context, *jobs.Job[Task]) error { ran.Add(1); return nil }))
	})
	testdb.WaitFor(t, "the job ran without waiting an hour", func() bool { return ran.Load() == 1 })
	_ = res
	testdb.WaitFor(t, "acked", func() bool { live, _ := b.Totals(t); return live == 0 })
}

// TestWorkerKilled: a worker process killed with SIGKILL mid-job; its job
// runs again on another worker after the lease expires, and none is lost.
func TestWorkerKilled(t *testing.T) {
	b := setup(t)
	blocking := kind(t, "blocking")
	res, err := blocking.EnqueueMany(b.Ctx, b.Pool, jobs.Items(Task{}, Task{}, Task{}), jobs.MaxAttempts(3))
	require.NoError(t, err)
	require.Equal(t, 3, res.Inserted)

	cmd := startHelper(t, b, "doomed")
	testdb.WaitFor(t, "the helper holds all three", func() bool {
		stats, err := b.Queries.Stats(b.Ctx)
		require.NoError(t, err)
		return len(stats) == 1 && stats[0].Running == 3
	})
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()

	again := make(chan *jobs.Job[Task], 3)
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, blocking, func(_ context.Context, j *jobs.Job[Task]) error {
			again <- j
			return nil
		}))
	})
	for range 3 {
		j := <-again
		require.Equal(t, 2, j.Attempt)
		require.Len(t, j.Errors, 1)
		require.Equal(t, "lease expired", j.Errors[0].Error)
		require.Equal(t, "doomed", j.Errors[0].Owner)
	}
	testdb.WaitFor(t, "table empty", func() bool { live, _ := b.Totals(t); return live == 0 })
}

// TestWorkerSIGTERM: a worker process told to stop gives its jobs back at
// once: they are ready again without waiting for their leases.
func TestWorkerSIGTERM(t *testing.T) {
	b := setup(t)
	blocking := kind(t, "blocking")
	_, err := blocking.EnqueueMany(b.Ctx, b.Pool, jobs.Items(Task{}, Task{}))
	require.NoError(t, err)
	cmd := startHelper(t, b, "graceful")
	testdb.WaitFor(t, "helper holds both", func() bool {
		stats, _ := b.Queries.Stats(b.Ctx)
		return len(stats) == 1 && stats[0].Running == 2
	})
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), "clean exit")
	stats, err := b.Queries.Stats(b.Ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, stats[0].Ready, "released at exit, not left to expire")
}

func TestRegistrationAndConfigErrors(t *testing.T) {
	b := setup(t)
	k := kind(t, "reg")
	w, err := worker.New(b.Pool, worker.Config{})
	require.NoError(t, err)
	noop := func(context.Context, *jobs.Job[Task]) error { return nil }
	require.NoError(t, worker.Handle(w, k, noop))
	require.ErrorIs(t, worker.Handle(w, kind(t, "reg"), noop), jobs.ErrDuplicateKind)
	require.NoError(t, worker.Handle(w, kind(t, "reg2"), noop, worker.Timeout(-1)), "negative: no timeout for this kind")
	require.ErrorIs(t, worker.Handle(w, kind(t, "reg3"), noop, worker.TimeoutBy(func(*jobs.Job[string]) time.Duration { return 0 })), worker.ErrInvalidConfig)

	for _, cfg := range []worker.Config{
		{Queues: map[string]int{"": 1}},
		{Queues: map[string]int{"q": 0}},
		{LeaseDuration: time.Millisecond},
		{LeaseDuration: time.Second, ExtendInterval: 2 * time.Second},
		{PollInterval: -1},
		{AckBatchSize: -5},
		{ShutdownTimeout: -1},
		{RetryBackoff: worker.Backoff{Base: time.Second, Max: time.Millisecond}},
	} {
		_, err := worker.New(b.Pool, cfg)
		require.ErrorIs(t, err, worker.ErrInvalidConfig, fmt.Sprintf("%+v", cfg))
	}

	empty, err := worker.New(b.Pool, worker.Config{})
	require.NoError(t, err)
	require.ErrorIs(t, empty.Run(b.Ctx), worker.ErrInvalidConfig, "no handlers")
}

func TestNotMigrated(t *testing.T) {
	t.Parallel()
	w, err := worker.New(testdb.NewEmpty(t).Pool, worker.Config{})
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, jobs.MustDefine[Task]("x"), func(context.Context, *jobs.Job[Task]) error { return nil }))
	err = w.Run(context.Background())
	require.ErrorIs(t, err, jobs.ErrNotMigrated)
	require.Contains(t, err.Error(), "hopper migrate up")
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	b := worker.Backoff{Base: time.Second, Max: time.Minute}
	for attempt, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 7: time.Minute, 100: time.Minute} {
		require.Equal(t, want, b.Delay(attempt), "attempt %d", attempt)
	}
	j := worker.Backoff{Base: time.Second, Max: time.Minute, Jitter: 0.5}
	for range 1000 {
		d := j.Delay(3)
		require.GreaterOrEqual(t, d, 2*time.Second)
		require.LessOrEqual(t, d, 4*time.Second)
	}
}

// TestNoGoroutineLeak: once Run has returned, no goroutine it started is
// left (connections the pool opened meanwhile are the pool's, not ours).
func TestNoGoroutineLeak(t *testing.T) {
	b := setup(t)
	k := kind(t, "leak")
	_, err := k.EnqueueMany(b.Ctx, b.Pool, jobs.Items(make([]Task, 200)...))
	require.NoError(t, err)
	r := start(t, b, worker.Config{Queues: map[string]int{"default": 8, "other": 2}}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(context.Context, *jobs.Job[Task]) error { return nil }))
	})
	testdb.WaitFor(t, "done", func() bool { live, _ := b.Totals(t); return live == 0 })
	require.Positive(t, workerGoroutines(r.w), "the check sees a running worker's goroutines")
	r.stop()
	// A goroutine that has just signalled its WaitGroup is still returning:
	// wait for them to be gone (a real leak never is; goleak in TestMain
	// checks the whole package too).
	testdb.WaitFor(t, "no goroutine of the worker left after Run returned", func() bool { return workerGoroutines(r.w) == 0 })
}

// workerGoroutines counts goroutines running code of the worker package on
// behalf of w (identified by w's address in their stack arguments).
func workerGoroutines(w *worker.Worker) int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	addr := fmt.Sprintf("%p", w)
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "hopper/worker.(*Worker)") && strings.Contains(g, addr) {
			n++
		}
	}
	return n
}

// TestScheduledAndRetriedJobsRun: a delayed job is held back until its
// time, then promoted and run; a failed attempt waits out its backoff the
// same way and runs again.
func TestScheduledAndRetriedJobsRun(t *testing.T) {
	b := setup(t)
	k := kind(t, "later")
	enqueued := time.Now()
	_, err := k.Enqueue(b.Ctx, b.Pool, Task{N: 1}, jobs.Delay(300*time.Millisecond))
	require.NoError(t, err)
	var mu sync.Mutex
	var runs []time.Time
	start(t, b, worker.Config{RetryBackoff: worker.Backoff{Base: 200 * time.Millisecond, Max: 200 * time.Millisecond}},
		func(w *worker.Worker) {
			require.NoError(t, worker.Handle(w, k, func(_ context.Context, j *jobs.Job[Task]) error {
				mu.Lock()
				defer mu.Unlock()
				runs = append(runs, time.Now())
				if j.Attempt == 1 {
					return errBoom
				}
				return nil
			}))
		})
	testdb.WaitFor(t, "ran twice and done", func() bool { live, _ := b.Totals(t); return live == 0 })
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, 2)
	require.GreaterOrEqual(t, runs[0].Sub(enqueued), 300*time.Millisecond, "not before its run_at")
	require.GreaterOrEqual(t, runs[1].Sub(runs[0]), 200*time.Millisecond, "not before its backoff ended")
}

// TestBlockingHandlersDoNotStarveQueuedJobs: a batch of jobs arriving while
// a handler goroutine sits idle all run at once; none waits behind a
// handler that blocks.
func TestBlockingHandlersDoNotStarveQueuedJobs(t *testing.T) {
	b := setup(t)
	k := kind(t, "blocker")
	var inHandler atomic.Int64
	release := make(chan struct{})
	start(t, b, worker.Config{Queues: map[string]int{"default": 5}}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			if j.Payload.N == 0 {
				return nil // the warm-up job leaves an idle handler goroutine behind
			}
			inHandler.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}))
	})
	_, err := k.Enqueue(b.Ctx, b.Pool, Task{N: 0})
	require.NoError(t, err)
	testdb.WaitFor(t, "warm-up done", func() bool { live, _ := b.Totals(t); return live == 0 })
	_, err = k.EnqueueMany(b.Ctx, b.Pool, jobs.Items(Task{N: 1}, Task{N: 2}, Task{N: 3}, Task{N: 4}))
	require.NoError(t, err)
	testdb.WaitFor(t, "all four blocking handlers run at once", func() bool { return inHandler.Load() == 4 })
	close(release)
}
