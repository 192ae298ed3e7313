package worker_test

import (
	"context"
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
