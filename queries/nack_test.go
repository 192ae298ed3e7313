package queries_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
)

// nack records a failure: a retry, or with a reason a permanent one.
func nack(t *testing.T, b *bundle, j db.HopperJob, msg string, backoff time.Duration, deadReason string) []db.NackBatchRow {
	t.Helper()
	action := "retry"
	if deadReason != "" {
		action = "dead"
	}
	return settle(t, b, j, action, msg, backoff, deadReason)
}

// settle runs NackBatch for one claim with the given action.
func settle(t *testing.T, b *bundle, j db.HopperJob, action, msg string, backoff time.Duration, reason string) []db.NackBatchRow {
	t.Helper()
	rows, err := b.Queries.NackBatch(b.Ctx, db.NackBatchParams{
		Ids: []int64{j.ID}, Attempts: []int32{j.Attempt}, Actions: []string{action}, Messages: []string{msg},
		BackoffsMs: []int64{backoff.Milliseconds()}, Reasons: []string{reason},
	})
	require.NoError(t, err)
	return rows
}

func TestNackReschedulesWithBackoff(t *testing.T) {
	b := setup(t)
	b.enqueue(t, jobSpec{maxAttempts: 3})
	j := b.claim(t, "w", 1)[0]
	before := b.dbNow(t)
	rows := nack(t, b, j, "smtp timeout", time.Hour, "")
	after := b.dbNow(t)
	require.Equal(t, []db.NackBatchRow{{ID: j.ID, Attempt: 1, Dead: false}}, rows)

	got, err := b.Queries.GetJob(b.Ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, "scheduled", got.State, "waiting out its backoff, off the ready index")
	require.Nil(t, got.LeaseOwner)
	require.Nil(t, got.LeaseUntil)
	requireBetween(t, before.Add(time.Hour), after.Add(time.Hour), got.RunAt, "due one backoff after the nack")
	h := history(t, got.Errors)
	require.Len(t, h, 1)
	require.Equal(t, historyEntry{Attempt: 1, At: h[0].At, Owner: "w", Error: "smtp timeout"}, h[0])
	require.Empty(t, b.claim(t, "w", 1), "not claimable before its backoff")
}

func TestNackLastAttemptDeadLetters(t *testing.T) {
	b := setup(t)
	id := b.enqueue(t, jobSpec{maxAttempts: 3, uniqueKey: "once"})
	for attempt := int32(1); attempt <= 3; attempt++ {
		got := b.claim(t, fmt.Sprintf("w%d", attempt), 1)
		require.Len(t, got, 1)
		require.Equal(t, attempt, got[0].Attempt)
		rows := nack(t, b, got[0], fmt.Sprintf("failure %d", attempt), 0, "")
		require.Equal(t, []db.NackBatchRow{{ID: id, Attempt: attempt, Dead: attempt == 3}}, rows)
	}
	live, dead := b.Totals(t)
	require.Zero(t, live)
	require.EqualValues(t, 1, dead)

	d, err := b.Queries.GetDead(b.Ctx, id)
	require.NoError(t, err)
	require.Equal(t, "out of attempts", d.Reason)
	require.Equal(t, int32(3), d.Attempt)
	require.Equal(t, "once", *d.UniqueKey)
	h := history(t, d.Errors)
	require.Len(t, h, 3, "the full history travels to the dead table")
	for i, e := range h {
		require.Equal(t, int32(i+1), e.Attempt)
		require.Equal(t, fmt.Sprintf("failure %d", i+1), e.Error)
		require.Equal(t, fmt.Sprintf("w%d", i+1), e.Owner)
	}
}

func TestNackPermanentFailure(t *testing.T) {
	b := setup(t)
	id := b.enqueue(t, jobSpec{maxAttempts: 25})
	j := b.claim(t, "w", 1)[0]
	rows := nack(t, b, j, "cannot decode payload", 0, "undecodable payload")
	require.Equal(t, []db.NackBatchRow{{ID: id, Attempt: 1, Dead: true}}, rows)
	d, err := b.Queries.GetDead(b.Ctx, id)
	require.NoError(t, err)
	require.Equal(t, "undecodable payload", d.Reason)
	require.Equal(t, int32(1), d.Attempt, "no retries were burnt")
}

