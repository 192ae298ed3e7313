package hopper_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// everyState puts one job in each state and returns their ids by state:
// written straight into the tables (testfactory) as a worker would have
// left them, completed with its result kept, dead out of attempts,
// running on a lease; the cancelled one is cancelled through the Client.
func everyState(t *testing.T, b *bundle) (ids map[jobs.State]int64) {
	t.Helper()
	job := func(o testfactory.JobOpts) int64 {
		t.Helper()
		return testfactory.Job(b.Ctx, t, b.Pool, &o).ID
	}
	payload := func(to string) json.RawMessage {
		raw, err := json.Marshal(Email{To: to})
		require.NoError(t, err)
		return raw
	}
	ids = map[jobs.State]int64{
		jobs.StatePending:   job(testfactory.JobOpts{Kind: "report", Queue: "idle", Payload: payload("pending")}),
		jobs.StateScheduled: job(testfactory.JobOpts{Kind: "report", State: testfactory.Scheduled, Payload: payload("scheduled"), RunAt: testfactory.Ptr(time.Now().Add(time.Hour))}),
		jobs.StateCompleted: job(testfactory.JobOpts{Kind: "email", Queue: "mail", State: testfactory.Completed, Payload: payload("completed"), Result: json.RawMessage(`42`)}),
		jobs.StateDead: job(testfactory.JobOpts{
			Kind: "email", Queue: "mail", State: testfactory.Dead, Payload: payload("dead"), MaxAttempts: 1, Reason: "out of attempts",
			Errors: json.RawMessage(`[{"attempt": 1, "at": "2026-01-01T00:00:00Z", "owner": "w", "error": "no such mailbox"}]`),
		}),
		jobs.StateRunning:   job(testfactory.JobOpts{Kind: "email", Queue: "slow", State: testfactory.Running, Payload: payload("running")}),
		jobs.StateCancelled: job(testfactory.JobOpts{Kind: "report", Queue: "idle", Payload: payload("cancelled")}),
	}
	require.NoError(t, b.client.CancelJob(b.Ctx, ids[jobs.StateCancelled]))
	return ids
}

// TestJobInEveryState: Job finds a job wherever it is, with the fields of
// its state, and a kind decodes any row.
func TestJobInEveryState(t *testing.T) {
	b := setup(t)
	ids := everyState(t, b)
	for state, id := range ids {
		row, err := b.client.GetJob(b.Ctx, id)
		require.NoError(t, err, state)
		require.Equal(t, state, row.State)
		require.Equal(t, id, row.ID)
		require.False(t, row.CreatedAt.IsZero(), state)
		require.False(t, row.RunAt.IsZero(), state)
		require.Equal(t, !state.Live(), row.FinishedAt != nil, "%s: FinishedAt is set once finished", state)
		require.Equal(t, state == jobs.StateRunning, row.LeaseUntil != nil && row.LeaseOwner != "", "%s: a lease only while running", state)
	}
	done, err := b.client.GetJob(b.Ctx, ids[jobs.StateCompleted])
	require.NoError(t, err)
	require.JSONEq(t, "42", string(done.Result), "the handler's result is kept")
	require.Equal(t, 1, done.Attempt)
	typed, err := email.Decode(done)
	require.NoError(t, err)
	require.Equal(t, "completed", typed.Payload.To, "a kind decodes a row of any state")

	dead, err := b.client.GetJob(b.Ctx, ids[jobs.StateDead])
	require.NoError(t, err)
	require.Equal(t, "out of attempts", dead.Reason)
	require.Len(t, dead.Errors, 1)
	require.Equal(t, "no such mailbox", dead.Errors[0].Error)
	cancelled, err := b.client.GetJob(b.Ctx, ids[jobs.StateCancelled])
	require.NoError(t, err)
	require.Equal(t, "cancelled", cancelled.Reason)

	for _, id := range []int64{0, -3, 1 << 50} {
		_, err := b.client.GetJob(b.Ctx, id)
		require.ErrorIs(t, err, hopper.ErrNotFound, "id %d", id)
	}
}

