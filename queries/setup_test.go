package queries_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
)

// TestMain skips the package without a database and fails it on leaked
// goroutines.
func TestMain(m *testing.M) { testdb.Main(m) }

// bundle is the test bed's Bundle; this package's helpers hang on it.
type bundle struct{ *testdb.Bundle }

func setup(t *testing.T) *bundle {
	t.Helper()
	return &bundle{testdb.SetupWithin(t, 2*time.Minute)}
}

// past is a run_at that means "now" to Enqueue (run_at is the later of it
// and now() + delay).
var past = time.Unix(0, 0)

type jobSpec struct {
	queue, kind string
	version     int32
	priority    int16
	delay       time.Duration
	maxAttempts int32
	uniqueKey   string
}

func (b *bundle) enqueue(t *testing.T, s jobSpec) int64 {
	t.Helper()
	row, err := b.Queries.Enqueue(b.Ctx, params(s))
	require.NoError(t, err)
	require.True(t, row.Inserted)
	return row.ID
}

func params(s jobSpec) db.EnqueueParams {
	p := db.EnqueueParams{
		Queue: s.queue, Kind: s.kind, Version: s.version, Priority: s.priority,
		Payload: json.RawMessage(`{"n":1}`), RunAt: past, DelayMs: s.delay.Milliseconds(),
		MaxAttempts: s.maxAttempts,
	}
	if p.Queue == "" {
		p.Queue = "default"
	}
	if p.Kind == "" {
		p.Kind = "k"
	}
	if p.Version == 0 {
		p.Version = 1
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = 3
	}
	if s.uniqueKey != "" {
		p.UniqueKey = &s.uniqueKey
	}
	return p
}

// claim dequeues from queue "default" for kind "k" up to version 1.
func (b *bundle) claim(t *testing.T, owner string, n int32) []db.HopperJob {
	t.Helper()
	jobs, err := b.Queries.Dequeue(b.Ctx, db.DequeueParams{
		Queue: "default", Kinds: []string{"k"}, MaxVersions: []int32{1},
		MaxJobs: n, Owner: owner, LeaseMs: 30_000,
	})
	require.NoError(t, err)
	return jobs
}

// expire makes a held claim's lease run out. Extend never shortens a
// lease, so the test does it by hand.
func (b *bundle) expire(t *testing.T, j db.HopperJob) {
	t.Helper()
	tag, err := b.Pool.Exec(b.Ctx, "UPDATE hopper_jobs SET lease_until = now() - interval '1 second' WHERE id = $1 AND attempt = $2 AND state = 'running'", j.ID, j.Attempt)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

// expiredClaim is a job claimed once by owner whose lease ran out a second
// ago (by the database's clock), not yet swept.
func (b *bundle) expiredClaim(t *testing.T, owner string) db.HopperAllJob {
	t.Helper()
	return testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{
		State: testfactory.Running, Attempt: 1, LeaseOwner: owner,
		LeaseUntil: testfactory.Ptr(b.dbNow(t).Add(-time.Second)),
	})
}

func (b *bundle) job(t *testing.T, id int64) db.HopperJob {
	t.Helper()
	j, err := b.Queries.GetJob(b.Ctx, id)
	require.NoError(t, err)
	return j
}

func ids(jobs []db.HopperJob) []int64 {
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

type historyEntry struct {
	Attempt int32     `json:"attempt"`
	At      time.Time `json:"at"`
	Owner   string    `json:"owner"`
	Error   string    `json:"error"`
}

func history(t *testing.T, raw json.RawMessage) []historyEntry {
	t.Helper()
	var h []historyEntry
	require.NoError(t, json.Unmarshal(raw, &h))
	return h
}

// dbNow reads the database clock, the one that stamps run_at and
// lease_until. Readings taken before and after a statement bound its now()
// exactly, whatever this machine's clock or scheduler does in between.
func (b *bundle) dbNow(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT now()").Scan(&now))
	return now
}

// requireBetween asserts lo <= got <= hi.
func requireBetween(t *testing.T, lo, hi, got time.Time, msg string) {
	t.Helper()
	require.False(t, got.Before(lo) || got.After(hi), "%s: %v is outside [%v, %v]", msg, got, lo, hi)
}

// repeat is n copies of v.
func repeat[T any](v T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// withIDs gives a COPY batch its ids, reserved as jobs.EnqueueMany does.
func withIDs(t testing.TB, q *db.Queries, rows []db.EnqueueBatchParams) []db.EnqueueBatchParams {
	t.Helper()
	ids := reserve(t, q, len(rows))
	for i := range rows {
		rows[i].ID = ids[i]
	}
	return rows
}

// withIDsAt is withIDs for EnqueueBatchAt.
func withIDsAt(t testing.TB, q *db.Queries, rows []db.EnqueueBatchAtParams) []db.EnqueueBatchAtParams {
	t.Helper()
	ids := reserve(t, q, len(rows))
	for i := range rows {
		rows[i].ID = ids[i]
	}
	return rows
}

func reserve(t testing.TB, q *db.Queries, n int) []int64 {
	t.Helper()
	ids, err := q.ReserveJobIDs(context.Background(), int32(n))
	if err != nil {
		t.Fatal(err)
	}
	return ids
}
