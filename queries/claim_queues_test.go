package queries_test

import (
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
)

// TestDequeueQueues: one statement claims for several queues, each as
// Dequeue would on its own: up to its own count, from its own cursor, in
// claim order, nothing from a paused queue, nothing of a kind the worker
// cannot run, and nothing a concurrent claim holds.
func TestDequeueQueues(t *testing.T) {
	b := setup(t)
	for _, q := range []string{"a", "b", "c", "paused"} {
		for i := range 5 {
			b.enqueue(t, jobSpec{queue: q, priority: int16(i % 2)})
		}
	}
	b.enqueue(t, jobSpec{queue: "a", kind: "other"})
	_, err := b.Queries.PauseQueue(b.Ctx, "paused")
	require.NoError(t, err)

	// Queue b's cursor is past its first job in claim order.
	first, err := b.Queries.Dequeue(b.Ctx, db.DequeueParams{Queue: "b", Kinds: []string{"k"}, MaxVersions: []int32{1},
		MaxJobs: 1, Owner: "other-worker", LeaseMs: 30_000, AfterPriority: -1})
	require.NoError(t, err)
	require.Len(t, first, 1)

	rows, err := b.Queries.DequeueQueues(b.Ctx, db.DequeueQueuesParams{
		Queues:          []string{"a", "b", "c", "paused", "nothing-here"},
		MaxJobs:         []int32{2, 10, 5, 5, 5},
		AfterPriorities: []int16{-1, first[0].Priority, -1, -1, -1},
		AfterRunAts:     []time.Time{{}, first[0].RunAt, {}, {}, {}},
		AfterIds:        []int64{0, first[0].ID, 0, 0, 0},
		Kinds:           []string{"k"}, MaxVersions: []int32{1}, Owner: "w", LeaseMs: 30_000,
	})
	require.NoError(t, err)
	byQueue := map[string][]db.HopperJob{}
	for _, r := range rows {
		require.Equal(t, "running", r.State)
		require.Equal(t, "w", *r.LeaseOwner)
		require.Equal(t, int32(1), r.Attempt, "claimed: the attempt is the new fence")
		require.Equal(t, "k", r.Kind)
		byQueue[r.Queue] = append(byQueue[r.Queue], r)
	}
	require.Len(t, byQueue["a"], 2, "up to its own count")
	require.Len(t, byQueue["b"], 4, "from its cursor on: the one before it is another worker's")
	require.Len(t, byQueue["c"], 5)
	require.Empty(t, byQueue["paused"], "a paused queue gives nothing")
	for _, r := range byQueue["a"] {
		require.Zero(t, r.Priority, "in claim order: priority 0 first")
	}
	ids := func(rows []db.HopperJob) []int64 {
		out := []int64{}
		for _, r := range rows {
			out = append(out, r.ID)
		}
		sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
		return out
	}
	require.NotContains(t, ids(byQueue["b"]), first[0].ID)

	// What is left is claimed by the next batch, and nothing twice.
	again, err := b.Queries.DequeueQueues(b.Ctx, db.DequeueQueuesParams{
		Queues: []string{"a", "b", "c"}, MaxJobs: []int32{10, 10, 10},
		AfterPriorities: []int16{-1, -1, -1}, AfterRunAts: make([]time.Time, 3), AfterIds: make([]int64, 3),
		Kinds: []string{"k"}, MaxVersions: []int32{1}, Owner: "w", LeaseMs: 30_000,
	})
	require.NoError(t, err)
	require.Len(t, again, 3, "a's three left; b and c are all claimed")
	for _, r := range again {
		require.Equal(t, "a", r.Queue)
	}
}