// TestListJobs: filters, keyset pages, and the errors of bad parameters.
func TestListJobs(t *testing.T) {
	b := setup(t)
	ids := everyState(t, b)
	list := func(p hopper.ListParams) []int64 {
		t.Helper()
		page, err := b.client.ListJobs(b.Ctx, p)
		require.NoError(t, err)
		out := []int64{}
		for _, r := range page.Jobs {
			out = append(out, r.ID)
		}
		return out
	}
	all := list(hopper.ListParams{})
	require.Len(t, all, 6, "every state, every table")
	for i := 1; i < len(all); i++ {
		require.Greater(t, all[i-1], all[i], "newest first")
	}
	require.Equal(t, []int64{ids[jobs.StateRunning]}, list(hopper.ListParams{States: []jobs.State{jobs.StateRunning}}))
	require.ElementsMatch(t, []int64{ids[jobs.StateCompleted], ids[jobs.StateDead]},
		list(hopper.ListParams{States: []jobs.State{jobs.StateCompleted, jobs.StateDead}}))
	require.ElementsMatch(t, []int64{ids[jobs.StatePending], ids[jobs.StateCancelled]}, list(hopper.ListParams{Queue: "idle"}))
	require.ElementsMatch(t, []int64{ids[jobs.StatePending], ids[jobs.StateScheduled], ids[jobs.StateCancelled]}, list(hopper.ListParams{Kind: "report"}))
	require.Empty(t, list(hopper.ListParams{CreatedFrom: time.Now().Add(time.Hour)}))
	require.Len(t, list(hopper.ListParams{CreatedTo: time.Now().Add(time.Hour)}), 6)

	// A unique key: the live holder, and a completed job that had it.
	keyed := b.enqueue(t, report, "keyed", jobs.UniqueKey("invoice-1"), jobs.Queue("idle"))
	require.Equal(t, []int64{keyed}, list(hopper.ListParams{UniqueKey: "invoice-1"}))
	require.Empty(t, list(hopper.ListParams{UniqueKey: "invoice-1", States: []jobs.State{jobs.StateDead}}))

	// Pages: two at a time, through all seven jobs, each id once.
	var paged []int64
	p := hopper.ListParams{Limit: 2}
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10, "paging ends")
		page, err := b.client.ListJobs(b.Ctx, p)
		require.NoError(t, err)
		for _, r := range page.Jobs {
			paged = append(paged, r.ID)
		}
		if page.Next == "" {
			require.Len(t, page.Jobs, 1, "the last page holds the rest")
			break
		}
		require.Len(t, page.Jobs, 2)
		p.After = page.Next
	}
	require.Equal(t, append([]int64{keyed}, all...), paged)

	for name, bad := range map[string]struct {
		p    hopper.ListParams
		want error
	}{
		"cursor not base64":   {hopper.ListParams{After: "%%%"}, hopper.ErrInvalidCursor},
		"cursor of nothing":   {hopper.ListParams{After: "aGVsbG8"}, hopper.ErrInvalidCursor},
		"a job id as cursor":  {hopper.ListParams{After: "42"}, hopper.ErrInvalidCursor},
		"limit too large":     {hopper.ListParams{Limit: hopper.MaxListLimit + 1}, hopper.ErrInvalidFilter},
		"negative limit":      {hopper.ListParams{Limit: -1}, hopper.ErrInvalidFilter},
		"unknown state":       {hopper.ListParams{States: []jobs.State{"done"}}, jobs.ErrInvalidState},
		"empty time range":    {hopper.ListParams{CreatedFrom: time.Now(), CreatedTo: time.Now().Add(-time.Hour)}, hopper.ErrInvalidFilter},
		"range of no instant": {hopper.ListParams{CreatedFrom: time.Unix(5, 0), CreatedTo: time.Unix(5, 0)}, hopper.ErrInvalidFilter},
	} {
		_, err := b.client.ListJobs(b.Ctx, bad.p)
		require.ErrorIs(t, err, bad.want, name)
	}
}

// TestStats: counts per queue and kind, totals, paused queues, rates.
func TestStats(t *testing.T) {
	b := setup(t)
	ids := everyState(t, b)
	_, err := b.client.PauseQueue(b.Ctx, "idle")
	require.NoError(t, err)
	s, err := b.client.GetStats(b.Ctx)
	require.NoError(t, err)
	require.Equal(t, hopper.Counts{Ready: 1, Scheduled: 1, Running: 1, Dead: 1, Cancelled: 1, OldestReady: s.Total.OldestReady}, s.Total)
	require.EqualValues(t, 3, s.Total.Live())
	byQueue := map[string]hopper.StatsRow{}
	for _, r := range s.Rows {
		byQueue[r.Queue+"/"+r.Kind] = r
	}
	require.True(t, byQueue["idle/report"].Paused)
	require.EqualValues(t, 1, byQueue["idle/report"].Cancelled)
	require.False(t, byQueue["mail/email"].Paused)
	require.EqualValues(t, 1, byQueue["slow/email"].Running)
	require.Zero(t, s.Total.RetryRate())

	// Rates come from two readings.
	before := s
	b.enqueue(t, report, "one more", jobs.Queue("idle"))
	testdb.WaitFor(t, "the statistics collector counts the insert", func() bool {
		s, err = b.client.GetStats(b.Ctx)
		require.NoError(t, err)
		return s.Enqueued > before.Enqueued
	})
	enqueued, _ := s.Rates(before)
	require.Greater(t, enqueued, 0.0)
	_ = ids
}

