package queries_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
)

func TestEnqueueDefaults(t *testing.T) {
	b := setup(t)
	id := b.enqueue(t, jobSpec{queue: "email", kind: "welcome", version: 2, priority: 3, maxAttempts: 7})

	j, err := b.Queries.GetJob(b.Ctx, id)
	require.NoError(t, err)
	require.Equal(t, "email", j.Queue)
	require.Equal(t, "welcome", j.Kind)
	require.Equal(t, int32(2), j.Version)
	require.Equal(t, int16(3), j.Priority)
	require.Equal(t, int32(7), j.MaxAttempts)
	require.Equal(t, "pending", j.State)
	require.Zero(t, j.Attempt)
	require.Nil(t, j.LeaseOwner)
	require.Nil(t, j.LeaseUntil)
	require.JSONEq(t, `[]`, string(j.Errors))
	require.JSONEq(t, `{"n":1}`, string(j.Payload))
	require.WithinDuration(t, j.CreatedAt, j.RunAt, time.Second, "no delay and a past run_at mean now")
}

// TestEnqueueZeroValue: the generated statement fills Hopper's defaults in
// for zero values, so an embedding application's EnqueueParams{Kind: k} is a
// valid job (queue default, version 1, payload {}, 25 attempts, due now).
func TestEnqueueZeroValue(t *testing.T) {
	b := setup(t)
	row, err := b.Queries.Enqueue(b.Ctx, db.EnqueueParams{Kind: "k"})
	require.NoError(t, err)
	require.True(t, row.Inserted)
	j := b.job(t, row.ID)
	require.Equal(t, "default", j.Queue)
	require.Equal(t, int32(1), j.Version)
	require.JSONEq(t, `{}`, string(j.Payload))
	require.Equal(t, int32(25), j.MaxAttempts)
	require.Equal(t, "pending", j.State)

	got, err := b.Queries.EnqueueBatchUnique(b.Ctx, db.EnqueueBatchUniqueParams{
		Queues: []string{""}, Kinds: []string{"k"}, Versions: []int32{0}, Payloads: []json.RawMessage{nil},
		Priorities: []int16{0}, RunAts: []time.Time{{}}, DelaysMs: []int64{0}, MaxAttempts: []int32{0}, UniqueKeys: []string{"u"},
	})
	require.NoError(t, err)
	require.Len(t, got, 1)
	j = b.job(t, got[0].ID)
	require.Equal(t, []any{"default", int32(1), int32(25)}, []any{j.Queue, j.Version, j.MaxAttempts})
	require.JSONEq(t, `{}`, string(j.Payload))

	// Values that are not zero and still wrong are refused by the table.
	_, err = b.Queries.Enqueue(b.Ctx, db.EnqueueParams{Kind: "k", MaxAttempts: -1})
	require.ErrorContains(t, err, "hopper_jobs_max_attempts_check")
}

func TestEnqueueRunAt(t *testing.T) {
	b := setup(t)
	delayed := b.enqueue(t, jobSpec{delay: time.Hour})
	j, err := b.Queries.GetJob(b.Ctx, delayed)
	require.NoError(t, err)
	require.WithinDuration(t, j.CreatedAt.Add(time.Hour), j.RunAt, time.Second)

	at := time.Now().Add(48 * time.Hour).Truncate(time.Microsecond)
	p := params(jobSpec{})
	p.RunAt = at
	row, err := b.Queries.Enqueue(b.Ctx, p)
	require.NoError(t, err)
	j, err = b.Queries.GetJob(b.Ctx, row.ID)
	require.NoError(t, err)
	require.True(t, at.Equal(j.RunAt), "explicit run_at kept: %v vs %v", at, j.RunAt)
}

func TestEnqueueUniqueKey(t *testing.T) {
	b := setup(t)
	first, err := b.Queries.Enqueue(b.Ctx, params(jobSpec{uniqueKey: "order-1"}))
	require.NoError(t, err)
	require.True(t, first.Inserted)

	dup, err := b.Queries.Enqueue(b.Ctx, params(jobSpec{uniqueKey: "order-1"}))
	require.NoError(t, err)
	require.False(t, dup.Inserted, "a live job holds the key")
	require.Equal(t, first.ID, dup.ID, "the duplicate names the live holder")

	other, err := b.Queries.Enqueue(b.Ctx, params(jobSpec{uniqueKey: "order-2"}))
	require.NoError(t, err)
	require.True(t, other.Inserted)

	live, _ := b.Totals(t)
	require.EqualValues(t, 2, live)

	// Once the holder is finished the key is free again.
	claimed := b.claim(t, "w", 10)
	require.Len(t, claimed, 2)
	acked, err := b.Queries.AckBatch(b.Ctx, db.AckBatchParams{Ids: ids(claimed), Attempts: []int32{1, 1}})
	require.NoError(t, err)
	require.Len(t, acked, 2)
	again, err := b.Queries.Enqueue(b.Ctx, params(jobSpec{uniqueKey: "order-1"}))
	require.NoError(t, err)
	require.True(t, again.Inserted)
}

