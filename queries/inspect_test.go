package queries_test

import (
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
)

func TestStats(t *testing.T) {
	b := setup(t)
	stats, err := b.Queries.Stats(b.Ctx)
	require.NoError(t, err)
	require.Empty(t, stats)

	b.enqueue(t, jobSpec{})                            // ready
	b.enqueue(t, jobSpec{})                            // will run
	b.enqueue(t, jobSpec{delay: time.Hour})            // scheduled
	b.enqueue(t, jobSpec{queue: "mail", kind: "send"}) // another queue and kind
	running := b.claim(t, "w", 1)
	require.Len(t, running, 1)
	b.enqueue(t, jobSpec{maxAttempts: 1})
	failing := b.claim(t, "w", 2) // the ready one from above and this one
	require.Len(t, failing, 2)
	for _, j := range failing {
		nack(t, b, j, "boom", 0, "") // one is retried, one (max 1 attempt) dies
	}

	stats, err = b.Queries.Stats(b.Ctx)
	require.NoError(t, err)
	require.Len(t, stats, 2)
	def, mail := stats[0], stats[1]
	require.Equal(t, "default", def.Queue)
	require.Equal(t, "k", def.Kind)
	require.EqualValues(t, 1, def.Ready)
	require.EqualValues(t, 1, def.Scheduled)
	require.EqualValues(t, 1, def.Running)
	require.EqualValues(t, 1, def.Dead)
	require.EqualValues(t, 1, def.Failing, "one of three live jobs has failed")
	require.GreaterOrEqual(t, def.OldestReadySeconds, 0.0)
	require.Equal(t, db.StatsRow{Queue: "mail", Kind: "send", Ready: 1, OldestReadySeconds: mail.OldestReadySeconds}, mail)
	require.False(t, math.IsNaN(mail.OldestReadySeconds))

	// Cancelled jobs count apart from dead ones; a paused queue says so.
	b.enqueue(t, jobSpec{queue: "mail", kind: "send"})
	rows, err := b.Queries.Cancel(b.Ctx, []int64{b.enqueue(t, jobSpec{queue: "mail", kind: "send"})})
	require.NoError(t, err)
	require.True(t, rows[0].Cancelled)
	_, err = b.Queries.PauseQueue(b.Ctx, "mail")
	require.NoError(t, err)
	stats, err = b.Queries.Stats(b.Ctx)
	require.NoError(t, err)
	mail = stats[1]
	require.Equal(t, db.StatsRow{Queue: "mail", Kind: "send", Ready: 2, Cancelled: 1, Paused: true, OldestReadySeconds: mail.OldestReadySeconds}, mail)
	require.False(t, stats[0].Paused)
}