// TestCancel: pending, scheduled and running jobs are cancelled and kept;
// finished and unknown ones are reported, with errors to match.
func TestCancel(t *testing.T) {
	b := setup(t)
	ids := everyState(t, b)
	results, err := b.client.CancelJobs(b.Ctx, ids[jobs.StatePending], ids[jobs.StateScheduled], ids[jobs.StateRunning],
		ids[jobs.StateCompleted], ids[jobs.StateDead], ids[jobs.StateCancelled], 999_999, ids[jobs.StatePending])
	require.NoError(t, err)
	require.Len(t, results, 7, "one result per distinct id")
	byID := map[int64]hopper.CancelResult{}
	for _, r := range results {
		byID[r.ID] = r
	}
	for _, s := range []jobs.State{jobs.StatePending, jobs.StateScheduled, jobs.StateRunning} {
		r := byID[ids[s]]
		require.NoError(t, r.Err, s)
		require.Equal(t, s, r.Was)
		require.Equal(t, jobs.StateCancelled, b.state(t, ids[s]), "%s: kept as cancelled", s)
	}
	for _, s := range []jobs.State{jobs.StateCompleted, jobs.StateDead, jobs.StateCancelled} {
		r := byID[ids[s]]
		require.ErrorIs(t, r.Err, hopper.ErrFinished, s)
		require.Equal(t, s, r.Was)
	}
	require.ErrorIs(t, byID[999_999].Err, hopper.ErrNotFound)
	require.Empty(t, byID[999_999].Was)

	require.ErrorIs(t, b.client.CancelJob(b.Ctx, 999_999), hopper.ErrNotFound)
	require.ErrorIs(t, b.client.CancelJob(b.Ctx, ids[jobs.StateDead]), hopper.ErrFinished)
	none, err := b.client.CancelJobs(b.Ctx)
	require.NoError(t, err)
	require.Empty(t, none)

	// In the caller's transaction: nothing happens unless it commits.
	id := b.enqueue(t, report, "tx")
	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	require.NoError(t, b.client.CancelJobTx(b.Ctx, tx, id))
	require.NoError(t, tx.Rollback(b.Ctx))
	require.Equal(t, jobs.StatePending, b.state(t, id))
}

// TestRetryAndPurgeDead: by id, kind, queue, age and state; a unique key
// held again keeps a job dead; a filter that matches everything needs All.
func TestRetryAndPurgeDead(t *testing.T) {
	b := setup(t)
	died := func(kind, key string) int64 {
		return testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{
			State: testfactory.Dead, Kind: kind, Queue: "mail", Payload: json.RawMessage(`{"to":"x"}`),
			MaxAttempts: 1, UniqueKey: key, Reason: "out of attempts",
		}).ID
	}
	dead := []int64{died("email", "key-a"), died("email", "key-b"), died("email", "key-c")}
	other := died("report", "")
	cancelled := b.enqueue(t, email, "z")
	require.NoError(t, b.client.CancelJob(b.Ctx, cancelled))

	_, err := b.client.RetryDeadJobs(b.Ctx, hopper.DeadFilter{})
	require.ErrorIs(t, err, hopper.ErrInvalidFilter, "no filter: say All")
	_, err = b.client.PurgeDeadJobs(b.Ctx, hopper.DeadFilter{})
	require.ErrorIs(t, err, hopper.ErrInvalidFilter)
	_, err = b.client.RetryDeadJobs(b.Ctx, hopper.DeadFilter{All: true, States: []jobs.State{jobs.StatePending}})
	require.ErrorIs(t, err, hopper.ErrInvalidFilter, "only dead and cancelled")

	// By id; the key of the second is held again, so it stays dead.
	b.enqueue(t, email, "holder", jobs.UniqueKey("key-b"))
	res, err := b.client.RetryDeadJobs(b.Ctx, hopper.DeadFilter{IDs: []int64{dead[0], dead[1], 424242}})
	require.NoError(t, err)
	require.Equal(t, []int64{dead[0]}, res.Retried)
	require.Equal(t, []int64{dead[1]}, res.Kept)
	row, err := b.client.GetJob(b.Ctx, dead[0])
	require.NoError(t, err)
	require.Equal(t, jobs.StatePending, row.State)
	require.Equal(t, 1, row.Attempt, "the attempt count, the fencing token, stays")
	require.Equal(t, 2, row.MaxAttempts, "as many attempts again as it had")

	// By kind: only dead ones unless cancelled are asked for.
	res, err = b.client.RetryDeadJobs(b.Ctx, hopper.DeadFilter{Kind: "email"})
	require.NoError(t, err)
	require.Equal(t, []int64{dead[2]}, res.Retried)
	require.Equal(t, []int64{dead[1]}, res.Kept)
	require.Equal(t, jobs.StateCancelled, b.state(t, cancelled))
	res, err = b.client.RetryDeadJobs(b.Ctx, hopper.DeadFilter{Kind: "email", States: []jobs.State{jobs.StateCancelled}})
	require.NoError(t, err)
	require.Equal(t, []int64{cancelled}, res.Retried)

	// Purge by age, queue and all.
	n, err := b.client.PurgeDeadJobs(b.Ctx, hopper.DeadFilter{DiedBefore: time.Now().Add(-time.Hour)})
	require.NoError(t, err)
	require.Zero(t, n, "none died an hour ago")
	n, err = b.client.PurgeDeadJobs(b.Ctx, hopper.DeadFilter{Queue: "mail", Kind: "report"})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	_, err = b.client.GetJob(b.Ctx, other)
	require.ErrorIs(t, err, hopper.ErrNotFound, "purged for good")
	n, err = b.client.PurgeDeadJobs(b.Ctx, hopper.DeadFilter{All: true})
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the one kept dead")
}

