package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/buildinfo"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// liveWorkers is how many live workers serve each queue, as ListQueues
// says.
func (b *bundle) liveWorkers(t *testing.T) map[string]int {
	t.Helper()
	queues, err := hopper.NewClient(b.Pool).ListQueues(b.Ctx)
	require.NoError(t, err)
	out := map[string]int{}
	for _, q := range queues {
		out[q.Name] = q.Workers
	}
	return out
}

// workerRows lists the ids of the rows in hopper_workers.
func (b *bundle) workerRows(t *testing.T) []string {
	t.Helper()
	var ids []string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM hopper_workers").Scan(&ids))
	return ids
}

func noop(context.Context, *jobs.Job[Task]) error { return nil }

// TestRegistryCountsLiveWorkers: a running worker counts for each queue it
// serves, from its start; a clean stop removes its row at once; a worker
// that only fires schedules serves no queue.
func TestRegistryCountsLiveWorkers(t *testing.T) {
	b := setup(t)
	k := kind(t, "registry.count")
	a := start(t, b, worker.Config{ID: "reg-a", Queues: map[string]int{"only-a": 1, "shared": 1}}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, noop))
	})
	start(t, b, worker.Config{ID: "reg-b", Queues: map[string]int{"shared": 2}}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, noop))
	})
	start(t, b, worker.Config{ID: "reg-schedules", Queues: map[string]int{"timed": 1}}, func(w *worker.Worker) {
		require.NoError(t, worker.Schedule(w, "registry.daily", k, "@daily", func(time.Time) Task { return Task{} }))
	})
	testdb.WaitFor(t, "three workers registered", func() bool { return len(b.workerRows(t)) == 3 })
	require.Equal(t, map[string]int{"only-a": 1, "shared": 2, "timed": 0}, b.liveWorkers(t))

	var host string
	var pid int
	var queues []string
	var fresh bool
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `
		SELECT host, pid, queues, last_seen_at + '1 millisecond'::interval * stale_after_ms > now()
		FROM hopper_workers WHERE id = 'reg-a'`).Scan(&host, &pid, &queues, &fresh))
	wantHost, _ := os.Hostname()
	require.Equal(t, wantHost, host)
	require.Equal(t, os.Getpid(), pid)
	require.Equal(t, []string{"only-a", "shared"}, queues, "sorted")
	require.True(t, fresh)

	a.stop()
	require.Equal(t, []string{"reg-b", "reg-schedules"}, b.workerRows(t), "a clean stop removes the row before Run returns")
	require.Equal(t, map[string]int{"only-a": 0, "shared": 1, "timed": 0}, b.liveWorkers(t))
}

// TestRegistryKilledWorkerGoesStale: a worker process killed with SIGKILL
// leaves its row, which stops counting once the worker has missed three
// beats (the helper's lease is 1s: a beat every 333ms); a sweep prunes
// the row once it has been gone for long.
func TestRegistryKilledWorkerGoesStale(t *testing.T) {
	b := setup(t)
	cmd := startHelper(t, b, "reg-doomed")
	testdb.WaitFor(t, "the helper serves the default queue", func() bool { return b.liveWorkers(t)[jobs.DefaultQueue] == 1 })
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	testdb.WaitFor(t, "the killed worker no longer counts", func() bool { return b.liveWorkers(t)[jobs.DefaultQueue] == 0 })
	require.Equal(t, []string{"reg-doomed"}, b.workerRows(t), "the row is kept: the worker did not stop cleanly")

	// A live worker's row is never pruned, whatever the retention.
	start(t, b, worker.Config{ID: "reg-live"}, func(w *worker.Worker) { require.NoError(t, worker.Handle(w, kind(t, "registry.live"), noop)) })
	testdb.WaitFor(t, "the live worker serves the default queue", func() bool { return b.liveWorkers(t)[jobs.DefaultQueue] == 1 })
	n, err := b.Queries.PruneWorkers(b.Ctx, db.PruneWorkersParams{GoneForMs: time.Hour.Milliseconds(), MaxWorkers: 10})
	require.NoError(t, err)
	require.Zero(t, n, "gone for a second, not an hour: kept")
	n, err = b.Queries.PruneWorkers(b.Ctx, db.PruneWorkersParams{GoneForMs: 0, MaxWorkers: 10})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, []string{"reg-live"}, b.workerRows(t))
}