// TestCancel: every live state is cancelled into the dead table, as
// cancelled; finished and unknown jobs are reported as they are.
func TestCancel(t *testing.T) {
	b := setup(t)
	scheduled := b.enqueue(t, jobSpec{queue: "later", delay: time.Hour})
	b.enqueue(t, jobSpec{})
	running := b.claim(t, "w", 1)[0]
	pending := b.enqueue(t, jobSpec{})
	b.enqueue(t, jobSpec{maxAttempts: 1})
	deadJob := b.claim(t, "w", 2)[1]
	require.NotEqual(t, pending, deadJob.ID)
	nack(t, b, deadJob, "x", 0, "")

	conn, err := pgx.Connect(b.Ctx, b.URL)
	require.NoError(t, err)
	defer conn.Close(b.Ctx)
	_, err = conn.Exec(b.Ctx, "LISTEN hopper_jobs")
	require.NoError(t, err)

	rows, err := b.Queries.Cancel(b.Ctx, []int64{running.ID, scheduled, 424242, deadJob.ID, scheduled, pending})
	require.NoError(t, err)
	got := map[int64]db.CancelRow{}
	for _, r := range rows {
		got[r.ID] = r
	}
	require.Len(t, rows, 5, "one row per distinct id")
	require.Equal(t, map[int64]db.CancelRow{
		running.ID: {ID: running.ID, State: "running", Cancelled: true},
		scheduled:  {ID: scheduled, State: "scheduled", Cancelled: true},
		pending:    {ID: pending, State: "running", Cancelled: true}, // claimed with deadJob
		424242:     {ID: 424242, State: "", Cancelled: false},
		deadJob.ID: {ID: deadJob.ID, State: "dead", Cancelled: false},
	}, got)
	live, dead := b.Totals(t)
	require.Zero(t, live)
	require.EqualValues(t, 1, dead)
	for _, id := range []int64{running.ID, scheduled, pending} {
		d, err := b.Queries.GetDead(b.Ctx, id)
		require.NoError(t, err, "a cancelled job is kept")
		require.Equal(t, "cancelled", d.State)
		require.Equal(t, "cancelled", d.Reason)
	}

	// Each running job's worker hears of it at commit, with the claim.
	wantNotices := map[int64]bool{running.ID: true, pending: true}
	for len(wantNotices) > 0 {
		ctx, cancel := context.WithTimeout(b.Ctx, 10*time.Second)
		n, err := conn.WaitForNotification(ctx)
		cancel()
		require.NoError(t, err)
		var notice struct {
			Schema  string `json:"schema"`
			Cancel  int64  `json:"cancel"`
			Attempt int32  `json:"attempt"`
			Owner   string `json:"owner"`
		}
		require.NoError(t, json.Unmarshal([]byte(n.Payload), &notice))
		if notice.Schema != b.Schema {
			continue // other tests' schemas share the channel
		}
		require.True(t, wantNotices[notice.Cancel], "a notice for %d: %s", notice.Cancel, n.Payload)
		delete(wantNotices, notice.Cancel)
		require.Equal(t, b.Schema, notice.Schema)
		require.Equal(t, "w", notice.Owner)
		require.Equal(t, int32(1), notice.Attempt)
	}

	// The cancelled claim is fenced out: its ack takes no effect.
	acked, err := b.Queries.AckBatch(b.Ctx, db.AckBatchParams{Ids: []int64{running.ID}, Attempts: []int32{running.Attempt}})
	require.NoError(t, err)
	require.Empty(t, acked)

	empty, err := b.Queries.Cancel(b.Ctx, nil)
	require.NoError(t, err)
	require.Empty(t, empty)
}

func TestPurgeQueue(t *testing.T) {
	b := setup(t)
	b.enqueue(t, jobSpec{queue: "q1"})
	b.enqueue(t, jobSpec{queue: "q1", delay: time.Hour})
	b.enqueue(t, jobSpec{queue: "q2"})
	b.enqueue(t, jobSpec{})
	b.claim(t, "w", 1) // running jobs are left to finish
	n, err := b.Queries.PurgeQueue(b.Ctx, "q1")
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	n, err = b.Queries.PurgeQueue(b.Ctx, "default")
	require.NoError(t, err)
	require.Zero(t, n)
	live, _ := b.Totals(t)
	require.EqualValues(t, 2, live)
}

// killAll puts n jobs of kind k straight into the dead table, each out of
// its one attempt with one failure in its history.
func killAll(t *testing.T, b *bundle, kind string, n int, uniqueKey string) []int64 {
	t.Helper()
	var out []int64
	for range n {
		out = append(out, testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{
			State: testfactory.Dead, Kind: kind, MaxAttempts: 1, UniqueKey: uniqueKey,
			Reason: "permanent failure", Payload: json.RawMessage(`{"n":1}`),
			Errors: json.RawMessage(`[{"attempt": 1, "at": "2026-01-01T00:00:00Z", "owner": "w", "error": "fatal"}]`),
		}).ID)
	}
	return out
}

