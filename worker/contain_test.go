package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// The tests of this file prove that whatever one job's handler does costs
// only that job: every other job is still run and recorded.

// TestTakenJobsStuckHandlerFreesItsSlot: a handler that ignores its
// context keeps its slot only AbandonAfter past the moment its job was
// taken from it (an operator's cancel, a lost lease), however long its own
// timeout: the queue's only slot serves other jobs meanwhile, and the
// handler is counted stuck until it returns.
func TestTakenJobsStuckHandlerFreesItsSlot(t *testing.T) {
	for _, tc := range []struct {
		name string
		take func(t *testing.T, b *bundle, id int64)
	}{
		{"operator cancel", func(t *testing.T, b *bundle, id int64) {
			require.NoError(t, hopper.NewClient(b.Pool).CancelJob(b.Ctx, id))
		}},
		{"lease lost", func(t *testing.T, b *bundle, id int64) { b.takeAway(t, b.job(t, id)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			stuck, quick := kind(t, "stuck"), kind(t, "quick")
			res, err := stuck.Enqueue(b.Ctx, b.Pool, Task{})
			require.NoError(t, err)
			unstick, started := make(chan struct{}), make(chan struct{})
			t.Cleanup(func() {
				select {
				case <-unstick:
				default:
					close(unstick)
				}
			})
			quickRan := make(chan int64, 10)
			reg := prometheus.NewRegistry()
			start(t, b, worker.Config{
				Queues: map[string]int{"default": 1}, ExtendInterval: 50 * time.Millisecond,
				AbandonAfter: 100 * time.Millisecond, Registerer: reg, Logger: quiet,
			}, func(w *worker.Worker) {
				require.NoError(t, worker.Handle(w, stuck, func(ctx context.Context, j *jobs.Job[Task]) error {
					if j.Attempt == 1 {
						close(started)
						<-unstick // ignores ctx
					}
					return nil
				}, worker.Timeout(time.Hour)))
				require.NoError(t, worker.Handle(w, quick, func(ctx context.Context, j *jobs.Job[Task]) error {
					quickRan <- j.ID
					return nil
				}))
			})
			<-started
			tc.take(t, b, res.ID)
			_, err = quick.EnqueueMany(b.Ctx, b.Pool, jobs.Items(Task{}, Task{}, Task{}))
			require.NoError(t, err)
			ran := map[int64]bool{}
			testdb.WaitFor(t, "the quick jobs ran in the freed slot", func() bool {
				for len(quickRan) > 0 {
					ran[<-quickRan] = true
				}
				return len(ran) == 3
			})
			require.Equal(t, 1.0, metricValue(t, reg, `hopper_job_outcomes_total{outcome="abandoned"}`))
			require.Equal(t, 1.0, metricValue(t, reg, "hopper_handlers_stuck"))
			close(unstick)
			testdb.WaitFor(t, "the stuck handler returned", func() bool { return metricValue(t, reg, "hopper_handlers_stuck") == 0 })
		})
	}
}

// TestAckTxOutcomeIsTheTransactions: what a worker reports after a
// handler's AckTx follows what became of the handler's transaction, read
// from the server, never inferred from the row being gone: a rollback
// followed by an operator's cancel is a cancel, and a commit followed by
// an error is done.
func TestAckTxOutcomeIsTheTransactions(t *testing.T) {
	for _, tc := range []struct {
		name string
		// commit: the handler commits its AckTx transaction (else rolls
		// it back); cancel: the test cancels the job after that; fail:
		// the handler then returns an error.
		commit, cancel, fail bool
		want                 worker.Outcome
		completed            float64
	}{
		{name: "rolled back then cancelled", cancel: true, want: worker.OutcomeCancelled},
		{name: "committed then failed", commit: true, fail: true, want: worker.OutcomeDone, completed: 1},
		{name: "rolled back then failed", fail: true, want: worker.OutcomeFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			k := kind(t, "acked_in_tx")
			res, err := k.Enqueue(b.Ctx, b.Pool, Task{}, jobs.MaxAttempts(2))
			require.NoError(t, err)
			acked, cancelled := make(chan struct{}), make(chan struct{})
			reg := prometheus.NewRegistry()
			var seen *outcomes
			start(t, b, worker.Config{
				// No notice of the cancel: the lease extension finds the row gone
				// while the lease holds, as a worker behind PgBouncer does.
				PollOnly: true, ExtendInterval: 20 * time.Millisecond, Registerer: reg, Logger: quiet,
				KeepHistoryByQueue: map[string]time.Duration{jobs.DefaultQueue: time.Hour},
			}, func(w *worker.Worker) {
				seen = observe(w)
				require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
					if j.Attempt > 1 {
						return nil
					}
					tx, err := b.Pool.Begin(ctx)
					if err != nil {
						return err
					}
					defer tx.Rollback(context.Background()) //nolint:errcheck
					if err := worker.AckTx(ctx, tx, j); err != nil {
						return err
					}
					if tc.commit {
						err = tx.Commit(ctx)
					} else {
						err = tx.Rollback(ctx)
					}
					if err != nil {
						return err
					}
					close(acked)
					if tc.cancel {
						<-cancelled
					}
					if err := waitExtensions(ctx, w, 3); err != nil { // the lease extension sees the row as it is now
						return err
					}
					if tc.fail {
						return errors.New("failed after the ack")
					}
					return nil
				}))
			})
			<-acked
			if tc.cancel {
				require.NoError(t, hopper.NewClient(b.Pool).CancelJob(b.Ctx, res.ID))
				close(cancelled)
			}
			testdb.WaitFor(t, "the first attempt's outcome", func() bool { return len(seen.of(res.ID, 1)) > 0 })
			require.Equal(t, []string{string(tc.want)}, seen.of(res.ID, 1))
			require.Equal(t, tc.completed, metricValue(t, reg, `hopper_job_outcomes_total{outcome="done"}`))
			if tc.want == worker.OutcomeCancelled {
				d, ok := b.dead(t, res.ID)
				require.True(t, ok)
				require.Equal(t, string(jobs.StateCancelled), d.State)
			}
		})
	}
}

