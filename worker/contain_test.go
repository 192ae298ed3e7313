package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testdb"
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
			require.NoError(t, hopper.NewClient(b.pool).CancelJob(b.ctx, id))
		}},
		{"lease lost", func(t *testing.T, b *bundle, id int64) { b.takeAway(t, b.job(t, id)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			stuck, quick := kind(t, "stuck"), kind(t, "quick")
			res, err := stuck.Enqueue(b.ctx, b.pool, Task{})
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
				Queues: map[string]int{"default": 1}, HeartbeatInterval: 50 * time.Millisecond,
				AbandonAfter: 100 * time.Millisecond, Registerer: reg, Logger: quiet,
			}, func(w *worker.Worker) {
				must(t, worker.Handle(w, stuck, func(ctx context.Context, j *jobs.Job[Task]) error {
					if j.Attempt == 1 {
						close(started)
						<-unstick // ignores ctx
					}
					return nil
				}, worker.Timeout(time.Hour)))
				must(t, worker.Handle(w, quick, func(ctx context.Context, j *jobs.Job[Task]) error {
					quickRan <- j.ID
					return nil
				}))
			})
			<-started
			tc.take(t, b, res.ID)
			_, err = quick.EnqueueMany(b.ctx, b.pool, jobs.Items(Task{}, Task{}, Task{}))
			require.NoError(t, err)
			ran := map[int64]bool{}
			testdb.WaitFor(t, "the quick jobs ran in the freed slot", func() bool {
				for len(quickRan) > 0 {
					ran[<-quickRan] = true
				}
				return len(ran) == 3
			})
			require.Equal(t, 1.0, metricValue(t, reg, "hopper_handlers_abandoned_total"))
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
			res, err := k.Enqueue(b.ctx, b.pool, Task{}, jobs.MaxAttempts(2))
			require.NoError(t, err)
			acked, cancelled := make(chan struct{}), make(chan struct{})
			reg := prometheus.NewRegistry()
			var seen *outcomes
			start(t, b, worker.Config{
				// No notice of the cancel: the heartbeat finds the row gone
				// while the lease holds, as a worker behind PgBouncer does.
				PollOnly: true, HeartbeatInterval: 20 * time.Millisecond, Registerer: reg, Logger: quiet,
				KeepHistory: map[string]time.Duration{jobs.DefaultQueue: time.Hour},
			}, func(w *worker.Worker) {
				seen = observe(w)
				must(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
					if j.Attempt > 1 {
						return nil
					}
					tx, err := b.pool.Begin(ctx)
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
					if err := waitBeats(ctx, w, 3); err != nil { // the heartbeat sees the row as it is now
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
				require.NoError(t, hopper.NewClient(b.pool).CancelJob(b.ctx, res.ID))
				close(cancelled)
			}
			testdb.WaitFor(t, "the first attempt's outcome", func() bool { return len(seen.of(res.ID, 1)) > 0 })
			require.Equal(t, []string{string(tc.want)}, seen.of(res.ID, 1))
			require.Equal(t, tc.completed, metricValue(t, reg, "hopper_jobs_completed_total"))
			if tc.want == worker.OutcomeCancelled {
				d, ok := b.dead(t, res.ID)
				require.True(t, ok)
				require.Equal(t, string(jobs.StateCancelled), d.State)
			}
		})
	}
}