func TestDeadRetryPurge(t *testing.T) {
	b := setup(t)
	a := killAll(t, b, "alpha", 3, "")
	z := killAll(t, b, "zeta", 2, "")
	dead := []string{"dead"}
	kind := func(k string) *string { return &k }

	retried, err := b.Queries.RetryDead(b.Ctx, db.RetryDeadParams{States: dead, Ids: []int64{a[0], 777}, MaxJobs: 100})
	require.NoError(t, err)
	require.Equal(t, []db.RetryDeadRow{{ID: a[0], Retried: true}}, retried)
	j, err := b.Queries.GetJob(b.Ctx, a[0])
	require.NoError(t, err, "the job keeps its id")
	require.Equal(t, "pending", j.State)
	require.Equal(t, int32(1), j.Attempt, "attempt, the fencing token, never goes down")
	require.Equal(t, int32(2), j.MaxAttempts, "as many attempts again as it had")
	require.Len(t, history(t, j.Errors), 1, "history is kept")

	// Batches: after_id pages through, max_jobs bounds each.
	first, err := b.Queries.RetryDead(b.Ctx, db.RetryDeadParams{States: dead, Ids: []int64{}, Kind: kind("zeta"), MaxJobs: 1})
	require.NoError(t, err)
	require.Equal(t, []db.RetryDeadRow{{ID: z[0], Retried: true}}, first)
	rest, err := b.Queries.RetryDead(b.Ctx, db.RetryDeadParams{States: dead, Ids: []int64{}, Kind: kind("zeta"), AfterID: z[0], MaxJobs: 1})
	require.NoError(t, err)
	require.Equal(t, []db.RetryDeadRow{{ID: z[1], Retried: true}}, rest)

	old := time.Now().Add(-time.Hour)
	gone, err := b.Queries.PurgeDead(b.Ctx, db.PurgeDeadParams{States: dead, Ids: []int64{}, DiedBefore: &old, MaxJobs: 100})
	require.NoError(t, err)
	require.Empty(t, gone, "nothing died that long ago")
	gone, err = b.Queries.PurgeDead(b.Ctx, db.PurgeDeadParams{States: []string{"cancelled"}, Ids: []int64{}, MaxJobs: 100})
	require.NoError(t, err)
	require.Empty(t, gone, "no cancelled job")
	gone, err = b.Queries.PurgeDead(b.Ctx, db.PurgeDeadParams{States: dead, Ids: []int64{}, MaxJobs: 100})
	require.NoError(t, err)
	require.ElementsMatch(t, a[1:], gone)
	live, deadN := b.Totals(t)
	require.EqualValues(t, 3, live)
	require.Zero(t, deadN)
}

// TestRetryDeadAttemptsAtTheirLimit: a retry gives as many attempts again
// as a job had, up to the integer's limit: a job that used the 2^30
// attempts enqueue allows, or was given more by hand, comes back with
// 2147483647 rather than failing the whole page of the retry with an
// integer overflow.
func TestRetryDeadAttemptsAtTheirLimit(t *testing.T) {
	b := setup(t)
	for _, tc := range []struct {
		name                 string
		state                string
		attempt, maxAttempts int32
		want                 int32
	}{
		{"dead after 2^30 attempts", testfactory.Dead, 1 << 30, 1 << 30, math.MaxInt32},
		{"cancelled with the most attempts", testfactory.Cancelled, 1, math.MaxInt32, math.MaxInt32},
		{"dead just under the limit", testfactory.Dead, 1<<30 - 1, 1 << 30, math.MaxInt32},
		{"an ordinary job", testfactory.Dead, 3, 3, 6},
	} {
		id := testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{State: tc.state, Attempt: tc.attempt, MaxAttempts: tc.maxAttempts}).ID
		retried, err := b.Queries.RetryDead(b.Ctx, db.RetryDeadParams{States: []string{tc.state}, Ids: []int64{id}, MaxJobs: 100})
		require.NoError(t, err, tc.name)
		require.Equal(t, []db.RetryDeadRow{{ID: id, Retried: true}}, retried, tc.name)
		j, err := b.Queries.GetJob(b.Ctx, id)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.attempt, j.Attempt, tc.name)
		require.Equal(t, tc.want, j.MaxAttempts, tc.name)
	}
}

// A dead job whose unique key a live job holds again stays dead: retrying
// it must never lose it.
func TestRetryDeadKeepsConflictingJob(t *testing.T) {
	b := setup(t)
	dead := killAll(t, b, "k", 1, "invoice-9")
	holder := b.enqueue(t, jobSpec{uniqueKey: "invoice-9"})
	retried, err := b.Queries.RetryDead(b.Ctx, db.RetryDeadParams{States: []string{"dead"}, Ids: dead, MaxJobs: 100})
	require.NoError(t, err)
	require.Equal(t, []db.RetryDeadRow{{ID: dead[0], Retried: false}}, retried)
	_, err = b.Queries.GetDead(b.Ctx, dead[0])
	require.NoError(t, err, "still in the dead table")
	_, err = b.Queries.GetJob(b.Ctx, holder)
	require.NoError(t, err)
}

