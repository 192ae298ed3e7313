package worker_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// TestConnectionsKilled: every backend connection of the worker is killed
// with pg_terminate_backend, several times, while it works. It reconnects
// by itself and every job is done; none is lost.
func TestConnectionsKilled(t *testing.T) {
	b := setup(t)
	wpool := b.taggedPool(t) // only the worker's sessions die

	k := kind(t, "survivor")
	const total = 3000
	_, err := k.EnqueueMany(b.Ctx, b.Pool, jobs.Items(make([]Task, total)...))
	require.NoError(t, err)

	var ran atomic.Int64
	w, err := worker.New(wpool, fast(worker.Config{Queues: map[string]int{"default": 4}}))
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, k, func(ctx context.Context, _ *jobs.Job[Task]) error {
		ran.Add(1)
		time.Sleep(time.Millisecond) // keep it busy long enough to be interrupted
		return nil
	}))
	ctx, cancel := context.WithCancel(b.Ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()

	killed := 0
	for round := 0; round < 5; round++ {
		testdb.WaitFor(t, "progress since the last kill", func() bool { return ran.Load() > int64(round+1)*total/10 })
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx,
			"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", b.Schema).Scan(&n))
		killed += n
	}
	require.Positive(t, killed)
	testdb.WaitFor(t, "every job done despite the kills", func() bool { live, _ := b.Totals(t); return live == 0 })
	cancel()
	require.NoError(t, <-errc)
	require.GreaterOrEqual(t, ran.Load(), int64(total))
	_, dead := b.Totals(t)
	require.Zero(t, dead)
	t.Logf("killed %d sessions; %d runs for %d jobs", killed, ran.Load(), total)
}

func TestMetricsCount(t *testing.T) {
	b := setup(t)
	k := kind(t, "metered")
	_, err := k.EnqueueMany(b.Ctx, b.Pool, jobs.Items(Task{N: 1}, Task{N: 2}, Task{N: 3}))
	require.NoError(t, err)
	_, err = k.Enqueue(b.Ctx, b.Pool, Task{N: -1}, jobs.MaxAttempts(1))
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	start(t, b, worker.Config{Registerer: reg}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(_ context.Context, j *jobs.Job[Task]) error {
			if j.Payload.N < 0 {
				return errBoom
			}
			return nil
		}))
	})
	testdb.WaitFor(t, "all recorded", func() bool {
		live, dead := b.Totals(t)
		return live == 0 && dead == 1
	})
	// The counters move once the worker has read each statement's reply,
	// a moment after the database shows its effect.
	testdb.WaitFor(t, "counters", func() bool {
		return metricValue(t, reg, `hopper_job_outcomes_total{outcome="done"}`) == 3 &&
			metricValue(t, reg, `hopper_job_outcomes_total{outcome="dead"}`) == 1
	})
	require.Equal(t, 4.0, metricValue(t, reg, "hopper_jobs_claimed_total"))
}

// TestMetricsEndpoint scrapes the endpoint a worker serves.
func TestMetricsEndpoint(t *testing.T) {
	b := setup(t)
	k := kind(t, "scraped")
	_, err := k.EnqueueMany(b.Ctx, b.Pool, jobs.Items(Task{}, Task{}))
	require.NoError(t, err)
	_, err = k.Enqueue(b.Ctx, b.Pool, Task{}, jobs.Queue("idle"), jobs.Delay(time.Hour))
	require.NoError(t, err)
	r := start(t, b, worker.Config{MetricsAddr: ":0", MetricsInterval: 20 * time.Millisecond}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(context.Context, *jobs.Job[Task]) error { return nil }))
	})
	testdb.WaitFor(t, "listening", func() bool { return r.w.MetricsAddr() != "" })
	require.True(t, strings.HasPrefix(r.w.MetricsAddr(), "127.0.0.1:"), "bound to loopback by default")
	var body string
	testdb.WaitFor(t, "both jobs counted and the gauges refreshed", func() bool {
		body = scrape(r.w)
		return strings.Contains(body, `hopper_job_outcomes_total{kind="scraped",outcome="done",queue="default"} 2`) &&
			strings.Contains(body, `hopper_queue_jobs{kind="scraped",queue="idle",state="scheduled"} 1`)
	})
	for _, want := range []string{"hopper_handler_duration_seconds_bucket", "hopper_job_wait_seconds", "hopper_queue_oldest_ready_seconds", "go_goroutines"} {
		require.Contains(t, body, want)
	}
}

// TestListenReconnects: the wake-up session is killed; the worker opens a
// new one, so a job is picked up by a wake-up, not the (hour-long) poll.
func TestListenReconnects(t *testing.T) {
	b := setup(t)
	wpool := b.taggedPool(t)
	k := kind(t, "woken")
	var ran atomic.Int64
	w, err := worker.New(wpool, fast(worker.Config{PollInterval: time.Hour}))
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, k, func(context.Context, *jobs.Job[Task]) error { ran.Add(1); return nil }))
	ctx, cancel := context.WithCancel(b.Ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-errc) }()

	listening := func() int64 {
		var n int64
		require.NoError(t, b.Pool.QueryRow(b.Ctx,
			"SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE '%LISTEN hopper_jobs%'", b.Schema).Scan(&n))
		return n
	}
	testdb.WaitFor(t, "listening", func() bool { return listening() == 1 })
	_, err = b.Pool.Exec(b.Ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE '%LISTEN hopper_jobs%'", b.Schema)
	require.NoError(t, err)
	testdb.WaitFor(t, "listening again", func() bool { return listening() == 1 })

	for i := 1; i <= 3; i++ {
		_, err = k.Enqueue(b.Ctx, b.Pool, Task{N: i})
		require.NoError(t, err)
		testdb.WaitFor(t, "woken, not polled", func() bool { return ran.Load() == int64(i) })
	}
}

// TestExtendLease: a handler pushes its own lease for a long step; once the
// job is no longer its own, ExtendLease says so.
func TestExtendLease(t *testing.T) {
	b := setup(t)
	k := kind(t, "extended")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{}, jobs.MaxAttempts(3))
	require.NoError(t, err)
	extended := make(chan error, 2)
	proceed := make(chan struct{})
	start(t, b, worker.Config{SweepInterval: time.Hour}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			if j.Attempt > 1 {
				return nil
			}
			extended <- worker.ExtendLease(ctx, j, 2*time.Hour)
			<-proceed
			extended <- worker.ExtendLease(ctx, j, time.Hour)
			return nil
		}))
	})
	require.NoError(t, <-extended)
	j := b.job(t, res.ID)
	require.WithinDuration(t, time.Now().Add(2*time.Hour), *j.LeaseUntil, time.Minute)
	// (TestExtendLeaseSurvivesHeartbeats shows the heartbeat keeps it.)

	b.takeAway(t, j)
	close(proceed)
	require.ErrorIs(t, <-extended, worker.ErrLeaseLost)
	err = worker.ExtendLease(context.Background(), &jobs.Job[Task]{ID: j.ID}, time.Hour)
	require.ErrorContains(t, err, "pass the handler's context", "outside a handler there is no lease to extend")
}
