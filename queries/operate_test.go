package queries_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
)

// TestPausedQueueClaimsNothing: a pause holds from its commit for every
// claim of the queue, other queues go on, and a resume brings the jobs
// back in their order. The pause check runs once per claim, before the
// scan: a paused queue's claim reads no index at all.
func TestPausedQueueClaimsNothing(t *testing.T) {
	b := setup(t)
	first := b.enqueue(t, jobSpec{})
	b.enqueue(t, jobSpec{})
	b.enqueue(t, jobSpec{queue: "other"})

	p, err := b.Queries.PauseQueue(b.Ctx, "default")
	require.NoError(t, err)
	require.False(t, p.WasPaused)
	again, err := b.Queries.PauseQueue(b.Ctx, "default")
	require.NoError(t, err)
	require.True(t, again.WasPaused, "pausing twice changes nothing")
	require.True(t, again.PausedAt.Equal(p.PausedAt), "and keeps the first pause's time")

	require.Empty(t, b.claim(t, "w", 10), "a paused queue gives nothing")
	other, err := b.Queries.Dequeue(b.Ctx, db.DequeueParams{Queue: "other", Kinds: []string{"k"}, MaxVersions: []int32{1}, MaxJobs: 10, Owner: "w", LeaseMs: 1000})
	require.NoError(t, err)
	require.Len(t, other, 1, "other queues go on")

	plan := explainDequeue(t, b, "default")
	require.Contains(t, plan, "One-Time Filter", "the pause is checked once, before the scan:\n%s", plan)
	require.Contains(t, plan, "never executed", "a paused queue's claim reads no job index:\n%s", plan)

	was, err := b.Queries.ResumeQueue(b.Ctx, "default")
	require.NoError(t, err)
	require.True(t, was.WasPaused)
	require.NotNil(t, was.PausedAt, "a resume says when the queue had been paused")
	was, err = b.Queries.ResumeQueue(b.Ctx, "default")
	require.NoError(t, err)
	require.False(t, was.WasPaused, "resuming a running queue changes nothing")
	require.Nil(t, was.PausedAt)
	_, err = b.Queries.ResumeQueue(b.Ctx, "nobody")
	require.ErrorContains(t, err, "no rows", "no row for a queue hopper_queues does not have")

	got := b.claim(t, "w", 10)
	require.Len(t, got, 2)
	require.Equal(t, first, got[0].ID, "resumed in claim order")
}

// explainDequeue runs the real Dequeue statement (from queries/claim.sql)
// under EXPLAIN ANALYZE, in a transaction it rolls back.
func explainDequeue(t *testing.T, b *bundle, queue string) string {
	t.Helper()
	statements, _ := readStatements(t)
	dequeue := positional(statements["Dequeue"])
	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.Ctx) }()
	rows, err := tx.Query(b.Ctx, "EXPLAIN (ANALYZE, COSTS OFF) "+dequeue.sql, dequeue.args(t, map[string]any{
		"owner": "probe", "lease_ms": int64(60_000), "queue": queue,
		"after_priority": int16(-1), "after_run_at": time.Time{}, "after_id": int64(0),
		"max_versions": []int32{1}, "kinds": []string{"k"}, "max_jobs": int32(10),
	})...)
	require.NoError(t, err)
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		lines = append(lines, line)
	}
	require.NoError(t, rows.Err())
	return strings.Join(lines, "\n")
}

// TestAckKeepsHistoryAndPrunes: AckBatchKeep deletes like AckBatch and keeps
// the jobs asked for, with their result, until keep_until; PruneHistory
// removes expired rows in bounded batches; ClaimFates finds a kept job.
func TestAckKeepsHistoryAndPrunes(t *testing.T) {
	b := setup(t)
	for range 5 {
		b.enqueue(t, jobSpec{uniqueKey: ""})
	}
	js := b.claim(t, "w", 5)
	require.Len(t, js, 5)
	p := db.AckBatchKeepParams{
		Ids: ids(js), Attempts: repeat(int32(1), 5),
		// Three kept (one briefly), one with a result, two not kept.
		KeepMs:  []int64{3_600_000, 1, 1, 0, 0},
		Results: []json.RawMessage{json.RawMessage(`{"sent":3}`), nil, nil, nil, nil},
	}
	before := b.dbNow(t)
	acked, err := b.Queries.AckBatchKeep(b.Ctx, p)
	require.NoError(t, err)
	require.Len(t, acked, 5, "every claim acknowledged")
	live, _ := b.Totals(t)
	require.Zero(t, live)

	var kept int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT count(*) FROM hopper_job_history").Scan(&kept))
	require.Equal(t, 3, kept)
	h, err := b.Queries.FindJob(b.Ctx, js[0].ID)
	require.NoError(t, err)
	require.Equal(t, "completed", h.State)
	require.JSONEq(t, `{"sent":3}`, string(h.Result))
	require.False(t, h.FinishedAt.Before(before))
	noResult, err := b.Queries.FindJob(b.Ctx, js[1].ID)
	require.NoError(t, err)
	require.Nil(t, noResult.Result, "no result stored as NULL")

	fates, err := b.Queries.ClaimFates(b.Ctx, db.ClaimFatesParams{Ids: ids(js[:1]), Attempts: []int32{1}})
	require.NoError(t, err)
	require.Equal(t, int32(1), *fates[0].HistoryAttempt, "a kept job is found in the history")

	// A stale claim cannot complete into the history.
	again, err := b.Queries.AckBatchKeep(b.Ctx, p)
	require.NoError(t, err)
	require.Empty(t, again)

	// The two 1ms rows expire; the hour-long one stays. Batches are bounded.
	deadline := time.Now().Add(time.Minute)
	var pruned int64
	for pruned < 2 && time.Now().Before(deadline) {
		n, err := b.Queries.PruneHistory(b.Ctx, db.PruneHistoryParams{MaxJobs: 1})
		require.NoError(t, err)
		require.LessOrEqual(t, n, int64(1), "bounded by max_jobs")
		pruned += n
	}
	require.EqualValues(t, 2, pruned)
	n, err := b.Queries.PruneHistory(b.Ctx, db.PruneHistoryParams{MaxJobs: 100})
	require.NoError(t, err)
	require.Zero(t, n, "the hour-long row is kept")
	_, err = b.Queries.FindJob(b.Ctx, js[0].ID)
	require.NoError(t, err)
}
