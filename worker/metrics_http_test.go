package worker_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/buildinfo"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// TestMetricsScheduleGauges: the endpoint counts the schedules no running
// worker defines (stale) and the paused ones. A stale schedule that is
// paused counts as paused only: pausing a schedule retired from the code
// is how an operator quiets the stale-schedules alert.
func TestMetricsScheduleGauges(t *testing.T) {
	b := setup(t)
	client := hopper.NewClient(b.Pool)
	defines := func(names ...string) func(*worker.Worker) {
		return func(w *worker.Worker) {
			for _, name := range names {
				require.NoError(t, worker.Schedule(w, name, tick, "@every 1h", slotOf))
			}
			require.NoError(t, worker.Handle(w, tick, func(context.Context, *jobs.Job[Tick]) error { return nil }))
		}
	}
	listed := func() map[string]hopper.ScheduleInfo {
		list, err := client.ListSchedules(b.Ctx)
		require.NoError(t, err)
		byName := map[string]hopper.ScheduleInfo{}
		for _, s := range list {
			byName[s.Name] = s
		}
		return byName
	}

	// An old deploy defines two schedules, then stops for good.
	old := start(t, b, worker.Config{ScheduleStaleAfter: time.Second}, defines("retired", "parked"))
	testdb.WaitFor(t, "the old deploy's schedules", func() bool { return len(listed()) == 2 })
	old.stop()

	// The running deploy defines two others, and serves the metrics.
	r := start(t, b, worker.Config{MetricsAddr: ":0", MetricsInterval: 20 * time.Millisecond}, defines("live", "held"))
	testdb.WaitFor(t, "the running deploy's schedules", func() bool { return len(listed()) == 4 })
	for _, name := range []string{"parked", "held"} {
		_, err := client.PauseSchedule(b.Ctx, name)
		require.NoError(t, err)
	}
	testdb.WaitFor(t, "the old deploy's schedules stale", func() bool {
		s := listed()
		return s["retired"].Stale && s["parked"].Stale
	})
	s := listed()
	require.False(t, s["live"].Stale, "defined by a running worker")
	require.False(t, s["held"].Stale, "defined by a running worker")

	testdb.WaitFor(t, "the schedule gauges", func() bool {
		body := scrape(r.w)
		return strings.Contains(body, "\nhopper_schedules_stale 1\n") && strings.Contains(body, "\nhopper_schedules_paused 2\n")
	})

	// The retired schedule is paused too: nothing is stale any more.
	_, err := client.PauseSchedule(b.Ctx, "retired")
	require.NoError(t, err)
	testdb.WaitFor(t, "the schedule gauges after the pause", func() bool {
		body := scrape(r.w)
		return strings.Contains(body, "\nhopper_schedules_stale 0\n") && strings.Contains(body, "\nhopper_schedules_paused 3\n")
	})
}

// TestMetricsQueuePaused: the endpoint says which queues are paused, so
// that alerts on waiting work can leave them out.
func TestMetricsQueuePaused(t *testing.T) {
	b := setup(t)
	client := hopper.NewClient(b.Pool)
	k := kind(t, "parked")
	_, err := k.Enqueue(b.Ctx, b.Pool, Task{}, jobs.Queue("held"))
	require.NoError(t, err)
	_, err = client.PauseQueue(b.Ctx, "held") // before any worker runs
	require.NoError(t, err)
	_, err = k.Enqueue(b.Ctx, b.Pool, Task{}, jobs.Queue("open"), jobs.Delay(time.Hour))
	require.NoError(t, err)
	r := start(t, b, worker.Config{
		Queues:      map[string]int{"held": 1, "open": 1},
		MetricsAddr: ":0", MetricsInterval: 20 * time.Millisecond,
	}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(context.Context, *jobs.Job[Task]) error { return nil }))
	})
	testdb.WaitFor(t, "the queue gauges", func() bool {
		body := scrape(r.w)
		return strings.Contains(body, `hopper_queue_paused{queue="held"} 1`) &&
			strings.Contains(body, `hopper_queue_paused{queue="open"} 0`) &&
			strings.Contains(body, `hopper_queue_jobs{kind="parked",queue="held",state="ready"} 1`)
	})
	_, err = client.ResumeQueue(b.Ctx, "held")
	require.NoError(t, err)
	testdb.WaitFor(t, "the held job done", func() bool {
		body := scrape(r.w)
		return strings.Contains(body, `hopper_queue_paused{queue="open"} 0`) &&
			!strings.Contains(body, `hopper_queue_paused{queue="held"}`)
	})
}

// TestMetricsQueueDepth: hopper_queue_depth counts every known queue's
// ready, scheduled and running jobs, served by this worker or not.
func TestMetricsQueueDepth(t *testing.T) {
	b := setup(t)
	client := hopper.NewClient(b.Pool)
	k := kind(t, "deep")
	for range 2 {
		_, err := k.Enqueue(b.Ctx, b.Pool, Task{}, jobs.Queue("held"))
		require.NoError(t, err)
	}
	_, err := client.PauseQueue(b.Ctx, "held") // its jobs stay ready
	require.NoError(t, err)
	_, err = k.Enqueue(b.Ctx, b.Pool, Task{}, jobs.Queue("open"), jobs.Delay(time.Hour))
	require.NoError(t, err)
	_, err = k.Enqueue(b.Ctx, b.Pool, Task{}, jobs.Queue("unserved"))
	require.NoError(t, err)
	later := time.Now().Add(time.Hour)
	testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{Queue: "busy", State: testfactory.Running, LeaseUntil: &later})

	r := start(t, b, worker.Config{
		Queues:      map[string]int{"held": 1, "open": 1},
		MetricsAddr: ":0", MetricsInterval: 20 * time.Millisecond,
	}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(context.Context, *jobs.Job[Task]) error { return nil }))
	})
	testdb.WaitFor(t, "the depth gauges", func() bool {
		body := scrape(r.w)
		return strings.Contains(body, `hopper_queue_depth{queue="held",state="ready"} 2`) &&
			strings.Contains(body, `hopper_queue_depth{queue="open",state="scheduled"} 1`) &&
			strings.Contains(body, `hopper_queue_depth{queue="open",state="ready"} 0`) &&
			strings.Contains(body, `hopper_queue_depth{queue="unserved",state="ready"} 1`) &&
			strings.Contains(body, `hopper_queue_depth{queue="busy",state="running"} 1`)
	})
}