// Result is what the result-returning kind of these tests returns.
type Result struct {
	Text string `json:"text"`
}

// TestRefusedResultStaysWithItsJob: results batched beside one the server
// would refuse are all recorded. "raw bytes": a failure whose message holds
// NUL and invalid UTF-8 and a kept result holding \u0000, made storable
// before they are sent. "refused anyway": the test's schema refuses any
// failure or kept result mentioning POISON (a CHECK constraint), so the
// batch is split until the bad result stands alone, and that one is made
// plainer until the server takes it: the failure goes dead with a reason
// naming the refusal, the result is kept without it.
func TestRefusedResultStaysWithItsJob(t *testing.T) {
	for _, tc := range []struct {
		name       string
		constrain  bool
		failure    string // the bad failure's message
		result     string // the bad result's text
		wantFailed jobs.State
	}{
		{name: "raw bytes", failure: "upload: \x00\xff\xfe bad header", result: "nul \x00 here", wantFailed: jobs.StateScheduled},
		{name: "refused anyway", constrain: true, failure: "POISON", result: "POISON", wantFailed: jobs.StateDead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			if tc.constrain {
				_, err := b.Pool.Exec(b.Ctx, `ALTER TABLE hopper_jobs ADD CONSTRAINT poison CHECK (errors::text NOT LIKE '%POISON%');
					ALTER TABLE hopper_job_history ADD CONSTRAINT poison CHECK (coalesce(result::text, '') NOT LIKE '%POISON%')`)
				require.NoError(t, err)
			}
			plain, failing := kind(t, "plain"), kind(t, "failing")
			returning, err := jobs.Define[Result]("returning")
			require.NoError(t, err)
			const healthy = 6
			items := make([]Task, healthy)
			for i := range items {
				items[i] = Task{N: i}
			}
			many, err := plain.EnqueueMany(b.Ctx, b.Pool, jobs.Items(items...))
			require.NoError(t, err)
			var okIDs []int64
			for _, r := range many.Results {
				okIDs = append(okIDs, r.ID)
			}
			bad, err := failing.Enqueue(b.Ctx, b.Pool, Task{N: -1}, jobs.MaxAttempts(2))
			require.NoError(t, err)
			mate, err := failing.Enqueue(b.Ctx, b.Pool, Task{N: 1}, jobs.MaxAttempts(1))
			require.NoError(t, err)
			kept, err := returning.Enqueue(b.Ctx, b.Pool, Result{}) // a payload with NUL is refused at enqueue, to its caller
			require.NoError(t, err)
			total := healthy + 3

			// Every handler waits for all to start, so that their results
			// come together and are recorded in the same batches.
			var started sync.WaitGroup
			started.Add(total)
			gate := func(ctx context.Context, attempt int) {
				if attempt == 1 {
					started.Done()
					started.Wait()
				}
			}
			var seen *outcomes
			start(t, b, worker.Config{
				Queues: map[string]int{jobs.DefaultQueue: total}, AckFlushInterval: 200 * time.Millisecond, Logger: quiet,
				KeepHistoryByQueue: map[string]time.Duration{jobs.DefaultQueue: time.Hour},
				RetryBackoff:       worker.Backoff{Base: time.Hour, Max: time.Hour}, // the bad failure's retry stays visible
			}, func(w *worker.Worker) {
				seen = observe(w)
				require.NoError(t, worker.Handle(w, plain, func(ctx context.Context, j *jobs.Job[Task]) error {
					gate(ctx, j.Attempt)
					return nil
				}))
				require.NoError(t, worker.Handle(w, failing, func(ctx context.Context, j *jobs.Job[Task]) error {
					gate(ctx, j.Attempt)
					if j.Payload.N < 0 {
						return errors.New(tc.failure)
					}
					return errors.New("an ordinary failure")
				}))
				require.NoError(t, worker.HandleWithResult(w, returning, func(ctx context.Context, j *jobs.Job[Result]) (Result, error) {
					gate(ctx, j.Attempt)
					return Result{Text: tc.result}, nil
				}))
			})
			testdb.WaitFor(t, "every job's first attempt reported", func() bool {
				for _, id := range append(slices.Clone(okIDs), bad.ID, mate.ID, kept.ID) {
					if len(seen.of(id, 1)) == 0 {
						return false
					}
				}
				return true
			})
			for _, id := range okIDs {
				require.Equal(t, []string{string(worker.OutcomeDone)}, seen.of(id, 1), "healthy job %d", id)
			}
			require.Equal(t, []string{string(worker.OutcomeDead)}, seen.of(mate.ID, 1), "the bad failure's batch-mate")
			require.Equal(t, []string{string(worker.OutcomeDone)}, seen.of(kept.ID, 1))

			var storedResult []byte
			require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT result FROM hopper_job_history WHERE id = $1", kept.ID).Scan(&storedResult))
			var badHistory []byte
			var state string
			if tc.wantFailed == jobs.StateDead {
				require.Equal(t, []string{string(worker.OutcomeDead)}, seen.of(bad.ID, 1))
				d, found := b.dead(t, bad.ID)
				require.True(t, found)
				require.Contains(t, d.Reason, "SQLSTATE 23514")
				require.Nil(t, storedResult, "the refused result is not kept")
				return
			}
			require.Equal(t, []string{string(worker.OutcomeFailed)}, seen.of(bad.ID, 1))
			require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT errors, state FROM hopper_jobs WHERE id = $1", bad.ID).Scan(&badHistory, &state))
			require.Equal(t, string(tc.wantFailed), state)
			h := history(t, badHistory)
			require.Len(t, h, 1)
			require.Equal(t, "upload: \uFFFD\uFFFD bad header", h[0].Error)
			var r Result
			require.NoError(t, json.Unmarshal(storedResult, &r))
			require.Equal(t, "nul \uFFFD here", r.Text)
		})
	}
}

