package queries_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
)

// TestWorkerRegistry: ListQueues counts, per queue, the workers whose row
// names it and is fresh (last_seen_at + stale_after_ms ahead of now); a
// beat of a missing row says so; a worker removes only its own row; a
// prune takes only rows gone for longer than asked, in bounded batches.
func TestWorkerRegistry(t *testing.T) {
	b := setup(t)
	register := func(id string, queues ...string) time.Time {
		t.Helper()
		started, err := b.Queries.RegisterWorker(b.Ctx, db.RegisterWorkerParams{
			ID: id, Host: "host", Pid: 7, HopperVersion: "v0.1.0", Queues: append([]string{}, queues...), StaleAfterMs: 60_000,
		})
		require.NoError(t, err)
		return started
	}
	counts := func() map[string]int32 {
		t.Helper()
		rows, err := b.Queries.ListQueues(b.Ctx)
		require.NoError(t, err)
		out := map[string]int32{}
		for _, r := range rows {
			out[r.Name] = r.Workers
		}
		return out
	}
	require.NoError(t, b.Queries.RegisterQueues(b.Ctx, []string{"a", "shared", "idle"}))
	register("w-a", "a", "shared")
	startedB := register("w-b", "shared")
	register("w-gone", "shared", "idle")
	register("w-schedules")
	require.Equal(t, map[string]int32{"a": 1, "shared": 3, "idle": 1}, counts())

	// w-gone's last beat was two minutes ago: past its one-minute window.
	_, err := b.Pool.Exec(b.Ctx, "UPDATE hopper_workers SET last_seen_at = now() - interval '2 minutes' WHERE id = 'w-gone'")
	require.NoError(t, err)
	require.Equal(t, map[string]int32{"a": 1, "shared": 2, "idle": 0}, counts())
	n, err := b.Queries.BeatWorker(b.Ctx, "w-gone")
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, map[string]int32{"a": 1, "shared": 3, "idle": 1}, counts(), "a beat makes it live again")
	n, err = b.Queries.BeatWorker(b.Ctx, "w-never")
	require.NoError(t, err)
	require.Zero(t, n, "no row: the worker writes it again")

	// Registering again under an id replaces the row; started_at is kept
	// when given.
	again, err := b.Queries.RegisterWorker(b.Ctx, db.RegisterWorkerParams{ID: "w-b", Host: "other", Pid: 8, Queues: []string{"a"}, StaleAfterMs: 60_000, StartedAt: &startedB})
	require.NoError(t, err)
	require.True(t, again.Equal(startedB))
	require.Equal(t, map[string]int32{"a": 2, "shared": 2, "idle": 1}, counts())

	n, err = b.Queries.RemoveWorker(b.Ctx, db.RemoveWorkerParams{ID: "w-b", StartedAt: startedB.Add(-time.Second)})
	require.NoError(t, err)
	require.Zero(t, n, "another run's row")
	n, err = b.Queries.RemoveWorker(b.Ctx, db.RemoveWorkerParams{ID: "w-b", StartedAt: startedB})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	// Prune: w-a and w-gone gone for a day, w-schedules for a minute.
	_, err = b.Pool.Exec(b.Ctx, `UPDATE hopper_workers SET last_seen_at = CASE WHEN id = 'w-schedules'
		THEN now() - interval '2 minutes' ELSE now() - interval '1 day' END`)
	require.NoError(t, err)
	for range 2 {
		n, err = b.Queries.PruneWorkers(b.Ctx, db.PruneWorkersParams{GoneForMs: time.Hour.Milliseconds(), MaxWorkers: 1})
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "one at a time")
	}
	n, err = b.Queries.PruneWorkers(b.Ctx, db.PruneWorkersParams{GoneForMs: time.Hour.Milliseconds(), MaxWorkers: 1})
	require.NoError(t, err)
	require.Zero(t, n, "gone for a minute only: kept")
	var left []string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT array_agg(id) FROM hopper_workers").Scan(&left))
	require.Equal(t, []string{"w-schedules"}, left)
}
