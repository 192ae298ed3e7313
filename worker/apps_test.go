package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// Two applications share one schema (docs/operating.md, "Several
// applications in one schema"): app A and app B, each with its own kinds,
// queues, schedules and settings, deployed apart. What one app's workers
// do must not remove, fire, stall or misreport the other's jobs and
// schedules. These tests run the two side by side, one concern each.

// In a queue both apps serve, a worker claims only the kinds it handles:
// B's jobs wait for B, untouched (no attempt, no error), while A runs its
// own jobs behind them; they run once B starts.
func TestAppsClaimOnlyTheirKindsInASharedQueue(t *testing.T) {
	b := setup(t)
	kindA, kindB := kind(t, "app_a.report"), kind(t, "app_b.invoice")
	var bIDs []int64
	for range 5 {
		res, err := kindB.Enqueue(b.Ctx, b.Pool, Task{})
		require.NoError(t, err)
		bIDs = append(bIDs, res.ID)
	}
	aRes, err := kindA.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)

	var doneA, doneB atomic.Int64
	start(t, b, worker.Config{ID: "app-a-0"}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, kindA, func(context.Context, *jobs.Job[Task]) error { doneA.Add(1); return nil }))
	})
	testdb.WaitFor(t, "A ran its job, enqueued behind B's", func() bool { return doneA.Load() == 1 })
	for _, id := range bIDs {
		j := b.job(t, id)
		require.Equal(t, "pending", j.State, "B's job waits for B")
		require.Zero(t, j.Attempt, "A never claimed it")
		require.JSONEq(t, `[]`, string(j.Errors))
	}
	testdb.WaitFor(t, "A's job acknowledged (no history kept)", func() bool {
		_, err := hopper.NewClient(b.Pool).GetJob(b.Ctx, aRes.ID)
		return errors.Is(err, hopper.ErrNotFound)
	})

	start(t, b, worker.Config{ID: "app-b-0"}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, kindB, func(context.Context, *jobs.Job[Task]) error { doneB.Add(1); return nil }))
	})
	testdb.WaitFor(t, "B ran its jobs", func() bool { return doneB.Load() == int64(len(bIDs)) })
}

// A redeploys (stops, changes its schedules, starts again) while B runs:
// B's schedule keeps its definition and next slot, is never stale, and is
// fired by B only, even when triggered while only A runs; A's retired
// schedule turns stale, and B's never does.
func TestAppsRedeployLeavesTheOtherAppsSchedules(t *testing.T) {
	b := setup(t)
	client := hopper.NewClient(b.Pool)
	kindA, kindB := kind(t, "app_a.chore"), kind(t, "app_b.chore")
	var firedB atomic.Int64
	appA := func(retired bool, expr string) *running {
		return start(t, b, worker.Config{ID: "app-a-0", Queues: map[string]int{"app_a": 1}, ScheduleStaleAfter: 2 * time.Second},
			func(w *worker.Worker) {
				require.NoError(t, worker.Handle(w, kindA, func(context.Context, *jobs.Job[Task]) error { return nil }))
				require.NoError(t, worker.Schedule(w, "app_a.hourly", kindA, expr, func(time.Time) Task { return Task{} },
					worker.EnqueueOptions(jobs.Queue("app_a"))))
				if retired {
					require.NoError(t, worker.Schedule(w, "app_a.retired", kindA, "@every 1h", func(time.Time) Task { return Task{} },
						worker.EnqueueOptions(jobs.Queue("app_a"))))
				}
			})
	}
	appB := func() *running {
		return start(t, b, worker.Config{ID: "app-b-0", Queues: map[string]int{"app_b": 1}},
			func(w *worker.Worker) {
				require.NoError(t, worker.Handle(w, kindB, func(context.Context, *jobs.Job[Task]) error { firedB.Add(1); return nil }))
				require.NoError(t, worker.Schedule(w, "app_b.nightly", kindB, "0 3 * * *", func(time.Time) Task { return Task{} },
					worker.EnqueueOptions(jobs.Queue("app_b"))))
			})
	}
	schedule := func(name string) hopper.ScheduleInfo {
		t.Helper()
		all, err := client.ListSchedules(b.Ctx)
		require.NoError(t, err)
		for _, s := range all {
			if s.Name == name {
				return s
			}
		}
		t.Fatalf("no schedule %q", name)
		return hopper.ScheduleInfo{}
	}

	a := appA(true, "@every 1h")
	rb := appB()
	testdb.WaitFor(t, "both apps defined their schedules", func() bool {
		all, err := client.ListSchedules(b.Ctx)
		return err == nil && len(all) == 3
	})
	before := schedule("app_b.nightly")

	// A's deploy: stopped, its schedules changed, started again.
	a.stop()
	appA(false, "@every 2h")
	testdb.WaitFor(t, "A's retired schedule is stale", func() bool { return schedule("app_a.retired").Stale })
	after := schedule("app_b.nightly")
	require.False(t, after.Stale, "B runs: its schedule is not stale")
	require.Equal(t, before.Expression, after.Expression)
	require.Equal(t, before.NextFireAt, after.NextFireAt, "A's deploy did not move B's schedule")
	require.Equal(t, "@every 2h", schedule("app_a.hourly").Expression, "A's new definition is in force")

	// B stops: a trigger of B's schedule waits for B, A does not fire it.
	rb.stop()
	_, err := client.TriggerSchedule(b.Ctx, "app_b.nightly")
	require.NoError(t, err)
	_, err = client.TriggerSchedule(b.Ctx, "app_a.hourly")
	require.NoError(t, err)
	testdb.WaitFor(t, "A fired its own trigger: it looked", func() bool { return schedule("app_a.hourly").TriggeredAt == nil })
	require.NotNil(t, schedule("app_b.nightly").TriggeredAt, "B's trigger waits for B")
	var inB int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT count(*) FROM hopper_jobs WHERE queue = 'app_b'").Scan(&inB))
	require.Zero(t, inB, "A enqueued nothing of B's")
	appB()
	testdb.WaitFor(t, "B fired its trigger", func() bool { return firedB.Load() == 1 })
}

