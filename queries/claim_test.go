package queries_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
)

func TestDequeueOrder(t *testing.T) {
	b := setup(t)
	// Enqueued in an order that differs from the claim order.
	low := b.enqueue(t, jobSpec{priority: 5})
	high2 := b.enqueue(t, jobSpec{priority: 1})
	// high1 is enqueued after high2 but was due a minute earlier.
	rows := withIDsAt(t, b.Queries, []db.EnqueueBatchAtParams{{
		Queue: "default", Kind: "k", Version: 1, Priority: 1, Payload: json.RawMessage(`{}`),
		RunAt: time.Now().Add(-time.Minute), State: "pending", MaxAttempts: 1,
	}})
	_, err := b.Queries.EnqueueBatchAt(b.Ctx, rows)
	require.NoError(t, err)
	high1 := rows[0].ID
	urgent := b.enqueue(t, jobSpec{priority: 0})

	var order []int64
	for range 4 {
		got := b.claim(t, "w", 1)
		require.Len(t, got, 1)
		order = append(order, got[0].ID)
	}
	require.Equal(t, []int64{urgent, high1, high2, low}, order)
	require.Empty(t, b.claim(t, "w", 1))
}

func TestDequeueSameRunAtOrdersByID(t *testing.T) {
	b := setup(t)
	rows := make([]db.EnqueueBatchParams, 50)
	for i := range rows {
		rows[i] = db.EnqueueBatchParams{Queue: "default", Kind: "k", Version: 1, Payload: json.RawMessage(`{}`), MaxAttempts: 1}
	}
	_, err := b.Queries.EnqueueBatch(b.Ctx, withIDs(t, b.Queries, rows)) // one statement: one run_at for all
	require.NoError(t, err)
	var last int64
	for range 50 {
		got := b.claim(t, "w", 1)
		require.Len(t, got, 1)
		require.Greater(t, got[0].ID, last)
		last = got[0].ID
	}
}

func TestDequeueClaimFields(t *testing.T) {
	b := setup(t)
	id := b.enqueue(t, jobSpec{})
	before := b.dbNow(t)
	got := b.claim(t, "worker-7", 10)
	after := b.dbNow(t)
	require.Len(t, got, 1)
	j := got[0]
	require.Equal(t, id, j.ID)
	require.Equal(t, "running", j.State)
	require.Equal(t, int32(1), j.Attempt)
	require.Equal(t, "worker-7", *j.LeaseOwner)
	require.NotNil(t, j.LeaseUntil)
	requireBetween(t, before.Add(30*time.Second), after.Add(30*time.Second), *j.LeaseUntil, "leased for lease_ms from the claim")
	require.Empty(t, b.claim(t, "other", 10), "a running job is not claimable")
}

func TestDequeueFilters(t *testing.T) {
	b := setup(t)
	b.enqueue(t, jobSpec{delay: time.Hour}) // scheduled: not yet
	b.enqueue(t, jobSpec{queue: "other"})   // another queue
	b.enqueue(t, jobSpec{kind: "unknown"})  // a kind nobody asked for
	v2 := b.enqueue(t, jobSpec{kind: "versioned", version: 2})
	v3 := b.enqueue(t, jobSpec{kind: "versioned", version: 3})
	plain := b.enqueue(t, jobSpec{})

	for _, tc := range []struct {
		name        string
		queue       string
		kinds       []string
		maxVersions []int32
		max         int32
		want        []int64
	}{
		{"no kinds", "default", nil, nil, 10, nil},
		{"zero limit", "default", []string{"k"}, []int32{1}, 0, nil},
		{"plain kind", "default", []string{"k"}, []int32{1}, 10, []int64{plain}},
		{"v2 worker leaves v3", "default", []string{"versioned"}, []int32{2}, 10, []int64{v2}},
		{"v3 worker takes both", "default", []string{"versioned", "k"}, []int32{3, 1}, 10, []int64{v2, v3, plain}},
		{"v1 worker takes none", "default", []string{"versioned"}, []int32{1}, 10, nil},
		{"empty queue", "nothing-here", []string{"k"}, []int32{1}, 10, nil},
	} {
		tx, err := b.Pool.Begin(b.Ctx)
		require.NoError(t, err)
		got, err := db.New(tx).Dequeue(b.Ctx, db.DequeueParams{
			Queue: tc.queue, Kinds: tc.kinds, MaxVersions: tc.maxVersions, MaxJobs: tc.max, Owner: "w", LeaseMs: 1000,
		})
		require.NoError(t, err, tc.name)
		require.ElementsMatch(t, tc.want, ids(got), tc.name)
		require.NoError(t, tx.Rollback(b.Ctx)) // leave the table as it was for the next case
	}
}

