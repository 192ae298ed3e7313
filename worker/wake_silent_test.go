package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/metricsum"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

var wakeSilent = jobs.MustDefine[Task]("wake_silent_test")

// TestWakeClaimsWhatASilentSchemaKept: Worker.Wake, which package shard's
// worker calls for the wake-ups a shard keeps silent. In a silent schema
// (migration 34's switch on, as shard.Create sets it in each shard) an
// enqueue sends no NOTIFY, so a worker polling once an hour finds the job
// when Wake is called, not before the test's limit. The first job, there
// before the start, shows the worker up and past its first claim, and the
// listener's gauge that the wake-up it sends once subscribed is sent (the
// claim that one starts may still find the second job, in a rare race:
// the test then passes without Wake's help, never fails for it).
func TestWakeClaimsWhatASilentSchemaKept(t *testing.T) {
	b := setup(t)
	_, err := b.Pool.Exec(b.Ctx, `CREATE OR REPLACE FUNCTION hopper_silent() RETURNS boolean
		LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT true $$`)
	require.NoError(t, err)
	ran := make(chan int, 2)
	_, err = wakeSilent.Enqueue(b.Ctx, b.Pool, Task{N: 1})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	r := start(t, b, worker.Config{PollInterval: time.Hour, Queues: map[string]int{jobs.DefaultQueue: 4}, Registerer: reg}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, wakeSilent, func(_ context.Context, j *jobs.Job[Task]) error {
			ran <- j.Payload.N
			return nil
		}))
	})
	require.Equal(t, 1, <-ran, "the job enqueued before the start")
	// The listener wakes every queue once it has subscribed (wake-ups may
	// have been missed before): the second job comes after that.
	testdb.WaitFor(t, "the listener subscribed", func() bool { return metricsum.Sum("hopper_listener_up", reg) == 1 })

	_, err = wakeSilent.Enqueue(b.Ctx, b.Pool, Task{N: 2})
	require.NoError(t, err)
	r.w.Wake("no such queue") // a queue the worker does not serve: nothing
	r.w.Wake()
	select {
	case n := <-ran:
		require.Equal(t, 2, n)
	case <-time.After(time.Minute):
		t.Fatal("Wake did not have the worker claim the job the silent schema did not announce")
	}
}