// Schedule names are the schema's: when A's deploy defines a schedule of
// the name B runs, A's definition (the newer) is put in force, and A warns
// that it replaced a running definition of another kind. (A deploy that
// keeps the kind replaces its own silently.)
func TestAppsScheduleOfTheSameNameIsLogged(t *testing.T) {
	b := setup(t)
	kindA, kindB := kind(t, "app_a.nightly"), kind(t, "app_b.nightly")
	define := func(id, queue string, k *jobs.Kind[Task], logs *logLines) *running {
		return start(t, b, worker.Config{ID: id, Queues: map[string]int{queue: 1}, Logger: slog.New(logs)}, func(w *worker.Worker) {
			require.NoError(t, worker.Handle(w, k, noopTask))
			require.NoError(t, worker.Schedule(w, "nightly", k, "0 3 * * *", func(time.Time) Task { return Task{} },
				worker.EnqueueOptions(jobs.Queue(queue))))
		})
	}
	logsB, logsA, logsA2 := &logLines{}, &logLines{}, &logLines{}
	define("app-b-0", "app_b", kindB, logsB)
	testdb.WaitFor(t, "B started", func() bool { return len(logsB.with("hopper worker started")) > 0 })
	a := define("app-a-0", "app_a", kindA, logsA)
	testdb.WaitFor(t, "A started", func() bool { return len(logsA.with("hopper worker started")) > 0 })
	warned := logsA.with("replaced one of another kind")
	require.Len(t, warned, 1)
	require.Contains(t, warned[0], "replaced_kind=app_b.nightly")
	all, err := hopper.NewClient(b.Pool).ListSchedules(b.Ctx)
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.Equal(t, "app_a.nightly", all[0].Kind, "the later deploy's definition is in force")

	// A's next deploy, with the same definition: nothing replaced.
	a.stop()
	define("app-a-0", "app_a", kindA, logsA2)
	testdb.WaitFor(t, "A started again", func() bool { return len(logsA2.with("hopper worker started")) > 0 })
	require.Empty(t, logsA2.with("replaced one of another kind"))
}

