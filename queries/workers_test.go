package queries_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
		row, err := b.Queries.RegisterWorker(b.Ctx, db.RegisterWorkerParams{
			ID: id, Host: "host-" + id, Pid: 7, HopperVersion: "v0.1.0", Queues: append([]string{}, queues...), StaleAfterMs: 60_000,
		})
		require.NoError(t, err)
		require.False(t, row.TookOver)
		return row.StartedAt
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
	gone := workersOf(t, b)["w-gone"]
	require.True(t, gone.Gone)
	beat, err := b.Queries.BeatWorker(b.Ctx, db.BeatWorkerParams{ID: "w-gone", StartedAt: gone.StartedAt, OnTimeMs: 60_000})
	require.NoError(t, err)
	require.True(t, beat.Found)
	require.False(t, beat.Released, "nobody released it")
	require.False(t, beat.GoneWaiting, "its own previous beat was late: it judges no one this time")
	require.Equal(t, map[string]int32{"a": 1, "shared": 3, "idle": 1}, counts(), "a beat makes it live again")
	beat, err = b.Queries.BeatWorker(b.Ctx, db.BeatWorkerParams{ID: "w-never", StartedAt: gone.StartedAt, OnTimeMs: 60_000})
	require.NoError(t, err)
	require.False(t, beat.Found, "no row: the worker writes it again")
	beat, err = b.Queries.BeatWorker(b.Ctx, db.BeatWorkerParams{ID: "w-gone", StartedAt: gone.StartedAt.Add(-time.Second), OnTimeMs: 60_000})
	require.NoError(t, err)
	require.False(t, beat.Found, "another run's row: not this worker's to refresh")

	// A worker writing its own row again keeps its started_at.
	again, err := b.Queries.RegisterWorker(b.Ctx, db.RegisterWorkerParams{ID: "w-b", Host: "other", Pid: 8, Queues: []string{"a"}, StaleAfterMs: 60_000, StartedAt: &startedB})
	require.NoError(t, err)
	require.True(t, again.StartedAt.Equal(startedB))
	require.Equal(t, map[string]int32{"a": 2, "shared": 2, "idle": 1}, counts())

	n, err := b.Queries.RemoveWorker(b.Ctx, db.RemoveWorkerParams{ID: "w-b", StartedAt: startedB.Add(-time.Second)})
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

// workersOf lists the registry by id.
func workersOf(t *testing.T, b *bundle) map[string]db.ListWorkersRow {
	t.Helper()
	rows, err := b.Queries.ListWorkers(b.Ctx, nil)
	require.NoError(t, err)
	out := map[string]db.ListWorkersRow{}
	for _, r := range rows {
		out[r.ID] = r
	}
	return out
}

// TestRegisterWorkerTakeOver: an id is taken over only from a holder that
// cannot be running: gone. A live holder keeps it, even one with the
// writer's host and pid (containers run as pid 1 and may share a host
// name), and the writer learns so from the missing row.
func TestRegisterWorkerTakeOver(t *testing.T) {
	b := setup(t)
	p := db.RegisterWorkerParams{ID: "pod-0", Host: "node-a", Pid: 1, Queues: []string{"default"}, StaleAfterMs: 60_000}
	first, err := b.Queries.RegisterWorker(b.Ctx, p)
	require.NoError(t, err)
	require.False(t, first.TookOver, "a new id")

	for _, c := range []struct {
		name      string
		host      string
		pid       int32
		staleAgo  bool // the holder's last beat is past its window
		takesOver bool
	}{
		{"a live holder on another host keeps it", "node-b", 1, false, false},
		{"a live holder with another pid keeps it", "node-a", 2, false, false},
		{"a live holder with the same host and pid keeps it", "node-a", 1, false, false},
		{"a gone holder gives it up", "node-b", 9, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.staleAgo {
				_, err := b.Pool.Exec(b.Ctx, "UPDATE hopper_workers SET last_seen_at = now() - interval '2 minutes' WHERE id = 'pod-0'")
				require.NoError(t, err)
			}
			before := workersOf(t, b)["pod-0"]
			q := p
			q.Host, q.Pid = c.host, c.pid
			row, err := b.Queries.RegisterWorker(b.Ctx, q)
			after := workersOf(t, b)["pod-0"]
			if !c.takesOver {
				require.ErrorIs(t, err, pgx.ErrNoRows)
				require.Equal(t, before.Host, after.Host, "the holder's row is untouched")
				require.True(t, before.StartedAt.Equal(after.StartedAt))
				return
			}
			require.NoError(t, err)
			require.True(t, row.TookOver)
			require.Equal(t, c.host, after.Host)
			require.False(t, after.Gone)
			// Put the row back as the first holder's for the next case.
			p.Host, p.Pid = c.host, c.pid
		})
	}
}

