package queries_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
)

func TestAckBatch(t *testing.T) {
	b := setup(t)
	for range 3 {
		b.enqueue(t, jobSpec{})
	}
	claimed := b.claim(t, "w", 3)
	require.Len(t, claimed, 3)

	none, err := b.Queries.AckBatch(b.Ctx, db.AckBatchParams{})
	require.NoError(t, err)
	require.Empty(t, none, "an empty batch acks nothing")

	acked, err := b.Queries.AckBatch(b.Ctx, db.AckBatchParams{
		Ids:      []int64{claimed[0].ID, claimed[1].ID, 999_999},
		Attempts: []int32{1, 2, 1}, // the second names a claim that never happened
	})
	require.NoError(t, err)
	require.Equal(t, []db.AckBatchRow{{ID: claimed[0].ID, Attempt: 1}}, acked)
	live, _ := b.Totals(t)
	require.EqualValues(t, 2, live)

	// A pending job cannot be acked, even with its current attempt.
	pending := b.enqueue(t, jobSpec{queue: "idle"})
	acked, err = b.Queries.AckBatch(b.Ctx, db.AckBatchParams{Ids: []int64{pending}, Attempts: []int32{0}})
	require.NoError(t, err)
	require.Empty(t, acked)
}

// TestFencing: after a lease expires and the job is claimed again, the first
// claimant's ack, nack, extend and release have no effect and say so; the
// second claimant's take effect.
func TestFencing(t *testing.T) {
	stale := func(b *bundle, j db.HopperJob) (db.AckBatchParams, db.NackBatchParams, db.ExtendParams, db.ReleaseParams) {
		claim := []int64{j.ID}
		attempt := []int32{j.Attempt}
		return db.AckBatchParams{Ids: claim, Attempts: attempt},
			db.NackBatchParams{Ids: claim, Attempts: attempt, Actions: []string{"retry"}, Messages: []string{"late"}, BackoffsMs: []int64{0}, Reasons: []string{""}},
			db.ExtendParams{Ids: claim, Attempts: attempt, LeaseMs: 60_000},
			db.ReleaseParams{Ids: claim, Attempts: attempt}
	}
	for _, tc := range []struct {
		name string
		// finish is what the current claimant does; it must take effect.
		finish func(t *testing.T, b *bundle, j db.HopperJob)
	}{
		{"second claimant acks", func(t *testing.T, b *bundle, j db.HopperJob) {
			ack, _, _, _ := stale(b, j)
			got, err := b.Queries.AckBatch(b.Ctx, ack)
			require.NoError(t, err)
			require.Equal(t, []db.AckBatchRow{{ID: j.ID, Attempt: j.Attempt}}, got)
		}},
		{"second claimant nacks", func(t *testing.T, b *bundle, j db.HopperJob) {
			_, nack, _, _ := stale(b, j)
			got, err := b.Queries.NackBatch(b.Ctx, nack)
			require.NoError(t, err)
			require.Equal(t, []db.NackBatchRow{{ID: j.ID, Attempt: j.Attempt, Dead: false}}, got)
		}},
		{"second claimant extends", func(t *testing.T, b *bundle, j db.HopperJob) {
			_, _, ext, _ := stale(b, j)
			got, err := b.Queries.Extend(b.Ctx, ext)
			require.NoError(t, err)
			require.Equal(t, []db.ExtendRow{{ID: j.ID, Attempt: j.Attempt, Extended: true}}, got)
		}},
		{"second claimant releases", func(t *testing.T, b *bundle, j db.HopperJob) {
			_, _, _, rel := stale(b, j)
			got, err := b.Queries.Release(b.Ctx, rel)
			require.NoError(t, err)
			require.Len(t, got, 1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			b.enqueue(t, jobSpec{maxAttempts: 5})
			first := b.claim(t, "first", 1)[0]
			b.expire(t, first)
			swept, err := b.Queries.Sweep(b.Ctx, db.SweepParams{MaxJobs: 100})
			require.NoError(t, err)
			require.Len(t, swept, 1)
			second := b.claim(t, "second", 1)[0]
			require.Equal(t, first.ID, second.ID)
			require.Equal(t, first.Attempt+1, second.Attempt)

			ack, nack, ext, rel := stale(b, first)
			acked, err := b.Queries.AckBatch(b.Ctx, ack)
			require.NoError(t, err)
			require.Empty(t, acked, "stale ack refused")
			nacked, err := b.Queries.NackBatch(b.Ctx, nack)
			require.NoError(t, err)
			require.Empty(t, nacked, "stale nack refused")
			held, err := b.Queries.Extend(b.Ctx, ext)
			require.NoError(t, err)
			require.Empty(t, held, "stale extend refused")
			released, err := b.Queries.Release(b.Ctx, rel)
			require.NoError(t, err)
			require.Empty(t, released, "stale release refused")

			// Nothing the stale claimant did changed the job.
			j, err := b.Queries.GetJob(b.Ctx, second.ID)
			require.NoError(t, err)
			require.Equal(t, "running", j.State)
			require.Equal(t, "second", *j.LeaseOwner)
			require.Equal(t, second.Attempt, j.Attempt)
			require.True(t, second.LeaseUntil.Equal(*j.LeaseUntil))
			require.Len(t, history(t, j.Errors), 1, "only the sweep's entry")

			tc.finish(t, b, second)
		})
	}
}

// A claim whose lease ran out but that nobody took over is still the
// current claim: its ack is accepted (the work was done, and no one else
// holds the job).
func TestAckAfterExpiryBeforeSweep(t *testing.T) {
	b := setup(t)
	j := b.expiredClaim(t, "w")
	acked, err := b.Queries.AckBatch(b.Ctx, db.AckBatchParams{Ids: []int64{j.ID}, Attempts: []int32{j.Attempt}})
	require.NoError(t, err)
	require.Equal(t, []db.AckBatchRow{{ID: j.ID, Attempt: j.Attempt}}, acked)
}

func TestExtend(t *testing.T) {
	b := setup(t)
	b.enqueue(t, jobSpec{})
	b.enqueue(t, jobSpec{})
	claimed := b.claim(t, "w", 2)
	before := b.dbNow(t)
	held, err := b.Queries.Extend(b.Ctx, db.ExtendParams{Ids: ids(claimed), Attempts: []int32{1, 1}, LeaseMs: 3_600_000})
	require.NoError(t, err)
	after := b.dbNow(t)
	require.ElementsMatch(t, []db.ExtendRow{{ID: claimed[0].ID, Attempt: 1, Extended: true}, {ID: claimed[1].ID, Attempt: 1, Extended: true}}, held)
	for _, h := range held {
		j, err := b.Queries.GetJob(b.Ctx, h.ID)
		require.NoError(t, err)
		requireBetween(t, before.Add(time.Hour), after.Add(time.Hour), *j.LeaseUntil, "extended to lease_ms from the extend")
	}
	none, err := b.Queries.Extend(b.Ctx, db.ExtendParams{LeaseMs: 1000})
	require.NoError(t, err)
	require.Empty(t, none)

	// A shorter extension (the heartbeat's) never shortens a longer one
	// (a handler's ExtendLease).
	again, err := b.Queries.Extend(b.Ctx, db.ExtendParams{Ids: ids(claimed), Attempts: []int32{1, 1}, LeaseMs: 1000})
	require.NoError(t, err)
	require.Len(t, again, 2)
	for _, h := range again {
		require.True(t, h.Extended)
		j, err := b.Queries.GetJob(b.Ctx, h.ID)
		require.NoError(t, err)
		requireBetween(t, before.Add(time.Hour), after.Add(time.Hour), *j.LeaseUntil, "kept the longer lease")
	}

	// A row another transaction holds locked is reported held but not
	// extended, at once: Extend never waits for a lock.
	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.Ctx) //nolint:errcheck
	locked, err := db.New(tx).AckBatch(b.Ctx, db.AckBatchParams{Ids: ids(claimed[:1]), Attempts: []int32{1}})
	require.NoError(t, err)
	require.Len(t, locked, 1)
	busy, err := b.Queries.Extend(b.Ctx, db.ExtendParams{Ids: ids(claimed), Attempts: []int32{1, 1}, LeaseMs: 7_200_000})
	require.NoError(t, err)
	require.ElementsMatch(t, []db.ExtendRow{{ID: claimed[0].ID, Attempt: 1, Extended: false}, {ID: claimed[1].ID, Attempt: 1, Extended: true}}, busy)
}