// Each app's dead jobs are kept as long as its own DeadRetention says: A
// (an hour) prunes its own dead jobs, never B's (kept until purged), in
// the default partition and in the time partitions alike. A's own dead
// jobs in a partition B's jobs hold are deleted row by row; the partition
// goes once nothing of B's is left in it.
func TestAppsDeadRetentionIsEachAppsOwn(t *testing.T) {
	b := setup(t)
	client := hopper.NewClient(b.Pool)
	a, err := worker.New(b.Pool, fast(worker.Config{ID: "app-a-0", Queues: map[string]int{"app_a": 1}, DeadRetention: 80 * time.Minute}))
	require.NoError(t, err)
	require.NoError(t, worker.Handle(a, kind(t, "app_a.job"), func(context.Context, *jobs.Job[Task]) error { return nil }))
	// B sets no retention: its dead jobs stay until purged.
	twoHoursAgo := time.Now().Add(-2 * time.Hour)
	deadA := testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{State: testfactory.Dead, Queue: "app_a", Kind: "app_a.job", FinishedAt: &twoHoursAgo})
	deadB := testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{State: testfactory.Dead, Queue: "app_b", Kind: "app_b.job", FinishedAt: &twoHoursAgo})

	_, pruned := a.PruneOnce(b.Ctx)
	require.EqualValues(t, 1, pruned, "A's own dead job, past A's retention")
	_, err = client.GetJob(b.Ctx, deadA.ID)
	require.ErrorIs(t, err, hopper.ErrNotFound)
	_, err = client.GetJob(b.Ctx, deadB.ID)
	require.NoError(t, err, "B's dead job is B's to prune: kept")

	// A time partition of jobs that died 2½ hours ago (made by hand as
	// hopper_dead_partitions_ensure makes them, which makes them from now
	// on only): expired for A's retention. A job of each app dies in it.
	const part = "hopper_dead_jobs_apps_past"
	for _, stmt := range []string{
		"CREATE TABLE " + part + " (LIKE hopper_dead_jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS)",
		"ALTER TABLE " + part + " ADD PRIMARY KEY (id)",
		"ALTER TABLE hopper_dead_jobs ATTACH PARTITION " + part + " FOR VALUES FROM (now() - interval '3 hours') TO (now() - interval '2 hours')",
		"INSERT INTO hopper_dead_partitions (name, lower_at, upper_at) VALUES ('" + part + "', now() - interval '3 hours', now() - interval '2 hours')",
	} {
		_, err := b.Pool.Exec(b.Ctx, stmt)
		require.NoError(t, err, stmt)
	}
	inPartA := testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{State: testfactory.Dead, Queue: "app_a", Kind: "app_a.job", FinishedAt: &twoHoursAgo})
	inPartB := testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{State: testfactory.Dead, Queue: "app_b", Kind: "app_b.job", FinishedAt: &twoHoursAgo})
	_, err = b.Pool.Exec(b.Ctx, "UPDATE hopper_dead_jobs SET partition_at = now() - interval '150 minutes' WHERE id = ANY($1)",
		[]int64{inPartA.ID, inPartB.ID})
	require.NoError(t, err)
	var table string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT tableoid::regclass::text FROM hopper_dead_jobs WHERE id = $1", inPartB.ID).Scan(&table))
	require.Equal(t, part, table)
	partitionExists := func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT count(*) FROM hopper_dead_partitions WHERE name = $1", part).Scan(&n))
		return n == 1
	}

	_, pruned = a.PruneOnce(b.Ctx)
	_, err = client.GetJob(b.Ctx, inPartB.ID)
	require.NoError(t, err, "B's dead job in the expired partition is kept, and so is the partition")
	require.True(t, partitionExists())
	require.EqualValues(t, 1, pruned, "A's own job in it, deleted row by row")
	_, err = client.GetJob(b.Ctx, inPartA.ID)
	require.ErrorIs(t, err, hopper.ErrNotFound)

	purged, err := client.PurgeDeadJobs(b.Ctx, hopper.DeadFilter{Queue: "app_b"})
	require.NoError(t, err)
	require.EqualValues(t, 2, purged)
	a.PruneOnce(b.Ctx)
	require.False(t, partitionExists(), "nothing of B's left in it: the partition is dropped whole")
}