// TestReleaseWorkerJobs: the jobs of a gone worker are handed back once,
// charged and fenced; a live worker's only when forced; other owners'
// never; a job on its last attempt goes dead; the gone worker learns it
// was released from its next beat.
func TestReleaseWorkerJobs(t *testing.T) {
	b := setup(t)
	register := func(id string) db.RegisterWorkerRow {
		t.Helper()
		row, err := b.Queries.RegisterWorker(b.Ctx, db.RegisterWorkerParams{ID: id, Host: id, Pid: 1, Queues: []string{"default"}, StaleAfterMs: 60_000})
		require.NoError(t, err)
		return row
	}
	release := func(id *string, force bool) []db.ReleaseWorkerJobsRow {
		t.Helper()
		rows, err := b.Queries.ReleaseWorkerJobs(b.Ctx, db.ReleaseWorkerJobsParams{WorkerID: id, Force: force, Reason: "worker gone", MaxJobs: 2})
		require.NoError(t, err)
		return rows
	}
	goneW := register("gone")
	register("live")
	b.enqueue(t, jobSpec{maxAttempts: 1}) // dies with its worker
	for range 3 {
		b.enqueue(t, jobSpec{})
	}
	b.enqueue(t, jobSpec{})
	goneJobs := b.claim(t, "gone", 4)
	liveJobs := b.claim(t, "live", 1)
	require.Len(t, goneJobs, 4)
	require.Len(t, liveJobs, 1)

	require.Empty(t, release(nil, false), "nobody is gone yet")
	live := "live"
	require.Empty(t, release(&live, false), "a live worker's jobs stay unless forced")

	_, err := b.Pool.Exec(b.Ctx, "UPDATE hopper_workers SET last_seen_at = now() - interval '2 minutes' WHERE id = 'gone'")
	require.NoError(t, err)
	beat, err := b.Queries.BeatWorker(b.Ctx, db.BeatWorkerParams{ID: "live", StartedAt: workersOf(t, b)["live"].StartedAt, OnTimeMs: 60_000})
	require.NoError(t, err)
	require.True(t, beat.GoneWaiting, "a live worker on time sees the gone one")

	// In batches of two: the worker is marked released only by the batch
	// that found fewer than two left.
	var got []db.ReleaseWorkerJobsRow
	for range 3 {
		got = append(got, release(nil, false)...)
	}
	require.Len(t, got, 4)
	require.Empty(t, release(nil, false), "released once")
	dead := 0
	for _, r := range got {
		require.Equal(t, "gone", r.Owner)
		if r.Dead {
			dead++
		}
	}
	require.Equal(t, 1, dead, "the job on its last attempt")
	require.False(t, workersOf(t, b)["gone"].ReleasedAt == nil)
	beat, err = b.Queries.BeatWorker(b.Ctx, db.BeatWorkerParams{ID: "live", StartedAt: workersOf(t, b)["live"].StartedAt, OnTimeMs: 60_000})
	require.NoError(t, err)
	require.False(t, beat.GoneWaiting, "nothing waits: the gone worker was released")

	for _, j := range goneJobs[1:] {
		if j.MaxAttempts == 1 {
			continue
		}
		got := b.job(t, j.ID)
		require.Equal(t, "pending", got.State)
		require.Equal(t, j.Attempt, got.Attempt, "the attempt is the fence: it stays")
		h := history(t, got.Errors)
		require.Len(t, h, 1, "charged: the attempt is recorded")
		require.Equal(t, "worker gone", h[0].Error)
		require.Equal(t, "gone", h[0].Owner)
	}
	// The gone worker's late acks are refused.
	acked, err := b.Queries.AckBatch(b.Ctx, db.AckBatchParams{Ids: ids(goneJobs), Attempts: repeat(int32(1), len(goneJobs))})
	require.NoError(t, err)
	require.Empty(t, acked)
	require.Equal(t, "running", b.job(t, liveJobs[0].ID).State, "other owners keep their claims")

	// The gone worker beats again: it learns it was released, once.
	beat, err = b.Queries.BeatWorker(b.Ctx, db.BeatWorkerParams{ID: "gone", StartedAt: goneW.StartedAt, OnTimeMs: 60_000})
	require.NoError(t, err)
	require.True(t, beat.Found)
	require.True(t, beat.Released)
	beat, err = b.Queries.BeatWorker(b.Ctx, db.BeatWorkerParams{ID: "gone", StartedAt: goneW.StartedAt, OnTimeMs: 60_000})
	require.NoError(t, err)
	require.False(t, beat.Released)

	// An operator's forced release of a live worker.
	rows := release(&live, true)
	require.Len(t, rows, 1)
	require.Equal(t, "pending", b.job(t, liveJobs[0].ID).State)
}
