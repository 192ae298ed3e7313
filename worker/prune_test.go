package worker

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
)

// The pruner deletes a completed job once its keep has passed and, with a
// dead retention, a dead job past it; the rows of workers gone for longer
// than workerRowsKept go too, at most once per workerPruneEvery, while a
// live worker's row stays.
func TestPrunerDeletesWhatExpired(t *testing.T) {
	t.Parallel()
	b := newPassBed(t)
	m := newPruner(b.q, b.log, &Config{SweepInterval: time.Hour, DeadRetention: time.Millisecond})

	b.enqueue(time.Now().Add(-time.Second))
	b.enqueue(time.Now().Add(-time.Second))
	rows := b.claim("w", 60_000)
	require.Len(t, rows, 2)
	kept, buried := rows[0], rows[1]
	_, err := b.q.AckBatchKeep(b.ctx, db.AckBatchKeepParams{Ids: []int64{kept.ID}, Attempts: []int32{kept.Attempt},
		KeepMs: []int64{1}, Results: []json.RawMessage{nil}})
	require.NoError(t, err)
	_, err = b.q.NackBatch(b.ctx, db.NackBatchParams{Ids: []int64{buried.ID}, Attempts: []int32{buried.Attempt},
		Actions: []string{"dead"}, Messages: []string{"bad"}, BackoffsMs: []int64{0}, Reasons: []string{"permanent"}})
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond) // past the keep and the retention
	history, dead := m.pruneOnce(b.ctx)
	require.Equal(t, int64(1), history)
	require.Equal(t, int64(1), dead)
	_, err = b.q.GetDead(b.ctx, buried.ID)
	require.Error(t, err, "the dead job is gone")

	for _, id := range []string{"long-gone", "live"} {
		_, err := b.q.RegisterWorker(b.ctx, db.RegisterWorkerParams{ID: id, Host: "h", Pid: 1, HopperVersion: "test",
			Queues: []string{"default"}, StaleAfterMs: 3000})
		require.NoError(t, err)
	}
	_, err = b.tdb.Pool.Exec(b.ctx, "UPDATE hopper_workers SET last_seen_at = now() - interval '2 days' WHERE id = 'long-gone'")
	require.NoError(t, err)
	m.pruneWorkers(b.ctx)
	left, err := b.q.ListWorkers(b.ctx, nil)
	require.NoError(t, err)
	require.Len(t, left, 1)
	require.Equal(t, "live", left[0].ID)

	_, err = b.tdb.Pool.Exec(b.ctx, "UPDATE hopper_workers SET last_seen_at = now() - interval '2 days'")
	require.NoError(t, err)
	m.pruneWorkers(b.ctx)
	left, err = b.q.ListWorkers(b.ctx, nil)
	require.NoError(t, err)
	require.Len(t, left, 1, "a second prune within workerPruneEvery does not run")
}