// TestRefusesIsolationAboveReadCommitted: a pool whose sessions default to
// repeatable read or serializable is refused at start with ErrIsolation
// (the flow-controlled claim would take its snapshot before its lock);
// read committed, set explicitly, starts.
func TestRefusesIsolationAboveReadCommitted(t *testing.T) {
	for _, level := range []string{"repeatable read", "serializable", "read committed"} {
		t.Run(level, func(t *testing.T) {
			b := setup(t)
			cfg, err := pgxpool.ParseConfig(b.URL)
			require.NoError(t, err)
			cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = level
			pool, err := pgxpool.NewWithConfig(b.Ctx, cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			w, err := worker.New(pool, fast(worker.Config{Logger: quiet}))
			require.NoError(t, err)
			require.NoError(t, worker.Handle(w, kind(t, "any"), func(context.Context, *jobs.Job[Task]) error { return nil }))
			ctx, cancel := context.WithCancel(b.Ctx)
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- w.Run(ctx) }()
			if level == "read committed" {
				testdb.WaitFor(t, "the worker listening", func() bool { return worker.Listening(w) })
				cancel()
				require.NoError(t, <-errc)
				return
			}
			err = <-errc
			require.ErrorIs(t, err, worker.ErrIsolation)
			require.ErrorContains(t, err, level)
		})
	}
}