// TestRegistryStaleRow: a worker that stops beating (its last beat moved
// back past its stale window, as a stalled process would leave it) stops
// counting, and counts again at its next beat.
func TestRegistryStaleRow(t *testing.T) {
	b := setup(t)
	start(t, b, worker.Config{ID: "reg-stalled", LeaseDuration: 300 * time.Millisecond}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, kind(t, "registry.stalled"), noop))
	})
	testdb.WaitFor(t, "registered", func() bool { return b.liveWorkers(t)[jobs.DefaultQueue] == 1 })
	stale := func() { // the last beat, a minute ago
		_, err := b.Pool.Exec(b.Ctx, "UPDATE hopper_workers SET last_seen_at = now() - interval '1 minute' WHERE id = 'reg-stalled'")
		require.NoError(t, err)
	}
	stale()
	// The worker's next beat can land between the UPDATE and the read: the
	// test makes the row stale again until it reads 0 once.
	testdb.WaitFor(t, "a stale row does not count", func() bool {
		stale()
		return b.liveWorkers(t)[jobs.DefaultQueue] == 0
	})
	testdb.WaitFor(t, "the next beat makes it live again", func() bool { return b.liveWorkers(t)[jobs.DefaultQueue] == 1 })
}

// TestRegistryStableID: a worker restarted under a stable ID takes over
// the row its crashed previous run left (stale, on another host); a second
// Worker started with the ID in the same process is refused at once, and
// the first keeps its row.
func TestRegistryStableID(t *testing.T) {
	b := setup(t)
	testfactory.Worker(b.Ctx, t, b.Pool, &testfactory.WorkerOpts{
		ID: "reg-stable", Host: "elsewhere", Queues: []string{"old"}, StaleAfter: time.Second, LastBeatAgo: time.Hour})
	require.NoError(t, b.Queries.RegisterQueues(b.Ctx, []string{"old"}))
	require.Equal(t, 0, b.liveWorkers(t)["old"], "the crashed run's row is stale")

	cfg := worker.Config{ID: "reg-stable", LeaseDuration: 300 * time.Millisecond, Queues: map[string]int{"new": 1}}
	register := func(w *worker.Worker) { require.NoError(t, worker.Handle(w, kind(t, "registry.stable"), noop)) }
	first := start(t, b, cfg, register)
	testdb.WaitFor(t, "the restarted worker registered", func() bool { return b.liveWorkers(t)["new"] == 1 })
	var host string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT host FROM hopper_workers").Scan(&host))
	require.NotEqual(t, "elsewhere", host, "the row is the new run's")
	require.Equal(t, []string{"reg-stable"}, b.workerRows(t))

	second, err := worker.New(b.Pool, cfg)
	require.NoError(t, err)
	register(second)
	err = second.Run(b.Ctx)
	require.ErrorIs(t, err, worker.ErrWorkerIDInUse)
	require.ErrorContains(t, err, "in this process")
	require.Equal(t, 1, b.liveWorkers(t)["new"], "the first keeps its row")

	first.stop()
	require.Empty(t, b.workerRows(t), "removed at its clean stop")
}

// TestRegistryIDInUseElsewhere: a worker started with the ID of a worker
// process that still beats waits out the holder's stale window, sees it
// beat, and refuses to start, naming the holder; the holder keeps its
// jobs. Once the holder is killed, the same start takes the ID over.
func TestRegistryIDInUseElsewhere(t *testing.T) {
	b := setup(t)
	cmd := startHelper(t, b, "reg-dup")
	testdb.WaitFor(t, "the helper serves the default queue", func() bool { return b.liveWorkers(t)[jobs.DefaultQueue] == 1 })

	cfg := worker.Config{ID: "reg-dup", BeatInterval: 50 * time.Millisecond}
	w, err := worker.New(b.Pool, cfg)
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, kind(t, "registry.dup"), noop))
	err = w.Run(b.Ctx)
	require.ErrorIs(t, err, worker.ErrWorkerIDInUse)
	require.ErrorContains(t, err, fmt.Sprintf("pid %d", cmd.Process.Pid))

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	start(t, b, cfg, func(w *worker.Worker) { require.NoError(t, worker.Handle(w, kind(t, "registry.dup2"), noop)) })
	testdb.WaitFor(t, "the new worker took the ID over", func() bool {
		var pid int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT pid FROM hopper_workers WHERE id = 'reg-dup'").Scan(&pid))
		return pid == os.Getpid()
	})
}

