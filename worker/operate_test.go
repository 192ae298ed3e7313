package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// TestSnoozeIsNotCharged: a kind with a single attempt snoozes twice and
// then succeeds: the snoozes consumed no attempt and left no error entry.
func TestSnoozeIsNotCharged(t *testing.T) {
	b := setup(t)
	k := kind(t, "snoozy")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{}, jobs.MaxAttempts(1))
	require.NoError(t, err)
	type run struct{ attempt, max, errors int }
	runs := make(chan run, 10)
	reg := prometheus.NewRegistry()
	var seen *outcomes
	start(t, b, worker.Config{Registerer: reg}, func(w *worker.Worker) {
		seen = observe(w)
		require.NoError(t, worker.Handle(w, k, func(_ context.Context, j *jobs.Job[Task]) error {
			runs <- run{j.Attempt, j.MaxAttempts, len(j.Errors)}
			if j.Attempt < 3 {
				return worker.Snooze(50 * time.Millisecond)
			}
			return nil
		}))
	})
	testdb.WaitFor(t, "done after two snoozes", func() bool { return len(seen.of(res.ID, 3)) > 0 })
	require.Equal(t, []run{{1, 1, 0}, {2, 2, 0}, {3, 3, 0}}, []run{<-runs, <-runs, <-runs},
		"each snooze gives its claim back: attempts left stay, no error entry")
	require.Equal(t, []string{string(worker.OutcomeSnoozed)}, seen.of(res.ID, 1))
	require.Equal(t, []string{string(worker.OutcomeSnoozed)}, seen.of(res.ID, 2))
	require.Equal(t, []string{string(worker.OutcomeDone)}, seen.of(res.ID, 3))
	require.Equal(t, 2.0, metricValue(t, reg, `hopper_job_outcomes_total{outcome="snoozed"}`))
	require.Zero(t, metricValue(t, reg, `hopper_job_outcomes_total{outcome="failed"}`))
}

// TestSnoozeRejectsNonsense: a snooze that is not in the future, or is
// absurdly far, is an error a handler can match; returned, it fails the
// attempt with that message.
func TestSnoozeRejectsNonsense(t *testing.T) {
	b := setup(t)
	for name, err := range map[string]error{
		"zero":           worker.Snooze(0),
		"negative":       worker.Snooze(-time.Second),
		"over a year":    worker.Snooze(worker.MaxSnooze + time.Hour),
		"in the past":    worker.SnoozeUntil(time.Now().Add(-time.Minute)),
		"years from now": worker.SnoozeUntil(time.Now().AddDate(3, 0, 0)),
	} {
		require.ErrorIs(t, err, worker.ErrInvalidSnooze, name)
	}
	require.NotErrorIs(t, worker.Snooze(time.Minute), worker.ErrInvalidSnooze)
	require.NotErrorIs(t, worker.SnoozeUntil(time.Now().Add(time.Hour)), worker.ErrInvalidSnooze)

	k := kind(t, "bad_snooze")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{}, jobs.MaxAttempts(1))
	require.NoError(t, err)
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(context.Context, *jobs.Job[Task]) error { return worker.Snooze(-time.Second) }))
	})
	var d = waitDead(t, b, res.ID)
	require.Equal(t, "out of attempts", d.Reason, "an invalid snooze is a failure")
	require.Contains(t, history(t, d.Errors)[0].Error, "invalid snooze")
}

// TestHandlerCancelsItsOwnJob: Cancel ends the job as cancelled, at once,
// attempts left or not, with the reason in its history, and is not
// counted as a failure.
func TestHandlerCancelsItsOwnJob(t *testing.T) {
	b := setup(t)
	k := kind(t, "self_cancel")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{}, jobs.MaxAttempts(25))
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	var seen *outcomes
	start(t, b, worker.Config{Registerer: reg}, func(w *worker.Worker) {
		seen = observe(w)
		require.NoError(t, worker.Handle(w, k, func(context.Context, *jobs.Job[Task]) error {
			return worker.Cancel(errors.New("the account is gone"))
		}))
	})
	testdb.WaitFor(t, "outcome reported", func() bool { return len(seen.of(res.ID, 1)) > 0 })
	require.Equal(t, []string{string(worker.OutcomeCancelled)}, seen.of(res.ID, 1))
	row, err := hopper.NewClient(b.Pool).GetJob(b.Ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, jobs.StateCancelled, row.State)
	require.Equal(t, "cancelled", row.Reason)
	require.Len(t, row.Errors, 1)
	require.Equal(t, "cancelled: the account is gone", row.Errors[0].Error)
	require.Equal(t, 1.0, metricValue(t, reg, `hopper_job_outcomes_total{outcome="cancelled"}`))
	require.Zero(t, metricValue(t, reg, `hopper_job_outcomes_total{outcome="failed"}`))
	require.Zero(t, metricValue(t, reg, `hopper_job_outcomes_total{outcome="dead"}`))
}

