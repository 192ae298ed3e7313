package worker

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// completerBed is a completer on a test schema, with the outcomes it
// settled, by job.
type completerBed struct {
	ctx context.Context
	q   *db.Queries
	cp  *completer

	mu      sync.Mutex
	settled map[int64]outcome
}

func newCompleterBed(t *testing.T, batch int) *completerBed {
	return newCompleterBedUntil(t, batch, context.Background())
}

// newCompleterBedUntil is a completer bed whose hard deadline ends with hard.
func newCompleterBedUntil(t *testing.T, batch int, hard context.Context) *completerBed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	tdb := testdb.New(t)
	b := &completerBed{ctx: ctx, q: db.New(tdb.Pool), settled: map[int64]outcome{}}
	cfg := Config{AckBatchSize: batch, AckFlushInterval: 10 * time.Millisecond, LeaseDuration: time.Minute}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	b.cp = newCompleter(b.q, log, &cfg, func(c completion, o outcome) {
		b.mu.Lock()
		defer b.mu.Unlock()
		_, twice := b.settled[c.job.id]
		require.False(t, twice, "job %d settled twice", c.job.id)
		b.settled[c.job.id] = o
	}, newReadOnlyGuard(tdb.Pool, log, readOnlyResetEvery, nil), hard)
	return b
}

// claim enqueues n jobs and claims them as worker "w", returning them held.
func (b *completerBed) claim(t *testing.T, n int) []*heldJob {
	t.Helper()
	for range n {
		_, err := b.q.Enqueue(b.ctx, db.EnqueueParams{Queue: "default", Kind: "k", Version: 1,
			Payload: json.RawMessage(`{}`), RunAt: time.Now().Add(-time.Second), MaxAttempts: 3})
		require.NoError(t, err)
	}
	sent := time.Now()
	rows, err := b.q.Dequeue(b.ctx, db.DequeueParams{Owner: "w", LeaseMs: 60_000, Queue: "default",
		AfterPriority: -1, Kinds: []string{"k"}, MaxVersions: []int32{1}, MaxJobs: int32(n)})
	require.NoError(t, err)
	require.Len(t, rows, n)
	held := make([]*heldJob, n)
	for i, r := range rows {
		held[i] = &heldJob{id: r.ID, attempt: r.Attempt, kind: r.Kind}
		held[i].leaseHeldUntil(sent, time.Minute)
	}
	return held
}

func (b *completerBed) outcomes() map[int64]outcome {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[int64]outcome, len(b.settled))
	for id, o := range b.settled {
		out[id] = o
	}
	return out
}

// The completer records a mixed batch in its statements and settles each
// result with what the database did: acked jobs are gone, a retried one
// waits for its backoff, a dead one is dead, and a result for an attempt
// the worker no longer holds is refused.
func TestCompleterRecordsOutcomesExactly(t *testing.T) {
	t.Parallel()
	b := newCompleterBed(t, 3) // the five results take two batches
	held := b.claim(t, 5)
	// An attempt the database never gave this worker.
	stale := &heldJob{id: held[4].id, attempt: held[4].attempt + 1, kind: "k"}

	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); b.cp.run(stop) }()
	require.True(t, b.cp.push(completion{job: held[0], act: actAck}))
	require.True(t, b.cp.push(completion{job: held[1], act: actAck}))
	require.True(t, b.cp.push(completion{job: held[2], act: actRetry, message: "boom", backoff: time.Hour}))
	require.True(t, b.cp.push(completion{job: held[3], act: actDead, message: "bad", deadReason: "permanent"}))
	require.True(t, b.cp.push(completion{job: stale, act: actAck}))
	testdb.WaitFor(t, "every result settled", func() bool { return len(b.outcomes()) == 5 })
	close(stop)
	<-done
	require.False(t, b.cp.push(completion{job: held[0], act: actAck}), "a stopped completer takes no result")

	got := b.outcomes()
	require.Equal(t, outcomeDone, got[held[0].id])
	require.Equal(t, outcomeDone, got[held[1].id])
	require.Equal(t, outcomeFailed, got[held[2].id])
	require.Equal(t, outcomeDead, got[held[3].id])
	require.Equal(t, outcomeRefused, got[held[4].id])

	for _, c := range held[:2] {
		_, err := b.q.GetJob(b.ctx, c.id)
		require.ErrorIs(t, err, pgx.ErrNoRows, "acked job %d is deleted", c.id)
	}
	retried, err := b.q.GetJob(b.ctx, held[2].id)
	require.NoError(t, err)
	require.Equal(t, "scheduled", retried.State)
	require.True(t, retried.RunAt.After(time.Now().Add(50*time.Minute)), "it waits for its backoff")
	dead, err := b.q.GetDead(b.ctx, held[3].id)
	require.NoError(t, err)
	require.Equal(t, "dead", dead.State)
	_, err = b.q.GetJob(b.ctx, held[3].id)
	require.ErrorIs(t, err, pgx.ErrNoRows, "the dead job left hopper_jobs")
	still, err := b.q.GetJob(b.ctx, held[4].id)
	require.NoError(t, err)
	require.Equal(t, "running", still.State, "the refused result changed nothing")
}

// Results still waiting when stop closes are recorded before run returns.
func TestCompleterFlushesAtStop(t *testing.T) {
	t.Parallel()
	b := newCompleterBed(t, 100)
	b.cp.flushEvery = time.Hour // nothing is flushed before the stop
	held := b.claim(t, 3)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); b.cp.run(stop) }()
	for _, c := range held {
		require.True(t, b.cp.push(completion{job: c, act: actAck}))
	}
	close(stop)
	<-done
	got := b.outcomes()
	require.Len(t, got, 3)
	for _, c := range held {
		require.Equal(t, outcomeDone, got[c.id])
	}
}

// Past the hard deadline nothing is sent: a result no try was made for is
// unrecorded, and one whose earlier try may have committed is unconfirmed.
func TestCompleterGivesUpAfterTheHardDeadline(t *testing.T) {
	t.Parallel()
	hard, end := context.WithCancel(context.Background())
	b := newCompleterBedUntil(t, 10, hard)
	held := b.claim(t, 2)
	end()
	b.cp.flush([]completion{{job: held[0], act: actAck}, {job: held[1], act: actAck, ambiguous: true}})
	got := b.outcomes()
	require.Equal(t, outcomeUnrecorded, got[held[0].id])
	require.Equal(t, outcomeUnconfirmed, got[held[1].id])
	for _, c := range held {
		j, err := b.q.GetJob(b.ctx, c.id)
		require.NoError(t, err)
		require.Equal(t, "running", j.State, "nothing was sent")
	}
}
