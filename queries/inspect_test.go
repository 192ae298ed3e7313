package queries_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
)

func TestStats(t *testing.T) {
	b := setup(t)
	stats, err := b.q.Stats(b.ctx)
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

	stats, err = b.q.Stats(b.ctx)
	require.NoError(t, err)
	require.Len(t, stats, 2)
	def, mail := stats[0], stats[1]
	require.Equal(t, "default", def.Queue)
	require.Equal(t, "k", def.Kind)
	require.EqualValues(t, 1, def.Ready)
	require.EqualValues(t, 1, def.Scheduled)
	require.EqualValues(t, 1, def.Running)
	require.EqualValues(t, 1, def.Dead)
	require.InDelta(t, 1.0/3, def.RetryRate, 1e-9, "one of three live jobs has failed")
	require.GreaterOrEqual(t, def.OldestReadySeconds, 0.0)
	require.Equal(t, db.StatsRow{Queue: "mail", Kind: "send", Ready: 1, OldestReadySeconds: mail.OldestReadySeconds}, mail)
	require.False(t, math.IsNaN(mail.OldestReadySeconds))
}

func TestCancel(t *testing.T) {
	b := setup(t)
	pending := b.enqueue(t, jobSpec{queue: "later", delay: time.Hour})
	b.enqueue(t, jobSpec{})
	running := b.claim(t, "w", 1)[0].ID
	b.enqueue(t, jobSpec{maxAttempts: 1})
	deadJob := b.claim(t, "w", 1)[0]
	nack(t, b, deadJob, "x", 0, "")

	rows, err := b.q.Cancel(b.ctx, []int64{running, pending, 424242, deadJob.ID, pending})
	require.NoError(t, err)
	outcome := map[int64]string{}
	for _, r := range rows {
		outcome[r.ID] = r.Outcome
	}
	require.Equal(t, map[int64]string{
		pending: "cancelled", running: "running", 424242: "not_found", deadJob.ID: "dead",
	}, outcome)
	live, dead := b.totals(t)
	require.EqualValues(t, 1, live)
	require.EqualValues(t, 1, dead)

	empty, err := b.q.Cancel(b.ctx, nil)
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
	n, err := b.q.PurgeQueue(b.ctx, "q1")
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	n, err = b.q.PurgeQueue(b.ctx, "default")
	require.NoError(t, err)
	require.Zero(t, n)
	live, _ := b.totals(t)
	require.EqualValues(t, 2, live)
}

// killAll puts n jobs of kind k straight into the dead table.
func killAll(t *testing.T, b *bundle, kind string, n int, uniqueKey string) []int64 {
	t.Helper()
	var out []int64
	for range n {
		b.enqueue(t, jobSpec{kind: kind, maxAttempts: 1, uniqueKey: uniqueKey})
		got, err := b.q.Dequeue(b.ctx, db.DequeueParams{Queue: "default", Kinds: []string{kind}, MaxVersions: []int32{1}, MaxJobs: 1, Owner: "w", LeaseMs: 1000})
		require.NoError(t, err)
		require.Len(t, got, 1)
		nack(t, b, got[0], "fatal", 0, "")
		out = append(out, got[0].ID)
	}
	return out
}

func TestDeadListGetRetryPurge(t *testing.T) {
	b := setup(t)
	a := killAll(t, b, "alpha", 3, "")
	z := killAll(t, b, "zeta", 2, "")

	all, err := b.q.ListDead(b.ctx, db.ListDeadParams{BeforeDiedAt: time.Now().Add(time.Hour), BeforeID: math.MaxInt64, MaxJobs: 100})
	require.NoError(t, err)
	require.Len(t, all, 5)
	require.Equal(t, z[1], all[0].ID, "newest first")

	kind := "alpha"
	page1, err := b.q.ListDead(b.ctx, db.ListDeadParams{Kind: &kind, BeforeDiedAt: time.Now().Add(time.Hour), BeforeID: math.MaxInt64, MaxJobs: 2})
	require.NoError(t, err)
	require.Equal(t, []int64{a[2], a[1]}, []int64{page1[0].ID, page1[1].ID})
	page2, err := b.q.ListDead(b.ctx, db.ListDeadParams{Kind: &kind, BeforeDiedAt: page1[1].DiedAt, BeforeID: page1[1].ID, MaxJobs: 2})
	require.NoError(t, err)
	require.Len(t, page2, 1)
	require.Equal(t, a[0], page2[0].ID)

	retried, err := b.q.RetryDead(b.ctx, []int64{a[0], 777})
	require.NoError(t, err)
	require.Equal(t, []int64{a[0]}, retried)
	j, err := b.q.GetJob(b.ctx, a[0])
	require.NoError(t, err, "the job keeps its id")
	require.Equal(t, "pending", j.State)
	require.Zero(t, j.Attempt)
	require.Len(t, history(t, j.Errors), 1, "history is kept")

	byKind, err := b.q.RetryDeadKind(b.ctx, "zeta")
	require.NoError(t, err)
	require.ElementsMatch(t, z, byKind)

	n, err := b.q.PurgeDead(b.ctx, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Zero(t, n, "nothing died that long ago")
	n, err = b.q.PurgeDead(b.ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	live, dead := b.totals(t)
	require.EqualValues(t, 3, live)
	require.Zero(t, dead)
}

// A dead job whose unique key a live job holds again stays dead: retrying
// it must never lose it.
func TestRetryDeadKeepsConflictingJob(t *testing.T) {
	b := setup(t)
	dead := killAll(t, b, "k", 1, "invoice-9")
	holder := b.enqueue(t, jobSpec{uniqueKey: "invoice-9"})
	retried, err := b.q.RetryDead(b.ctx, dead)
	require.NoError(t, err)
	require.Empty(t, retried)
	_, err = b.q.GetDead(b.ctx, dead[0])
	require.NoError(t, err, "still in the dead table")
	_, err = b.q.GetJob(b.ctx, holder)
	require.NoError(t, err)
}