func TestRelease(t *testing.T) {
	b := setup(t)
	b.enqueue(t, jobSpec{maxAttempts: 2})
	j := b.claim(t, "w", 1)[0]
	released, err := b.Queries.Release(b.Ctx, db.ReleaseParams{Ids: []int64{j.ID}, Attempts: []int32{j.Attempt}})
	require.NoError(t, err)
	require.Len(t, released, 1)
	require.Equal(t, db.ReleaseRow{ID: j.ID, Queue: "default", Priority: j.Priority}, db.ReleaseRow{ID: released[0].ID, Queue: released[0].Queue, Priority: released[0].Priority})
	require.True(t, j.RunAt.Equal(released[0].RunAt), "the released job's place in claim order is reported, for the wake-up")

	got, err := b.Queries.GetJob(b.Ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, "pending", got.State)
	require.Nil(t, got.LeaseOwner)
	require.Equal(t, int32(1), got.Attempt, "attempt is the fencing token: it never goes down")
	require.Equal(t, int32(3), got.MaxAttempts, "the released claim is not charged")
	require.JSONEq(t, `[]`, string(got.Errors))
	require.True(t, j.RunAt.Equal(got.RunAt), "keeps its place in line")
	require.JSONEq(t, `{"hopper.uncharged": "1"}`, string(got.Meta), "the claim given back is counted, for Row.Attempts")

	again := b.claim(t, "w2", 1)
	require.Len(t, again, 1, "claimable at once")
	require.Equal(t, int32(2), again[0].Attempt)
	_, err = b.Queries.Release(b.Ctx, db.ReleaseParams{Ids: []int64{j.ID}, Attempts: []int32{again[0].Attempt}})
	require.NoError(t, err)
	got, err = b.Queries.GetJob(b.Ctx, j.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"hopper.uncharged": "2"}`, string(got.Meta), "each claim given back adds one")
}

// TestReleaseCountsWhateverTheMeta: the count of claims given back joins
// the job's own metadata, starts again from one over a value that is no
// count (the SQL API lets a user write any string there), and is left out
// rather than fail the release when the metadata is near its bound.
func TestReleaseCountsWhateverTheMeta(t *testing.T) {
	b := setup(t)
	for _, tc := range []struct {
		name, meta, want string
	}{
		{"the user's keys stay", `{"tenant": "acme"}`, `{"tenant": "acme", "hopper.uncharged": "1"}`},
		{"a value that is no count", `{"hopper.uncharged": "many"}`, `{"hopper.uncharged": "1"}`},
		{"at the enqueue limit: counted in the table's room", `{"big": "` + strings.Repeat("x", 8180) + `"}`,
			`{"big": "` + strings.Repeat("x", 8180) + `", "hopper.uncharged": "1"}`},
		{"near the table's bound (written past the enqueue limit)", `{"big": "` + strings.Repeat("x", 8660) + `"}`,
			`{"big": "` + strings.Repeat("x", 8660) + `"}`},
	} {
		id := testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{State: testfactory.Running, Attempt: 1, Meta: json.RawMessage(tc.meta)}).ID
		released, err := b.Queries.Release(b.Ctx, db.ReleaseParams{Ids: []int64{id}, Attempts: []int32{1}})
		require.NoError(t, err, tc.name)
		require.Len(t, released, 1, tc.name)
		got, err := b.Queries.GetJob(b.Ctx, id)
		require.NoError(t, err)
		require.JSONEq(t, tc.want, string(got.Meta), tc.name)
	}
}