// TestGoneWorkersJobsReleased: a live worker hands back the jobs of a
// worker gone from the registry at its next beat, long before their
// leases end: charged ("worker gone" in the history), run here, and
// counted in hopper_worker_jobs_released_total. A live worker's jobs and
// a gone worker's already released stay as they are.
func TestGoneWorkersJobsReleased(t *testing.T) {
	b := setup(t)
	k := kind(t, "registry.gone")
	testfactory.Worker(b.Ctx, t, b.Pool, &testfactory.WorkerOpts{ID: "crashed", StaleAfter: time.Second, LastBeatAgo: time.Minute})
	testfactory.Worker(b.Ctx, t, b.Pool, &testfactory.WorkerOpts{ID: "busy", StaleAfter: time.Hour})
	hourLease := testfactory.Ptr(time.Now().Add(time.Hour))
	heldBy := func(owner string) int64 {
		return testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{State: testfactory.Running, Kind: k.Name(),
			LeaseOwner: owner, LeaseUntil: hourLease}).ID
	}
	crashedJob, busyJob := heldBy("crashed"), heldBy("busy")

	reg := prometheus.NewRegistry()
	ran := make(chan *jobs.Job[Task], 1)
	start(t, b, worker.Config{BeatInterval: 20 * time.Millisecond, Registerer: reg}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(_ context.Context, j *jobs.Job[Task]) error { ran <- j; return nil }))
	})
	var j *jobs.Job[Task]
	select {
	case j = <-ran:
	case <-b.Ctx.Done():
		require.FailNow(t, "the crashed worker's job did not run")
	}
	require.Equal(t, crashedJob, j.ID)
	h := j.Errors
	require.Len(t, h, 1)
	require.Equal(t, "worker gone", h[0].Error)
	require.Equal(t, "crashed", h[0].Owner)
	require.Equal(t, "running", b.job(t, busyJob).State, "a live worker's job stays its own")
	require.Equal(t, 1.0, metricValue(t, reg, `hopper_worker_jobs_released_total{reason="worker gone"}`))
}

// workerRow is id's row in the registry, as ListWorkers reads it.
func (b *bundle) workerRow(t *testing.T, id string) db.ListWorkersRow {
	t.Helper()
	rows, err := b.Queries.ListWorkers(b.Ctx, &id)
	require.NoError(t, err)
	require.Len(t, rows, 1, "worker %s's row", id)
	return rows[0]
}

// waitBeats waits until id's row has shown n more beats.
func (b *bundle) waitBeats(t *testing.T, id string, n int) {
	t.Helper()
	last := b.workerRow(t, id).LastSeenAt
	for i := range n {
		testdb.WaitFor(t, fmt.Sprintf("beat %d of %s", i+1, id), func() bool {
			seen := b.workerRow(t, id).LastSeenAt
			if seen.After(last) {
				last = seen
				return true
			}
			return false
		})
	}
}