// A completed job is kept as long as the worker that acknowledged it
// said (its keep_until, written with it): A, keeping its history an hour,
// prunes its own expired jobs and none of B's, kept for a week.
func TestAppsHistoryIsKeptByEachAppsKeep(t *testing.T) {
	b := setup(t)
	client := hopper.NewClient(b.Pool)
	kindA, kindB := kind(t, "app_a.kept"), kind(t, "app_b.kept")
	ra := start(t, b, worker.Config{ID: "app-a-0", Queues: map[string]int{"app_a": 1},
		KeepHistoryByQueue: map[string]time.Duration{"app_a": time.Hour}, SweepInterval: time.Hour},
		func(w *worker.Worker) {
			require.NoError(t, worker.Handle(w, kindA, func(context.Context, *jobs.Job[Task]) error { return nil }))
		})
	rb := start(t, b, worker.Config{ID: "app-b-0", Queues: map[string]int{"app_b": 1},
		KeepHistoryByQueue: map[string]time.Duration{"app_b": 7 * 24 * time.Hour}, SweepInterval: time.Hour},
		func(w *worker.Worker) {
			require.NoError(t, worker.Handle(w, kindB, func(context.Context, *jobs.Job[Task]) error { return nil }))
		})
	resA, err := kindA.Enqueue(b.Ctx, b.Pool, Task{}, jobs.Queue("app_a"))
	require.NoError(t, err)
	resB, err := kindB.Enqueue(b.Ctx, b.Pool, Task{}, jobs.Queue("app_b"))
	require.NoError(t, err)
	testdb.WaitFor(t, "both completed and kept", func() bool {
		rowA, errA := client.GetJob(b.Ctx, resA.ID)
		rowB, errB := client.GetJob(b.Ctx, resB.ID)
		return errA == nil && errB == nil && rowA.State == jobs.StateCompleted && rowB.State == jobs.StateCompleted
	})
	// Two hours pass: A's keep is over, B's is not.
	_, err = b.Pool.Exec(b.Ctx, "UPDATE hopper_job_history SET keep_until = keep_until - interval '2 hours' WHERE id = ANY($1)",
		[]int64{resA.ID, resB.ID})
	require.NoError(t, err)
	rb.stop() // B is down for a deploy meanwhile
	pruned, _ := ra.w.PruneOnce(b.Ctx)
	require.EqualValues(t, 1, pruned, "A's own completed job")
	_, err = client.GetJob(b.Ctx, resA.ID)
	require.ErrorIs(t, err, hopper.ErrNotFound)
	_, err = client.GetJob(b.Ctx, resB.ID)
	require.NoError(t, err, "B's is kept for B's week")
}

// A worker hands back the jobs of gone workers, B's included, but never
// those of a live B worker that beats more slowly than A: each worker is
// judged by its own stale window.
func TestAppsReleaseOnlyGoneWorkersJobs(t *testing.T) {
	b := setup(t)
	kindA, kindB := kind(t, "app_a.quick"), kind(t, "app_b.slow")
	release := make(chan struct{})
	var startedB atomic.Int64
	start(t, b, worker.Config{ID: "app-b-0", Queues: map[string]int{"app_b": 1}, BeatInterval: 300 * time.Millisecond},
		func(w *worker.Worker) {
			require.NoError(t, worker.Handle(w, kindB, func(ctx context.Context, _ *jobs.Job[Task]) error {
				startedB.Add(1)
				select {
				case <-release:
				case <-ctx.Done():
				}
				return nil
			}))
		})
	held, err := kindB.Enqueue(b.Ctx, b.Pool, Task{}, jobs.Queue("app_b"))
	require.NoError(t, err)
	testdb.WaitFor(t, "B runs its job", func() bool { return startedB.Load() == 1 })

	// A gone worker of B's, with B's stale window, holding a job.
	testfactory.Worker(b.Ctx, t, b.Pool, &testfactory.WorkerOpts{ID: "app-b-gone", Queues: []string{"app_b"},
		StaleAfter: 900 * time.Millisecond, LastBeatAgo: time.Hour})
	orphan := testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{State: testfactory.Running, Queue: "app_b", Kind: "app_b.slow",
		LeaseOwner: "app-b-gone", LeaseUntil: testfactory.Ptr(time.Now().Add(time.Hour))})

	start(t, b, worker.Config{ID: "app-a-0", Queues: map[string]int{"app_a": 1}, BeatInterval: 20 * time.Millisecond},
		func(w *worker.Worker) {
			require.NoError(t, worker.Handle(w, kindA, func(context.Context, *jobs.Job[Task]) error { return nil }))
		})
	// Once A has been live for B's stale window it judges B's workers: the
	// gone one's job goes back (B's live worker then runs it).
	testdb.WaitFor(t, "A handed back the gone B worker's job", func() bool {
		return b.job(t, orphan.ID).State == "pending"
	})
	j := b.job(t, held.ID)
	require.Equal(t, "running", j.State, "the live B worker's job is still its own")
	require.NotNil(t, j.LeaseOwner)
	require.Equal(t, "app-b-0", *j.LeaseOwner)
	close(release)
}