// TestOperatorCancelsRunningJob: the owning worker learns of the cancel at
// once through LISTEN, or at its next lease extension without it (PollOnly), and
// cancels the handler's context with the cause ErrCancelled; the job is
// kept as cancelled and whatever the handler returns afterwards is
// discarded, never recorded.
func TestOperatorCancelsRunningJob(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  worker.Config
	}{
		{"notified", worker.Config{LeaseDuration: time.Hour}}, // no lease extension will come: only the notice can tell
		{"extension", worker.Config{PollOnly: true, LeaseDuration: 3 * time.Second, ExtendInterval: 50 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			k := kind(t, "cancel_me")
			res, err := k.Enqueue(b.Ctx, b.Pool, Task{})
			require.NoError(t, err)
			started, cause := make(chan struct{}), make(chan error, 1)
			reg := prometheus.NewRegistry()
			tc.cfg.Registerer = reg
			var seen *outcomes
			r := start(t, b, tc.cfg, func(w *worker.Worker) {
				seen = observe(w)
				require.NoError(t, worker.Handle(w, k, func(ctx context.Context, _ *jobs.Job[Task]) error {
					close(started)
					<-ctx.Done()
					cause <- context.Cause(ctx)
					return nil // a late "success": must not be recorded
				}))
			})
			<-started
			if !tc.cfg.PollOnly {
				// A notice sent before the listener subscribes is lost (the
				// next lease extension finds the cancel instead): this case is
				// about the notice, so it waits for the subscription.
				testdb.WaitFor(t, "the wake-up listener subscribed", func() bool { return worker.Listening(r.w) })
			}
			require.NoError(t, hopper.NewClient(b.Pool).CancelJob(b.Ctx, res.ID))
			select {
			case err := <-cause:
				require.ErrorIs(t, err, worker.ErrCancelled)
			case <-time.After(time.Minute):
				t.Fatal("the handler was not cancelled")
			}
			testdb.WaitFor(t, "slot freed", func() bool { return worker.HeldClaims(r.w) == 0 })
			r.stop()
			require.Empty(t, seen.of(res.ID, 1), "the late result is discarded: no outcome recorded for it")
			require.Equal(t, 1.0, metricValue(t, reg, `hopper_job_outcomes_total{outcome="cancelled"}`))
			require.Zero(t, metricValue(t, reg, "hopper_leases_lost_total"), "a cancel is not a lost lease")
			require.Zero(t, metricValue(t, reg, `hopper_job_outcomes_total{outcome="done"}`))
			row, err := hopper.NewClient(b.Pool).GetJob(b.Ctx, res.ID)
			require.NoError(t, err)
			require.Equal(t, jobs.StateCancelled, row.State)
		})
	}
}

// TestCancelAfterTheHandlerReturned: a job cancelled between its handler's
// return and its ack: the ack matches nothing (the row is gone), the worker
// reads what became of the job and reports it cancelled, and the job stays
// cancelled.
func TestCancelAfterTheHandlerReturned(t *testing.T) {
	b := setup(t)
	k := kind(t, "late_cancel")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	returned := make(chan struct{})
	var seen *outcomes
	// Acks wait for a full batch or a minute: long enough for the cancel.
	r := start(t, b, worker.Config{AckFlushInterval: time.Minute, AckBatchSize: 1000}, func(w *worker.Worker) {
		seen = observe(w)
		require.NoError(t, worker.Handle(w, k, func(context.Context, *jobs.Job[Task]) error {
			defer close(returned)
			return nil
		}))
	})
	<-returned
	// The handler has returned, but the worker may not have taken its
	// result yet; a cancel before then would cancel a running claim.
	testdb.WaitFor(t, "the result waits for its ack", func() bool { return worker.ClaimFinished(r.w, res.ID, 1) })
	require.NoError(t, hopper.NewClient(b.Pool).CancelJob(b.Ctx, res.ID))
	r.stop() // records the waiting ack
	require.Equal(t, []string{string(worker.OutcomeCancelled)}, seen.of(res.ID, 1), "the ack, sent at shutdown, matched nothing: the job was cancelled")
	row, err := hopper.NewClient(b.Pool).GetJob(b.Ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, jobs.StateCancelled, row.State)
}

