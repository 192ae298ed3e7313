package worker

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// The held jobs against PostgreSQL: a beat extends the leases still this
// worker's; a job swept away meanwhile is lost (its handler cancelled with
// ErrLeaseLost, out of the set); an operator's cancel notice cancels the
// handler with ErrCancelled.
func TestHeldJobsExtendAndLose(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tdb := testdb.New(t)
	w, err := New(tdb.Pool, Config{Queues: map[string]int{"default": 10}, LeaseDuration: time.Minute, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	r := newTestRun(t, ctx, w)
	p, held := r.producers["default"], r.held

	take := func(runAt time.Time, leaseMs int64) (*heldJob, context.Context) {
		t.Helper()
		_, err := w.q.Enqueue(ctx, db.EnqueueParams{Queue: "default", Kind: "k", Version: 1,
			Payload: json.RawMessage(`{}`), RunAt: runAt, MaxAttempts: 3})
		require.NoError(t, err)
		sent := time.Now()
		rows, err := w.q.Dequeue(ctx, db.DequeueParams{Owner: w.ID(), LeaseMs: leaseMs, Queue: "default",
			AfterPriority: -1, Kinds: []string{"k"}, MaxVersions: []int32{1}, MaxJobs: 1})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		c := held.add(rows[0], p, false, sent, 0, nil)
		hctx, hcancel := context.WithCancelCause(context.Background())
		t.Cleanup(func() { hcancel(nil) })
		c.begin(hcancel, time.Now(), 0)
		return c, hctx
	}
	kept, keptCtx := take(time.Now().Add(-2*time.Second), 60_000)
	swept, sweptCtx := take(time.Now().Add(-time.Second), 1)
	require.Equal(t, 2, held.len())

	time.Sleep(20 * time.Millisecond) // the second lease expires
	requeued, _ := w.sweeper.SweepOnce(ctx)
	require.Equal(t, 1, requeued)

	extended, err := held.extend(ctx, held.snapshot(), time.Minute)
	require.NoError(t, err)
	require.Equal(t, 1, extended)
	require.ErrorIs(t, context.Cause(sweptCtx), ErrLeaseLost)
	require.True(t, swept.is(claimLost))
	require.Nil(t, held.get(swept.id, swept.attempt), "a lost job leaves the set")
	require.NoError(t, keptCtx.Err(), "the job still ours runs on")
	require.Same(t, kept, held.get(kept.id, kept.attempt))

	held.cancelNotice(kept.id, kept.attempt+1) // another attempt: not ours
	require.NoError(t, keptCtx.Err())
	held.cancelNotice(kept.id, kept.attempt)
	require.ErrorIs(t, context.Cause(keptCtx), ErrCancelled)
	require.Zero(t, held.len())
}