// Pausing a queue of A stops A's jobs only: B's, in its own queue, run.
func TestAppsPauseAQueueOfOneApp(t *testing.T) {
	b := setup(t)
	client := hopper.NewClient(b.Pool)
	kindA, kindB := kind(t, "app_a.task"), kind(t, "app_b.task")
	resA, err := kindA.Enqueue(b.Ctx, b.Pool, Task{}, jobs.Queue("app_a"))
	require.NoError(t, err)
	_, err = client.PauseQueue(b.Ctx, "app_a")
	require.NoError(t, err)
	for range 3 {
		_, err := kindB.Enqueue(b.Ctx, b.Pool, Task{}, jobs.Queue("app_b"))
		require.NoError(t, err)
	}
	var doneA, doneB atomic.Int64
	start(t, b, worker.Config{Queues: map[string]int{"app_a": 1}}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, kindA, func(context.Context, *jobs.Job[Task]) error { doneA.Add(1); return nil }))
	})
	start(t, b, worker.Config{Queues: map[string]int{"app_b": 1}}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, kindB, func(context.Context, *jobs.Job[Task]) error { doneB.Add(1); return nil }))
	})
	testdb.WaitFor(t, "B's jobs ran", func() bool { return doneB.Load() == 3 })
	require.Zero(t, doneA.Load())
	require.Equal(t, "pending", b.job(t, resA.ID).State, "A's queue is paused")
	_, err = client.ResumeQueue(b.Ctx, "app_a")
	require.NoError(t, err)
	testdb.WaitFor(t, "A's job ran once resumed", func() bool { return doneA.Load() == 1 })
}

// The gauges a worker reads from the database describe the whole schema,
// the other app's queues included, and say the same on every worker of
// every app; the stale-schedule gauge counts no schedule of a running
// app.
func TestAppsMetricsDescribeTheWholeSchema(t *testing.T) {
	b := setup(t)
	kindA, kindB := kind(t, "app_a.m"), kind(t, "app_b.m")
	for range 2 {
		_, err := kindB.Enqueue(b.Ctx, b.Pool, Task{}, jobs.Queue("app_b"))
		require.NoError(t, err)
	}
	_, err := hopper.NewClient(b.Pool).PauseQueue(b.Ctx, "app_b")
	require.NoError(t, err)
	start(t, b, worker.Config{Queues: map[string]int{"app_b": 1}}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, kindB, func(context.Context, *jobs.Job[Task]) error { return nil }))
		require.NoError(t, worker.Schedule(w, "app_b.nightly", kindB, "0 3 * * *", func(time.Time) Task { return Task{} },
			worker.EnqueueOptions(jobs.Queue("app_b"))))
	})
	a := start(t, b, worker.Config{Queues: map[string]int{"app_a": 1}, MetricsAddr: "127.0.0.1:0", MetricsInterval: 50 * time.Millisecond},
		func(w *worker.Worker) {
			require.NoError(t, worker.Handle(w, kindA, func(context.Context, *jobs.Job[Task]) error { return nil }))
		})
	testdb.WaitFor(t, "A's endpoint shows B's queue", func() bool {
		body := scrape(a.w)
		return strings.Contains(body, `hopper_queue_depth{queue="app_b",state="ready"} 2`) &&
			strings.Contains(body, `hopper_queue_paused{queue="app_b"} 1`) &&
			strings.Contains(body, "\nhopper_schedules_stale 0\n")
	})
}