// TestKeepHistory: completed jobs of a kind or queue that keeps history
// are in the history, with the handler's result, until they expire and
// every worker prunes them; others leave no trace. Dead jobs older than
// DeadRetention are pruned too.
func TestKeepHistory(t *testing.T) {
	b := setup(t)
	type Out struct {
		Sent int `json:"sent"`
	}
	withResult, plain, never := kind(t, "with_result"), kind(t, "plain"), kind(t, "never")
	ids := map[string]int64{}
	for name, k := range map[string]*jobs.Kind[Task]{"with_result": withResult, "plain": plain, "never": never} {
		res, err := k.Enqueue(b.Ctx, b.Pool, Task{N: 5}, jobs.Queue("kept"))
		require.NoError(t, err)
		ids[name] = res.ID
	}
	other, err := plain.Enqueue(b.Ctx, b.Pool, Task{}, jobs.Queue("not_kept"))
	require.NoError(t, err)
	acked, err := plain.Enqueue(b.Ctx, b.Pool, Task{N: -1}, jobs.Queue("kept"))
	require.NoError(t, err)

	client := hopper.NewClient(b.Pool)
	r := start(t, b, worker.Config{Queues: map[string]int{"kept": 5, "not_kept": 1}, KeepHistoryByQueue: map[string]time.Duration{"kept": time.Hour},
		DeadRetention: time.Hour, SweepInterval: time.Hour}, func(w *worker.Worker) {
		require.NoError(t, worker.HandleWithResult(w, withResult, func(_ context.Context, j *jobs.Job[Task]) (Out, error) {
			return Out{Sent: j.Payload.N}, nil
		}))
		require.NoError(t, worker.Handle(w, plain, func(ctx context.Context, j *jobs.Job[Task]) error {
			if j.Payload.N == -1 { // acknowledges in its own transaction
				tx, err := b.Pool.Begin(ctx)
				if err != nil {
					return err
				}
				defer tx.Rollback(ctx) //nolint:errcheck
				if err := worker.AckTx(ctx, tx, j); err != nil {
					return err
				}
				return tx.Commit(ctx)
			}
			return nil
		}))
		require.NoError(t, worker.Handle(w, never, func(context.Context, *jobs.Job[Task]) error { return nil }, worker.KeepHistory(-1)))
	})
	testdb.WaitFor(t, "every job done", func() bool { live, _ := b.Totals(t); return live == 0 })

	row, err := client.GetJob(b.Ctx, ids["with_result"])
	require.NoError(t, err)
	require.Equal(t, jobs.StateCompleted, row.State)
	require.JSONEq(t, `{"sent":5}`, string(row.Result))
	row, err = client.GetJob(b.Ctx, ids["plain"])
	require.NoError(t, err)
	require.Equal(t, jobs.StateCompleted, row.State)
	require.Nil(t, row.Result, "a handler without a result stores none")
	row, err = client.GetJob(b.Ctx, acked.ID)
	require.NoError(t, err)
	require.Equal(t, jobs.StateCompleted, row.State, "AckTx keeps history too, in the handler's transaction")
	for _, id := range []int64{ids["never"], other.ID} {
		_, err = client.GetJob(b.Ctx, id)
		require.ErrorIs(t, err, hopper.ErrNotFound, "not kept: its kind says never, or its queue keeps none")
	}

	// Expired rows and old dead jobs are pruned by PruneOnce (every
	// worker's sweep interval runs it); a worker prunes the dead jobs of
	// its own queues.
	dead := b.enqueueDead(t)
	_, err = b.Pool.Exec(b.Ctx, "UPDATE hopper_job_history SET keep_until = now() - interval '1 second' WHERE id = $1", ids["plain"])
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, "UPDATE hopper_dead_jobs SET died_at = now() - interval '2 hours', queue = 'not_kept' WHERE id = $1", dead)
	require.NoError(t, err)
	history, deadPruned := r.w.PruneOnce(b.Ctx)
	require.EqualValues(t, 1, history)
	require.EqualValues(t, 1, deadPruned)
	_, err = client.GetJob(b.Ctx, ids["plain"])
	require.ErrorIs(t, err, hopper.ErrNotFound)
	_, err = client.GetJob(b.Ctx, dead)
	require.ErrorIs(t, err, hopper.ErrNotFound)
	_, err = client.GetJob(b.Ctx, ids["with_result"])
	require.NoError(t, err, "not expired: kept")
}

// enqueueDead puts a job straight into the dead table (cancelled).
func (b *bundle) enqueueDead(t *testing.T) int64 {
	t.Helper()
	res, err := kind(t, "doomed").Enqueue(b.Ctx, b.Pool, Task{}, jobs.Queue("nobody"))
	require.NoError(t, err)
	require.NoError(t, hopper.NewClient(b.Pool).CancelJob(b.Ctx, res.ID))
	return res.ID
}

func waitDead(t *testing.T, b *bundle, id int64) (d db.HopperDeadJob) {
	t.Helper()
	testdb.WaitFor(t, "job dead", func() (ok bool) { d, ok = b.dead(t, id); return ok })
	return d
}