// TestQueues: pause and resume are idempotent, known queues only, listed
// with their state and jobs.
func TestQueues(t *testing.T) {
	b := setup(t)
	b.enqueue(t, email, "a")
	b.enqueue(t, report, "b", jobs.Queue("reports"), jobs.Delay(time.Hour))

	_, err := b.client.PauseQueue(b.Ctx, "nope")
	require.ErrorIs(t, err, hopper.ErrUnknownQueue)
	_, err = b.client.ResumeQueue(b.Ctx, "nope")
	require.ErrorIs(t, err, hopper.ErrUnknownQueue)
	_, err = b.client.PurgeQueue(b.Ctx, "nope")
	require.ErrorIs(t, err, hopper.ErrUnknownQueue)
	_, err = b.client.PauseQueue(b.Ctx, "")
	require.ErrorIs(t, err, jobs.ErrInvalidQueue)

	p, err := b.client.PauseQueue(b.Ctx, "mail")
	require.NoError(t, err)
	require.True(t, p.Changed)
	again, err := b.client.PauseQueue(b.Ctx, "mail")
	require.NoError(t, err, "pausing twice is not an error")
	require.False(t, again.Changed)
	require.True(t, again.PausedAt.Equal(p.PausedAt))
	// A queue known only by a scheduled job can be paused too.
	_, err = b.client.PauseQueue(b.Ctx, "reports")
	require.NoError(t, err)

	queues, err := b.client.ListQueues(b.Ctx)
	require.NoError(t, err)
	require.Len(t, queues, 2)
	require.Equal(t, "mail", queues[0].Name)
	require.True(t, queues[0].Paused())
	require.EqualValues(t, 1, queues[0].Ready)
	require.Equal(t, "reports", queues[1].Name)
	require.EqualValues(t, 1, queues[1].Scheduled)

	res, err := b.client.ResumeQueue(b.Ctx, "mail")
	require.NoError(t, err)
	require.True(t, res.Changed)
	require.True(t, res.PausedAt.Equal(p.PausedAt), "a resume says since when the queue was paused")
	res, err = b.client.ResumeQueue(b.Ctx, "mail")
	require.NoError(t, err, "resuming twice is not an error")
	require.Equal(t, hopper.PauseResult{}, res)

	// A queue a worker served is known with no job at all, and listed.
	b.runUntil(t, worker.Config{Queues: map[string]int{"empty": 1}}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, report, func(context.Context, *jobs.Job[Email]) error { return nil }))
	}, "registered", func() bool {
		_, err := b.client.PauseQueue(b.Ctx, "empty")
		return err == nil
	})
	queues, err = b.client.ListQueues(b.Ctx)
	require.NoError(t, err)
	require.Len(t, queues, 3)
	require.Equal(t, "empty", queues[0].Name)
	require.True(t, queues[0].Paused())

	n, err := b.client.PurgeQueue(b.Ctx, "reports")
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	// In the caller's transaction: the pause holds when it commits.
	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	_, err = b.client.PauseQueueTx(b.Ctx, tx, "mail")
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.Ctx))
	queues, err = b.client.ListQueues(b.Ctx)
	require.NoError(t, err)
	require.False(t, queues[1].Paused(), "rolled back")
}
