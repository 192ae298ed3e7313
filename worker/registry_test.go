package worker_test

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testdb"
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
// heartbeats (the helper's lease is 1s: a beat every 333ms); a sweep prunes
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

// TestRegistryStableID: a worker restarted under a stable ID replaces the
// row its crashed previous run left; two workers running with one ID (a
// mistake, refused in a later version) keep one row fresh between them, and
// neither's clean stop removes the row while the other runs for longer than
// a beat.
func TestRegistryStableID(t *testing.T) {
	b := setup(t)
	_, err := b.Queries.RegisterWorker(b.Ctx, db.RegisterWorkerParams{
		ID: "reg-stable", Host: "elsewhere", Pid: 1, Queues: []string{"old"}, StaleAfterMs: 1000,
	})
	require.NoError(t, err)
	require.NoError(t, b.Queries.RegisterQueues(b.Ctx, []string{"old"}))
	require.Equal(t, 1, b.liveWorkers(t)["old"])
	_, err = b.Pool.Exec(b.Ctx, "UPDATE hopper_workers SET started_at = now() - interval '1 hour', last_seen_at = now() - interval '1 hour'")
	require.NoError(t, err)
	require.Equal(t, 0, b.liveWorkers(t)["old"], "the crashed run's row is stale")

	cfg := worker.Config{ID: "reg-stable", LeaseDuration: 300 * time.Millisecond, Queues: map[string]int{"new": 1}}
	register := func(w *worker.Worker) { require.NoError(t, worker.Handle(w, kind(t, "registry.stable"), noop)) }
	first := start(t, b, cfg, register)
	testdb.WaitFor(t, "the restarted worker registered", func() bool { return b.liveWorkers(t)["new"] == 1 })
	var host string
	var firstStarted time.Time
	started := func() time.Time {
		var at time.Time
		require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT host, started_at FROM hopper_workers").Scan(&host, &at))
		return at
	}
	firstStarted = started()
	require.NotEqual(t, "elsewhere", host, "the row is the new run's")
	require.WithinDuration(t, time.Now(), firstStarted, time.Minute)
	require.Equal(t, []string{"reg-stable"}, b.workerRows(t))
	require.Equal(t, 0, b.liveWorkers(t)["old"])

	second := start(t, b, cfg, register)
	testdb.WaitFor(t, "the second wrote the row", func() bool { return started().After(firstStarted) })
	require.Equal(t, []string{"reg-stable"}, b.workerRows(t), "one row per id")
	require.Equal(t, 1, b.liveWorkers(t)["new"])

	// The second wrote the row last, so its clean stop removes it; the
	// first writes it again at its next beat.
	second.stop()
	testdb.WaitFor(t, "the first keeps the row", func() bool { return b.liveWorkers(t)["new"] == 1 })
	first.stop()
	require.Empty(t, b.workerRows(t), "the first removed the row it wrote again")
	require.Equal(t, 0, b.liveWorkers(t)["new"])
}