// TestReadyBehindCursorRunsAtOnce: jobs that become ready behind the
// claim cursor with no insert to announce them run at once, not at the
// next full scan (an hour here): a retry with no backoff of a job ranked
// before the jobs claimed since, and a job of a key held back by its limit
// whose running job an operator cancelled.
func TestReadyBehindCursorRunsAtOnce(t *testing.T) {
	// inOneTx enqueues jobs together once the worker listens (its cursor is
	// in use only then), so that one claim takes them all.
	inOneTx := func(t *testing.T, b *bundle, w *worker.Worker, enqueue func(tx pgx.Tx) []int64) []int64 {
		testdb.WaitFor(t, "the worker listening", func() bool { return worker.Listening(w) })
		tx, err := b.Pool.Begin(b.Ctx)
		require.NoError(t, err)
		defer tx.Rollback(b.Ctx) //nolint:errcheck
		ids := enqueue(tx)
		require.NoError(t, tx.Commit(b.Ctx))
		return ids
	}
	enq := func(t *testing.T, b *bundle, tx pgx.Tx, k *jobs.Kind[Task], n int, opts ...jobs.EnqueueOption) int64 {
		res, err := k.Enqueue(b.Ctx, tx, Task{N: n}, opts...)
		require.NoError(t, err)
		return res.ID
	}
	t.Run("retry without backoff", func(t *testing.T) {
		b := setup(t)
		k := kind(t, "retried")
		var seen *outcomes
		r := start(t, b, worker.Config{Queues: map[string]int{jobs.DefaultQueue: 2}, FullScanInterval: time.Hour, Logger: quiet},
			func(w *worker.Worker) {
				seen = observe(w)
				require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
					if j.Payload.N == 1 && j.Attempt == 1 {
						return worker.RetryAt(time.Time{}, errors.New("again, now"))
					}
					return nil
				}))
			})
		// Both are claimed together (two slots): the cursor passes the
		// first job's place, and its retry ranks before the second.
		ids := inOneTx(t, b, r.w, func(tx pgx.Tx) []int64 {
			return []int64{enq(t, b, tx, k, 1, jobs.Priority(1)), enq(t, b, tx, k, 2, jobs.Priority(5))}
		})
		testdb.WaitFor(t, "the retry ran", func() bool { return len(seen.of(ids[0], 2)) > 0 })
		require.Equal(t, []string{string(worker.OutcomeDone)}, seen.of(ids[0], 2))
	})
	t.Run("key freed by a cancel", func(t *testing.T) {
		b := setup(t)
		k := kind(t, "keyed")
		started := make(chan struct{})
		var seen *outcomes
		r := start(t, b, worker.Config{
			Queues: map[string]int{jobs.DefaultQueue: 3}, FullScanInterval: time.Hour, Logger: quiet,
			FlowControl: map[string]worker.FlowControl{jobs.DefaultQueue: {KeyLimit: 1}},
		}, func(w *worker.Worker) {
			seen = observe(w)
			require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
				if j.Payload.N == 1 {
					close(started)
					<-ctx.Done()
					return ctx.Err()
				}
				return nil
			}))
		})
		ids := inOneTx(t, b, r.w, func(tx pgx.Tx) []int64 {
			return []int64{
				enq(t, b, tx, k, 1, jobs.ConcurrencyKey("acct"), jobs.Priority(1)),
				enq(t, b, tx, k, 2, jobs.ConcurrencyKey("acct"), jobs.Priority(1)),
				enq(t, b, tx, k, 3, jobs.Priority(5)),
			}
		})
		<-started
		testdb.WaitFor(t, "the unkeyed job ran, past the held-back one", func() bool { return len(seen.of(ids[2], 1)) > 0 })
		require.NoError(t, hopper.NewClient(b.Pool).CancelJob(b.Ctx, ids[0]))
		testdb.WaitFor(t, "the held-back job ran", func() bool { return len(seen.of(ids[1], 1)) > 0 })
		require.Equal(t, []string{string(worker.OutcomeDone)}, seen.of(ids[1], 1))
	})
}