func TestEnqueueRejectsBadRows(t *testing.T) {
	b := setup(t)
	for _, tc := range []struct {
		name string
		spec jobSpec
		mut  func(*db.EnqueueParams)
	}{
		// Zero queue, version and max attempts take defaults (TestEnqueueZeroValue).
		{name: "queue too long", mut: func(p *db.EnqueueParams) { p.Queue = strings.Repeat("q", 129) }},
		{name: "empty kind", mut: func(p *db.EnqueueParams) { p.Kind = "" }},
		{name: "priority too high", mut: func(p *db.EnqueueParams) { p.Priority = 10 }},
		{name: "negative priority", mut: func(p *db.EnqueueParams) { p.Priority = -1 }},
		{name: "negative max attempts", mut: func(p *db.EnqueueParams) { p.MaxAttempts = -1 }},
		{name: "negative version", mut: func(p *db.EnqueueParams) { p.Version = -1 }},
		{name: "empty unique key", mut: func(p *db.EnqueueParams) { k := ""; p.UniqueKey = &k }},
	} {
		p := params(tc.spec)
		tc.mut(&p)
		_, err := b.Queries.Enqueue(b.Ctx, p)
		require.Error(t, err, tc.name)
	}
	live, _ := b.Totals(t)
	require.Zero(t, live)
}

func TestEnqueueBatchCopy(t *testing.T) {
	b := setup(t)
	n, err := b.Queries.EnqueueBatch(b.Ctx, nil)
	require.NoError(t, err)
	require.Zero(t, n, "an empty batch inserts nothing")

	ids, err := b.Queries.ReserveJobIDs(b.Ctx, 1001)
	require.NoError(t, err)
	require.Len(t, ids, 1001)
	require.True(t, slices.IsSorted(ids), "ids come in ascending order")
	rows := make([]db.EnqueueBatchParams, 1000)
	for i := range rows {
		rows[i] = db.EnqueueBatchParams{
			ID: ids[i], Queue: "default", Kind: "k", Version: 1, Priority: int16(i % 10), MaxAttempts: 5,
			Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
		}
	}
	n, err = b.Queries.EnqueueBatch(b.Ctx, rows)
	require.NoError(t, err)
	require.EqualValues(t, 1000, n)
	for _, i := range []int{0, 999} {
		j := b.job(t, ids[i])
		require.JSONEq(t, fmt.Sprintf(`{"i":%d}`, i), string(j.Payload), "COPY writes the reserved id")
	}

	future := time.Now().Add(time.Hour)
	n, err = b.Queries.EnqueueBatchAt(b.Ctx, []db.EnqueueBatchAtParams{
		{ID: ids[1000], Queue: "default", Kind: "k", Version: 1, Payload: json.RawMessage(`{}`), RunAt: future, State: "scheduled", MaxAttempts: 1},
	})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	// A zero id (a parameter left at its zero value) is refused.
	_, err = b.Queries.EnqueueBatch(b.Ctx, []db.EnqueueBatchParams{{Queue: "default", Kind: "k", Version: 1, MaxAttempts: 1, Payload: json.RawMessage(`{}`)}})
	require.ErrorContains(t, err, "hopper_jobs_id_check")
	next := b.enqueue(t, jobSpec{})
	require.Greater(t, next, ids[1000], "the sequence goes on past the reserved ids")
	_, err = b.Pool.Exec(b.Ctx, "DELETE FROM hopper_jobs WHERE id = $1", next)
	require.NoError(t, err)

	stats, err := b.Queries.Stats(b.Ctx)
	require.NoError(t, err)
	require.Len(t, stats, 1)
	require.EqualValues(t, 1000, stats[0].Ready)
	require.EqualValues(t, 1, stats[0].Scheduled)
}

func TestEnqueueBatchUnique(t *testing.T) {
	b := setup(t)
	empty, err := b.Queries.EnqueueBatchUnique(b.Ctx, db.EnqueueBatchUniqueParams{})
	require.NoError(t, err)
	require.Empty(t, empty)

	holder := b.enqueue(t, jobSpec{uniqueKey: "taken"})
	future := time.Now().Add(time.Hour)
	keys := []string{"a", "taken", "", "a", "b", ""}
	p := db.EnqueueBatchUniqueParams{}
	for i, k := range keys {
		p.Queues = append(p.Queues, "default")
		p.Kinds = append(p.Kinds, "k")
		p.Versions = append(p.Versions, 1)
		p.Payloads = append(p.Payloads, json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)))
		p.Priorities = append(p.Priorities, 0)
		p.RunAts = append(p.RunAts, past)
		p.DelaysMs = append(p.DelaysMs, 0)
		p.MaxAttempts = append(p.MaxAttempts, 3)
		p.UniqueKeys = append(p.UniqueKeys, k)
	}
	p.RunAts[4] = future // "b" is scheduled
	rows, err := b.Queries.EnqueueBatchUnique(b.Ctx, p)
	require.NoError(t, err)
	// One row per job, in order: "taken" is held by a live job and the
	// second "a" repeats the first, and each names the holder; jobs
	// without a key are always inserted.
	require.Len(t, rows, len(keys))
	inserted := []bool{true, false, true, false, true, true}
	for i, r := range rows {
		require.Equal(t, inserted[i], r.Inserted, "job %d", i)
		if i > 0 && inserted[i] && inserted[i-1] {
			require.Greater(t, r.ID, rows[i-1].ID)
		}
	}
	require.Equal(t, holder, rows[1].ID, "a duplicate of a live job names it")
	require.Equal(t, rows[0].ID, rows[3].ID, "a duplicate within the batch names the earlier job")
	require.JSONEq(t, `{"i":4}`, string(b.job(t, rows[4].ID).Payload))

	stats, err := b.Queries.Stats(b.Ctx)
	require.NoError(t, err)
	require.EqualValues(t, 4, stats[0].Ready) // holder, a and two without key
	require.EqualValues(t, 1, stats[0].Scheduled)
}