// TestMetricsSuspended: hopper_jobs_suspended counts the scheduled jobs
// in a durable wait per queue and wait; a wait whose time has passed, or
// a job whose wait was woken, is not counted.
func TestMetricsSuspended(t *testing.T) {
	b := setup(t)
	client := hopper.NewClient(b.Pool)
	until, past := time.Now().Add(time.Hour), time.Now().Add(-time.Minute)
	suspended := func(queue, kind string, until *time.Time) int64 {
		id := testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{Queue: queue, State: testfactory.Scheduled, RunAt: until}).ID
		testfactory.Step(b.Ctx, t, b.Pool, id, nil)
		testfactory.Step(b.Ctx, t, b.Pool, id, &testfactory.StepOpts{Position: 1, Kind: kind, State: "waiting", Until: until})
		return id
	}
	suspended("mail", "sleep", &until)
	woken := suspended("mail", "sleep", &until)
	suspended("mail", "event", &until)
	suspended("bill", "event", &until)
	suspended("bill", "event", &past) // over: it runs at its next claim
	r := start(t, b, worker.Config{
		Queues:      map[string]int{"unserved": 1},
		MetricsAddr: ":0", MetricsInterval: 20 * time.Millisecond,
	}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, kind(t, "idle"), func(context.Context, *jobs.Job[Task]) error { return nil }))
	})
	testdb.WaitFor(t, "the suspended gauge", func() bool {
		body := scrape(r.w)
		return strings.Contains(body, `hopper_jobs_suspended{queue="mail",wait="sleep"} 2`) &&
			strings.Contains(body, `hopper_jobs_suspended{queue="mail",wait="event"} 1`) &&
			strings.Contains(body, `hopper_jobs_suspended{queue="bill",wait="event"} 1`)
	})
	_, err := client.WakeJob(b.Ctx, woken)
	require.NoError(t, err)
	testdb.WaitFor(t, "the woken job no longer counted", func() bool {
		return strings.Contains(scrape(r.w), `hopper_jobs_suspended{queue="mail",wait="sleep"} 1`)
	})
}

// get fetches a path of the worker's metrics server.
func get(t *testing.T, w *worker.Worker, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + w.MetricsAddr() + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// TestMetricsHealthEndpoints: the metrics server answers /healthz (the
// process serves) and /readyz (the worker runs and reads the database)
// for an orchestrator's probes.
func TestMetricsHealthEndpoints(t *testing.T) {
	b := setup(t)
	r := start(t, b, worker.Config{MetricsAddr: ":0", MetricsInterval: 20 * time.Millisecond}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, kind(t, "health"), noop))
	})
	testdb.WaitFor(t, "the metrics server", func() bool { return r.w.MetricsAddr() != "" })
	code, body := get(t, r.w, "/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)
	testdb.WaitFor(t, "ready", func() bool {
		code, _ := get(t, r.w, "/readyz")
		return code == http.StatusOK
	})
	code, body = get(t, r.w, "/readyz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)
}

// TestMetricsBuildInfo: a worker says which build it is, in the registry
// it was given and at its own endpoint, so that a rollout's two builds
// tell apart on a dashboard: hopper_build_info, always 1, labelled with
// Hopper's version, the program, its commit and that commit's time, and Go.
func TestMetricsBuildInfo(t *testing.T) {
	b := setup(t)
	build := buildinfo.Read()
	want := fmt.Sprintf("hopper_build_info{go_version=%q,program=%q,revision=%q,vcs_time=%q,version=%q} 1",
		build.Go, build.Program, build.Commit(), build.Time, build.Version)

	reg := prometheus.NewRegistry()
	r := start(t, b, worker.Config{Registerer: reg, MetricsAddr: ":0"}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, tick, func(context.Context, *jobs.Job[Tick]) error { return nil }))
	})
	families, err := reg.Gather()
	require.NoError(t, err)
	var found bool
	for _, f := range families {
		if f.GetName() != "hopper_build_info" {
			continue
		}
		require.Len(t, f.GetMetric(), 1)
		m := f.GetMetric()[0]
		require.InDelta(t, 1.0, m.GetGauge().GetValue(), 0)
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		require.Equal(t, map[string]string{"version": build.Version, "program": build.Program, "revision": build.Commit(),
			"vcs_time": build.Time, "go_version": build.Go}, labels)
		found = true
	}
	require.True(t, found, "hopper_build_info in the worker's registry")
	// A test binary records no commit, and the gauge says so.
	require.Equal(t, buildinfo.Unstamped, build.Commit())
	testdb.WaitFor(t, "hopper_build_info at the endpoint", func() bool { return strings.Contains(scrape(r.w), "\n"+want+"\n") })
}