// TestRegistryLookAlikeReplicas: two replicas started at once with one
// stable ID, one host name and one pid (containers running as pid 1, as
// two processes of their own here): the database cannot tell them apart
// by host and pid, yet one holds the ID, its row and its job undisturbed,
// while the other waits out the holder's stale window, sees it beat, and
// fails with ErrWorkerIDInUse.
func TestRegistryLookAlikeReplicas(t *testing.T) {
	b := setup(t)
	res, err := kind(t, "blocking").Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	exits := make(chan int, 2)
	for range 2 {
		_, exited := startWatchedHelper(t, b, "reg-twin", helperLookAlikeEnv+"=replica:1")
		go func() { exits <- <-exited }()
	}
	testdb.WaitFor(t, "one replica refused", func() bool { return len(exits) > 0 })
	require.Equal(t, helperIDInUse, <-exits, "refused with ErrWorkerIDInUse")

	testdb.WaitFor(t, "the holder runs the job", func() bool { return b.job(t, res.ID).State == "running" })
	holder := b.workerRow(t, "reg-twin")
	require.Equal(t, "replica", holder.Host)
	require.EqualValues(t, 1, holder.Pid)
	b.waitBeats(t, "reg-twin", 3)
	require.Empty(t, exits, "the holder still runs")
	now := b.workerRow(t, "reg-twin")
	require.True(t, holder.StartedAt.Equal(now.StartedAt), "the row is the holder's, never taken over")
	require.Nil(t, now.ReleasedAt)
	j := b.job(t, res.ID)
	require.Equal(t, "running", j.State)
	require.EqualValues(t, 1, j.Attempt, "the job was never handed back")
	require.JSONEq(t, "[]", string(j.Errors))
}

// TestRegistryStableIDHealthyStart: a worker started with a stable ID on a
// fresh database hands back its ID's earlier jobs at start (there are
// none), which must not mark its own row released: its first beats report
// no death, and the jobs it claimed before them finish once, done.
func TestRegistryStableIDHealthyStart(t *testing.T) {
	b := setup(t)
	k := kind(t, "registry.fresh")
	enqueueMany(t, b, k, 3)
	logs := &logLines{}
	finish := make(chan struct{})
	var mu sync.Mutex
	outcomes := map[int64]string{}
	w := start(t, b, worker.Config{ID: "reg-fresh", BeatInterval: 300 * time.Millisecond, Logger: slog.New(logs)}, func(w *worker.Worker) {
		worker.ObserveOutcomes(w, func(id int64, attempt int32, outcome string) {
			mu.Lock()
			defer mu.Unlock()
			outcomes[id] = fmt.Sprintf("%s at attempt %d", outcome, attempt)
		})
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, _ *jobs.Job[Task]) error {
			select {
			case <-finish:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}))
	})
	testdb.WaitFor(t, "all three claimed", func() bool { return worker.HeldClaims(w.w) == 3 })
	b.waitBeats(t, "reg-fresh", 3)
	close(finish)
	testdb.WaitFor(t, "all three settled", func() bool { mu.Lock(); defer mu.Unlock(); return len(outcomes) == 3 })
	mu.Lock()
	for id, o := range outcomes {
		require.Equal(t, "done at attempt 1", o, "job %d", id)
	}
	mu.Unlock()
	require.Empty(t, logs.with("taken to be gone"))
	require.Empty(t, logs.with("handed back"))
	row := b.workerRow(t, "reg-fresh")
	require.Nil(t, row.ReleasedAt)
	// The build's version, in the row and in the start log, as a user
	// pinning a release reads it.
	version := buildinfo.Version()
	require.NotEmpty(t, version)
	require.Equal(t, version, row.HopperVersion)
	require.Len(t, logs.with("hopper worker started"), 1)
	require.Contains(t, logs.with("hopper worker started")[0], "version="+version)
	// The program's commit: a test binary records none, and says so.
	require.Contains(t, logs.with("hopper worker started")[0], "commit="+buildinfo.Read().Commit())
}

