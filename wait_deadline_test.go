package hopper_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// TestWaitJobDeadlineSaysWhy: when the caller's deadline ends WaitJob,
// the error wraps context.DeadlineExceeded and says what the job still
// waits for, read once at the deadline: its handler on a worker, a sleep,
// an event, its time, the job ahead of it in its sequence, a worker for
// its queue, or its paused queue's resume.
func TestWaitJobDeadlineSaysWhy(t *testing.T) {
	b := setup(t)
	w, err := worker.New(b.Pool, worker.Config{
		Queues:       map[string]int{jobs.DefaultQueue: 8, "paused": 1},
		PollInterval: 20 * time.Millisecond, Logger: quiet,
	})
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, report, func(ctx context.Context, j *jobs.Job[Email]) error {
		switch j.Payload.To {
		case "sleep":
			return worker.Sleep(ctx, j, "nap", time.Hour)
		case "await":
			_, err := worker.AwaitEvent[struct{}](ctx, j, "order.paid", time.Hour)
			return err
		}
		<-ctx.Done() // "block": runs until the worker stops
		return ctx.Err()
	}))
	ctx, stop := context.WithCancel(b.Ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	defer func() {
		stop()
		require.NoError(t, <-errc)
	}()
	testdb.WaitFor(t, "the worker's queues registered", func() bool {
		_, err := b.client.PauseQueue(b.Ctx, "paused")
		return err == nil
	})

	running := b.enqueue(t, report, "block", jobs.Sequence("s"))
	behind := b.enqueue(t, report, "block", jobs.Sequence("s"))
	sleeping := b.enqueue(t, report, "sleep")
	awaiting := b.enqueue(t, report, "await")
	later := b.enqueue(t, report, "block", jobs.Delay(time.Hour))
	unserved := b.enqueue(t, email, "nobody serves mail")
	paused := b.enqueue(t, report, "block", jobs.Queue("paused"))
	suspended := func(id int64) func() bool {
		return func() bool {
			row, err := b.client.GetJob(b.Ctx, id)
			require.NoError(t, err)
			steps, err := b.client.ListJobSteps(b.Ctx, id)
			require.NoError(t, err)
			return hopper.SuspensionOf(row.State, steps, time.Now()).Wait != ""
		}
	}
	testdb.WaitFor(t, "the first job of the sequence running", func() bool { return b.state(t, running) == jobs.StateRunning })
	testdb.WaitFor(t, "the sleeper asleep", suspended(sleeping))
	testdb.WaitFor(t, "the waiter waiting", suspended(awaiting))

	tests := []struct {
		name string
		id   int64
		want string
	}{
		{"running", running, "is running on worker " + w.ID() + " (attempt 1 of "},
		{"behind in its sequence", behind, "is waiting for the job ahead of it in its sequence"},
		{"sleeping", sleeping, "is sleeping until "},
		{"awaiting an event", awaiting, `is awaiting the event "order.paid" until `},
		{"delayed", later, `is scheduled to run at `},
		{"no worker for its queue", unserved, `is still pending in queue "mail", due since `},
		{"no worker for its queue, said", unserved, "no running worker serves the queue"},
		{"paused queue", paused, `the queue is paused (since `},
	}
	for _, tt := range tests {
		wctx, cancel := context.WithTimeout(b.Ctx, 50*time.Millisecond)
		_, err := b.client.WaitJob(wctx, tt.id)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, tt.name)
		require.ErrorContains(t, err, tt.want, tt.name)
		t.Logf("%s: %v", tt.name, err)
	}

	// A cancelled wait is the caller's choice: nothing to explain.
	cctx, cancel := context.WithCancel(b.Ctx)
	cancel()
	_, err = b.client.WaitJob(cctx, later)
	require.ErrorIs(t, err, context.Canceled)
	require.NotContains(t, err.Error(), "scheduled to run")
}