func TestNackBatchMixed(t *testing.T) {
	b := setup(t)
	b.enqueue(t, jobSpec{maxAttempts: 1})
	b.enqueue(t, jobSpec{maxAttempts: 5})
	js := b.claim(t, "w", 2)
	require.Len(t, js, 2)
	rows, err := b.Queries.NackBatch(b.Ctx, db.NackBatchParams{
		Ids: ids(js), Attempts: []int32{1, 1}, Actions: []string{"retry", "retry"}, Messages: []string{"a", "b"},
		BackoffsMs: []int64{0, 0}, Reasons: []string{"", ""},
	})
	require.NoError(t, err)
	want := []db.NackBatchRow{
		{ID: js[0].ID, Attempt: 1, Dead: js[0].MaxAttempts == 1},
		{ID: js[1].ID, Attempt: 1, Dead: js[1].MaxAttempts == 1},
	}
	require.ElementsMatch(t, want, rows)
	empty, err := b.Queries.NackBatch(b.Ctx, db.NackBatchParams{})
	require.NoError(t, err)
	require.Empty(t, empty)
}

// TestNackSnooze: a snoozed job waits, scheduled, without an entry in its
// history and without being charged: its next claim has as many attempts
// left as this one had.
func TestNackSnooze(t *testing.T) {
	b := setup(t)
	id := b.enqueue(t, jobSpec{maxAttempts: 2})
	j := b.claim(t, "w", 1)[0]
	before := b.dbNow(t)
	rows := settle(t, b, j, "snooze", "", time.Hour, "")
	after := b.dbNow(t)
	require.Equal(t, []db.NackBatchRow{{ID: id, Attempt: 1, Dead: false}}, rows)
	got := b.job(t, id)
	require.Equal(t, "scheduled", got.State)
	requireBetween(t, before.Add(time.Hour), after.Add(time.Hour), got.RunAt, "due when asked")
	require.JSONEq(t, "[]", string(got.Errors), "a snooze is not a failure")
	require.Equal(t, int32(1), got.Attempt, "attempt is the fencing token: it never goes down")
	require.Equal(t, int32(3), got.MaxAttempts, "the snoozed claim is not charged")
	require.Nil(t, got.LeaseOwner)

	// Snoozed on every attempt, it never runs out of attempts.
	for attempt := int32(2); attempt <= 6; attempt++ {
		_, err := b.Pool.Exec(b.Ctx, "UPDATE hopper_jobs SET state = 'pending', run_at = now() WHERE id = $1", id)
		require.NoError(t, err)
		j = b.claim(t, "w", 1)[0]
		require.Equal(t, attempt, j.Attempt)
		require.Equal(t, []db.NackBatchRow{{ID: id, Attempt: attempt, Dead: false}}, settle(t, b, j, "snooze", "", time.Minute, ""))
	}
	require.Equal(t, int32(2+6), b.job(t, id).MaxAttempts, "six snoozes, six claims given back")
	require.JSONEq(t, `{"hopper.uncharged": "6"}`, string(b.job(t, id).Meta), "and counted, for Row.Attempts")
}

// TestNackCancel: a handler's own cancel moves the job to the dead table as
// cancelled, with its entry, whatever attempts it had left.
func TestNackCancel(t *testing.T) {
	b := setup(t)
	id := b.enqueue(t, jobSpec{maxAttempts: 25})
	j := b.claim(t, "w", 1)[0]
	rows := settle(t, b, j, "cancel", "cancelled: the account is gone", 0, "")
	require.Equal(t, []db.NackBatchRow{{ID: id, Attempt: 1, Dead: true}}, rows)
	d, err := b.Queries.GetDead(b.Ctx, id)
	require.NoError(t, err)
	require.Equal(t, "cancelled", d.State)
	require.Equal(t, "cancelled", d.Reason)
	h := history(t, d.Errors)
	require.Len(t, h, 1)
	require.Equal(t, "cancelled: the account is gone", h[0].Error)
	require.Equal(t, "w", h[0].Owner)
	live, dead := b.Totals(t)
	require.Zero(t, live)
	require.Zero(t, dead, "cancelled, not dead")

	// Fenced like every nack: a stale claim's cancel changes nothing.
	id2 := b.enqueue(t, jobSpec{})
	j2 := b.claim(t, "w", 1)[0]
	b.expire(t, j2)
	_, err = b.Queries.Sweep(b.Ctx, db.SweepParams{MaxJobs: 10})
	require.NoError(t, err)
	require.Empty(t, settle(t, b, j2, "cancel", "late", 0, ""))
	require.Equal(t, "pending", b.job(t, id2).State)
}
