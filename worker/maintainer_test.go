package worker

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testdb"
)

// The maintainer's passes, run directly on a test schema: the sweep gives
// back an expired lease, the promotion makes a scheduled job that fell due
// ready, both announce what they made ready, and pruning deletes expired
// history and, with a dead retention, old dead jobs.
func TestMaintainerPasses(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tdb := testdb.New(t)
	q := db.New(tdb.Pool)
	met, err := newMetrics(nil)
	require.NoError(t, err)
	var (
		mu        sync.Mutex
		announced = map[string][]int64{}
	)
	cfg := Config{SweepInterval: time.Hour, PollInterval: time.Hour, SweepBatch: 10, DeadRetention: time.Millisecond}
	m := newMaintainer(q, tdb.Pool, func(d db.DBTX) db.DBTX { return d }, slog.New(slog.NewTextHandler(io.Discard, nil)), met, &cfg,
		func(_ context.Context, wk *wakeups, after string) {
			mu.Lock()
			defer mu.Unlock()
			announced[after] = append(announced[after], wk.p.Ids...)
		})

	enqueue := func(runAt time.Time) int64 {
		t.Helper()
		r, err := q.Enqueue(ctx, db.EnqueueParams{Queue: "default", Kind: "k", Version: 1,
			Payload: json.RawMessage(`{}`), RunAt: runAt, MaxAttempts: 3})
		require.NoError(t, err)
		return r.ID
	}
	claim := func(leaseMs int64) []db.HopperJob {
		t.Helper()
		rows, err := q.Dequeue(ctx, db.DequeueParams{Owner: "w", LeaseMs: leaseMs, Queue: "default",
			AfterPriority: -1, Kinds: []string{"k"}, MaxVersions: []int32{1}, MaxJobs: 10})
		require.NoError(t, err)
		return rows
	}

	// Sweep: a lease of 1ms has expired by the time the sweep looks.
	lapsed := enqueue(time.Now().Add(-time.Second))
	require.Len(t, claim(1), 1)
	time.Sleep(20 * time.Millisecond)
	requeued, dead := m.sweepOnce(ctx)
	require.Equal(t, 1, requeued)
	require.Zero(t, dead)
	require.Equal(t, []int64{lapsed}, announced["sweep"])
	j, err := q.GetJob(ctx, lapsed)
	require.NoError(t, err)
	require.Equal(t, "pending", j.State)

	// Promotion: a job scheduled 100ms ahead is due after a short wait.
	soon := enqueue(time.Now().Add(100 * time.Millisecond))
	j, err = q.GetJob(ctx, soon)
	require.NoError(t, err)
	require.Equal(t, "scheduled", j.State)
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, 1, m.promoteOnce(ctx))
	require.Equal(t, []int64{soon}, announced["promotion"])

	// Pruning: both jobs run; one is kept 1ms in the history, one goes dead.
	rows := claim(60_000)
	require.Len(t, rows, 2)
	kept, buried := rows[0], rows[1]
	_, err = q.AckBatchKeep(ctx, db.AckBatchKeepParams{Ids: []int64{kept.ID}, Attempts: []int32{kept.Attempt},
		KeepMs: []int64{1}, Results: []json.RawMessage{nil}})
	require.NoError(t, err)
	_, err = q.NackBatch(ctx, db.NackBatchParams{Ids: []int64{buried.ID}, Attempts: []int32{buried.Attempt},
		Actions: []string{"dead"}, Messages: []string{"bad"}, BackoffsMs: []int64{0}, Reasons: []string{"permanent"}})
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	history, deadPruned := m.pruneOnce(ctx)
	require.Equal(t, int64(1), history)
	require.Equal(t, int64(1), deadPruned)
	_, err = q.GetDead(ctx, buried.ID)
	require.Error(t, err, "the dead job is gone")
}