// TestFindAndListJobsEverywhere: one job in each state, found by id and
// listed, newest first, through the view over the three tables.
func TestFindAndListJobsEverywhere(t *testing.T) {
	b := setup(t)
	pending := b.enqueue(t, jobSpec{uniqueKey: "p"})
	scheduled := b.enqueue(t, jobSpec{delay: time.Hour, queue: "later"})
	b.enqueue(t, jobSpec{maxAttempts: 1})
	claimed := b.claim(t, "w", 2) // pending and the one that dies
	dies := claimed[1]
	nack(t, b, dies, "boom", 0, "")
	completes := b.enqueue(t, jobSpec{kind: "k", uniqueKey: "c"})
	running := b.claim(t, "w", 1)[0] // completes
	require.Equal(t, completes, running.ID)
	kept, err := b.Queries.AckBatchKeep(b.Ctx, db.AckBatchKeepParams{Ids: []int64{completes}, Attempts: []int32{1},
		KeepMs: []int64{3_600_000}, Results: []json.RawMessage{json.RawMessage(`{"sent":true}`)}})
	require.NoError(t, err)
	require.Len(t, kept, 1)
	cancelled := b.enqueue(t, jobSpec{})
	_, err = b.Queries.Cancel(b.Ctx, []int64{cancelled})
	require.NoError(t, err)

	state := map[int64]string{}
	for _, id := range []int64{pending, scheduled, dies.ID, completes, cancelled} {
		j, err := b.Queries.FindJob(b.Ctx, id)
		require.NoError(t, err)
		state[id] = j.State
	}
	require.Equal(t, map[int64]string{pending: "running", scheduled: "scheduled", dies.ID: "dead",
		completes: "completed", cancelled: "cancelled"}, state)
	done, err := b.Queries.FindJob(b.Ctx, completes)
	require.NoError(t, err)
	require.JSONEq(t, `{"sent":true}`, string(done.Result))
	require.NotNil(t, done.FinishedAt)
	_, err = b.Queries.FindJob(b.Ctx, 987654)
	require.ErrorIs(t, err, pgx.ErrNoRows)

	all := func(p db.ListJobsParams) []int64 {
		t.Helper()
		if p.BeforeID == 0 {
			p.BeforeID = math.MaxInt64
		}
		if p.States == nil {
			p.States = []string{}
		}
		if p.MaxJobs == 0 {
			p.MaxJobs = 100
		}
		rows, err := b.Queries.ListJobs(b.Ctx, p)
		require.NoError(t, err)
		return ids2(rows)
	}
	require.Equal(t, []int64{cancelled, completes, dies.ID, scheduled, pending}, all(db.ListJobsParams{}), "newest first, every table")
	require.Equal(t, []int64{completes, dies.ID}, all(db.ListJobsParams{States: []string{"dead", "completed"}}))
	q := "later"
	require.Equal(t, []int64{scheduled}, all(db.ListJobsParams{Queue: &q}))
	require.Equal(t, []int64{cancelled, completes}, all(db.ListJobsParams{MaxJobs: 2}))
	require.Equal(t, []int64{dies.ID, scheduled}, all(db.ListJobsParams{BeforeID: completes, MaxJobs: 2}), "the keyset page after completes")
	future := time.Now().Add(time.Hour)
	require.Empty(t, all(db.ListJobsParams{CreatedFrom: &future}))

	byKey, err := b.Queries.ListJobsByKey(b.Ctx, db.ListJobsByKeyParams{UniqueKey: "c", BeforeID: math.MaxInt64, States: []string{}, MaxJobs: 10})
	require.NoError(t, err)
	require.Equal(t, []int64{completes}, ids2(byKey), "a completed job keeps its key in the history")
}

func ids2(rows []db.HopperAllJob) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}