// TestRegistryOutagePeerKeepsItsJob: after a database restart every row is
// stale, and the first worker back must give a peer whose first beat did
// not get through its whole stale window before it takes the peer's jobs,
// as at any other time. The outage is played by moving every last beat a
// minute back; the peer, a process of its own holding a job, is stopped
// (SIGSTOP) until the first worker back has beaten three times since,
// then resumed: it beats, and keeps its job.
func TestRegistryOutagePeerKeepsItsJob(t *testing.T) {
	b := setup(t)
	res, err := kind(t, "blocking").Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	// Beats every 2s: a stale window of 6s, a lease of 20s.
	peer := startHelper(t, b, "reg-peer", helperBeatEnv+"=2s")
	testdb.WaitFor(t, "the peer runs the job", func() bool { return b.job(t, res.ID).State == "running" })
	start(t, b, worker.Config{ID: "reg-judge", BeatInterval: 50 * time.Millisecond}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, kind(t, "registry.judge"), noop))
	})
	testdb.WaitFor(t, "the judge registered", func() bool { return len(b.workerRows(t)) == 2 })
	b.waitBeats(t, "reg-judge", 1)

	require.NoError(t, peer.Process.Signal(syscall.SIGSTOP))
	_, err = b.Pool.Exec(b.Ctx, "UPDATE hopper_workers SET last_seen_at = now() - interval '1 minute'")
	require.NoError(t, err)
	// The first beat back is late (it judges no one), the next are on
	// time: before the fix the second took the peer's job.
	b.waitBeats(t, "reg-judge", 3)
	require.NoError(t, peer.Process.Signal(syscall.SIGCONT))
	testdb.WaitFor(t, "the peer beats again", func() bool { return !b.workerRow(t, "reg-peer").Gone })

	j := b.job(t, res.ID)
	require.Equal(t, "running", j.State)
	require.EqualValues(t, 1, j.Attempt, "the peer's job was never handed back")
	require.JSONEq(t, "[]", string(j.Errors))
	require.Nil(t, b.workerRow(t, "reg-peer").ReleasedAt)
}

// TestGoneWorkerLogNamesIt: the line that reports a gone worker's jobs
// handed back names that worker, its host and pid, and counts its jobs
// (not only the worker doing the hand-back, whose logger names it).
func TestGoneWorkerLogNamesIt(t *testing.T) {
	b := setup(t)
	testfactory.Worker(b.Ctx, t, b.Pool, &testfactory.WorkerOpts{
		ID: "reg-gone", Host: "gone-host", PID: 4242, StaleAfter: 100 * time.Millisecond, LastBeatAgo: time.Hour})
	for range 2 {
		testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{State: testfactory.Running, Kind: "registry.gone", LeaseOwner: "reg-gone"})
	}
	logs := &logLines{}
	start(t, b, worker.Config{ID: "reg-judge-log", BeatInterval: 20 * time.Millisecond, Logger: slog.New(logs)}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, kind(t, "registry.other"), noop))
	})
	testdb.WaitFor(t, "the gone worker's jobs handed back, and said", func() bool {
		return len(logs.with("handed back the jobs of a gone worker")) > 0
	})
	line := logs.with("handed back the jobs of a gone worker")[0]
	for _, want := range []string{"gone_worker=reg-gone", "gone_host=gone-host", "gone_pid=4242", "jobs=2", "requeued=2", "dead=0"} {
		require.Contains(t, line, want)
	}
}

// TestBeatSlowerThanLeaseWarns: a BeatInterval whose three beats reach
// the lease (the old HeartbeatInterval kept, say: a third of the lease)
// makes the registry no faster than the lease at recovering a crashed
// worker's jobs: the worker says so at start. The default does not.
func TestBeatSlowerThanLeaseWarns(t *testing.T) {
	b := setup(t)
	for _, tc := range []struct {
		cfg  worker.Config
		warn bool
	}{
		{worker.Config{LeaseDuration: 900 * time.Millisecond, BeatInterval: 300 * time.Millisecond}, true},
		{worker.Config{}, false},
	} {
		logs := &logLines{}
		tc.cfg.Logger = slog.New(logs)
		start(t, b, tc.cfg, func(w *worker.Worker) { require.NoError(t, worker.Handle(w, kind(t, "registry.beat"), noop)) })
		testdb.WaitFor(t, "started", func() bool { return len(logs.with("hopper worker started")) > 0 })
		warned := logs.with("BeatInterval makes crash recovery as slow as the lease")
		if !tc.warn {
			require.Empty(t, warned)
			continue
		}
		require.Len(t, warned, 1)
		require.Contains(t, warned[0], "ExtendInterval")
	}
}