// TestNoDoubleClaim: many workers on their own connections claim and ack
// 20,000 jobs in batches; every job is claimed exactly once.
func TestNoDoubleClaim(t *testing.T) {
	b := setup(t)
	const total, workers, batch = 20_000, 10, 37
	rows := make([]db.EnqueueBatchParams, total)
	for i := range rows {
		rows[i] = db.EnqueueBatchParams{Queue: "default", Kind: "k", Version: 1, Payload: json.RawMessage(`{}`), MaxAttempts: 1}
	}
	_, err := b.Queries.EnqueueBatch(b.Ctx, withIDs(t, b.Queries, rows))
	require.NoError(t, err)

	var (
		mu     sync.Mutex
		claims = map[int64]int{}
		wg     sync.WaitGroup
		errs   = make(chan error, workers)
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := b.Pool.Acquire(b.Ctx) // a connection of its own for the whole run
			if err != nil {
				errs <- err
				return
			}
			defer conn.Release()
			q := db.New(conn)
			for {
				got, err := q.Dequeue(b.Ctx, db.DequeueParams{
					Queue: "default", Kinds: []string{"k"}, MaxVersions: []int32{1},
					MaxJobs: batch, Owner: string(rune('a' + w)), LeaseMs: 60_000,
				})
				if err != nil {
					errs <- err
					return
				}
				if len(got) == 0 {
					return
				}
				attempts := make([]int32, len(got))
				mu.Lock()
				for i, j := range got {
					claims[j.ID]++
					attempts[i] = j.Attempt
				}
				mu.Unlock()
				if _, err := q.AckBatch(context.Background(), db.AckBatchParams{Ids: ids(got), Attempts: attempts}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, claims, total, "every job claimed")
	for id, n := range claims {
		require.Equal(t, 1, n, "job %d claimed %d times", id, n)
	}
	live, _ := b.Totals(t)
	require.Zero(t, live)
}

// TestScheduledAndPromote: a job due later is stored as scheduled, is not
// claimable, and becomes pending when Promote runs after its run_at.
func TestScheduledAndPromote(t *testing.T) {
	b := setup(t)
	later := b.enqueue(t, jobSpec{delay: time.Hour})
	soon := b.enqueue(t, jobSpec{queue: "other", delay: 50 * time.Millisecond})
	now := b.enqueue(t, jobSpec{})
	require.Equal(t, "scheduled", b.job(t, later).State)
	require.Equal(t, "scheduled", b.job(t, soon).State)
	require.Equal(t, "pending", b.job(t, now).State)

	// The job due in an hour is never promoted; the one due in 50ms may
	// already be (a loaded machine can take that long between statements).
	first, err := b.Queries.Promote(b.Ctx, db.PromoteParams{MaxJobs: 100})
	require.NoError(t, err)
	for _, r := range first {
		require.Equal(t, "other", r.Queue, "only the job due in 50ms may be due")
	}

	// The condition runs on a goroutine of its own: it reports through
	// CollectT, and the result is checked here.
	promoted := first
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		if len(promoted) > 0 {
			return
		}
		got, err := b.Queries.Promote(b.Ctx, db.PromoteParams{MaxJobs: 100})
		require.NoError(c, err)
		require.NotEmpty(c, got, "the job due in 50ms is promoted")
		promoted = got
	}, 90*time.Second, 10*time.Millisecond)
	require.Len(t, promoted, 1)
	require.Equal(t, db.PromoteRow{Queue: "other", Promoted: 1, ID: soon}, db.PromoteRow{Queue: promoted[0].Queue, Promoted: promoted[0].Promoted, ID: promoted[0].ID})
	require.True(t, b.job(t, soon).RunAt.Equal(promoted[0].RunAt), "the promoted job's place in claim order is reported, for the wake-up")
	require.Equal(t, "pending", b.job(t, soon).State)
	require.Equal(t, "scheduled", b.job(t, later).State)

	// A nack with no backoff is pending at once; with one, scheduled.
	got := b.claim(t, "w", 1)
	require.Len(t, got, 1)
	rows, err := b.Queries.NackBatch(b.Ctx, db.NackBatchParams{Ids: ids(got), Attempts: []int32{1}, Actions: []string{"retry"}, Messages: []string{"x"}, BackoffsMs: []int64{0}, Reasons: []string{""}})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, "pending", b.job(t, got[0].ID).State)
}

func TestPromoteBoundedAndConcurrent(t *testing.T) {
	b := setup(t)
	rows := make([]db.EnqueueBatchAtParams, 1000)
	for i := range rows {
		rows[i] = db.EnqueueBatchAtParams{Queue: "default", Kind: "k", Version: 1, Payload: json.RawMessage(`{}`),
			RunAt: time.Now().Add(-time.Second), State: "scheduled", MaxAttempts: 1}
	}
	_, err := b.Queries.EnqueueBatchAt(b.Ctx, withIDsAt(t, b.Queries, rows))
	require.NoError(t, err)
	var mu sync.Mutex
	total := int64(0)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, err := b.Queries.Promote(context.Background(), db.PromoteParams{MaxJobs: 70})
				if err != nil || len(got) == 0 {
					return
				}
				mu.Lock()
				total += got[0].Promoted
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, 1000, total, "each job promoted once")
	stats, err := b.Queries.Stats(b.Ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1000, stats[0].Ready)
}