// nilDeref is an error whose Error method dereferences its receiver: a
// typed nil of it panics when read.
type nilDeref struct{ msg string }

func (e *nilDeref) Error() string { return e.msg }

// TestErrorThatPanicsWhenRead: a handler returning an error that panics
// when read (a typed nil pointer) fails its own job with a message saying
// so; the worker goes on running the others.
func TestErrorThatPanicsWhenRead(t *testing.T) {
	b := setup(t)
	bad, good := kind(t, "bad_error"), kind(t, "good")
	res, err := bad.Enqueue(b.Ctx, b.Pool, Task{}, jobs.MaxAttempts(1))
	require.NoError(t, err)
	var seen *outcomes
	start(t, b, worker.Config{Logger: quiet}, func(w *worker.Worker) {
		seen = observe(w)
		require.NoError(t, worker.Handle(w, bad, func(context.Context, *jobs.Job[Task]) error {
			var e *nilDeref
			return e
		}))
		require.NoError(t, worker.Handle(w, good, func(context.Context, *jobs.Job[Task]) error { return nil }))
	})
	testdb.WaitFor(t, "the bad job's outcome", func() bool { return len(seen.of(res.ID, 1)) > 0 })
	require.Equal(t, []string{string(worker.OutcomeDead)}, seen.of(res.ID, 1))
	d, ok := b.dead(t, res.ID)
	require.True(t, ok)
	h := history(t, d.Errors)
	require.Len(t, h, 1)
	require.Contains(t, h[0].Error, "an error of type *worker_test.nilDeref that panics when read")
	after, err := good.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	testdb.WaitFor(t, "a later job done by the same worker", func() bool { return len(seen.of(after.ID, 1)) > 0 })
}

// TestAckTxCommittedThenAbandoned: a handler that committed its AckTx and
// then ignored its context until it was abandoned reports done when it
// returns at last: its job is finished and does not run again.
func TestAckTxCommittedThenAbandoned(t *testing.T) {
	b := setup(t)
	k := kind(t, "acked_then_stuck")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	unstick := make(chan struct{})
	var seen *outcomes
	start(t, b, worker.Config{ExtendInterval: 20 * time.Millisecond, AbandonAfter: 50 * time.Millisecond, Registerer: reg, Logger: quiet},
		func(w *worker.Worker) {
			seen = observe(w)
			// The timeout leaves AckTx room on a busy CI machine: at 50ms
			// it once expired before the commit.
			require.NoError(t, worker.Handle(w, k, ackThenStick(b.Pool, unstick), worker.Timeout(time.Second)))
		})
	testdb.WaitFor(t, "the handler abandoned", func() bool { return metricValue(t, reg, `hopper_job_outcomes_total{outcome="abandoned"}`) == 1 })
	close(unstick)
	testdb.WaitFor(t, "the outcome reported", func() bool { return len(seen.of(res.ID, 1)) > 0 })
	require.Equal(t, []string{string(worker.OutcomeDone)}, seen.of(res.ID, 1))
	require.Equal(t, 1.0, metricValue(t, reg, `hopper_job_outcomes_total{outcome="done"}`))
}

// ackThenStick is a handler that commits its AckTx on pool, then ignores
// its context until unstick is closed (it is abandoned meanwhile), and
// returns the context's error.
func ackThenStick(pool *pgxpool.Pool, unstick <-chan struct{}) func(context.Context, *jobs.Job[Task]) error {
	return func(ctx context.Context, j *jobs.Job[Task]) error {
		tx, err := pool.Begin(context.Background())
		if err != nil {
			return err
		}
		defer tx.Rollback(context.Background()) //nolint:errcheck
		if err := worker.AckTx(ctx, tx, j); err != nil {
			return err
		}
		if err := tx.Commit(context.Background()); err != nil {
			return err
		}
		<-unstick // ignores ctx
		return ctx.Err()
	}
}
