package hopper_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
	"github.com/hopperq/hopper/jobs"
)

// TestGetQueueDepth: each count is of its own state and queue, exact
// below the limit and capped at it, and the oldest ready job's wait is the
// claim lag.
func TestGetQueueDepth(t *testing.T) {
	hourAgo := time.Now().Add(-time.Hour)
	later := time.Now().Add(time.Hour)
	// jobs writes n jobs of a state in a queue.
	type jobsOf struct {
		queue, state string
		n            int
		runAt        *time.Time
	}
	cases := []struct {
		name  string
		jobs  []jobsOf
		queue string
		limit int
		want  hopper.QueueDepth // OldestReady: checked apart
		lag   bool              // the oldest ready job waited an hour
	}{
		{name: "an unknown queue is empty", queue: "nothing", want: hopper.QueueDepth{Queue: "nothing"}},
		{
			name:  "ready",
			jobs:  []jobsOf{{"q", testfactory.Pending, 3, &hourAgo}},
			queue: "q", want: hopper.QueueDepth{Queue: "q", Ready: 3}, lag: true,
		},
		{
			name:  "scheduled, and pending jobs not due yet are not ready",
			jobs:  []jobsOf{{"q", testfactory.Scheduled, 2, &later}, {"q", testfactory.Pending, 1, &later}},
			queue: "q", want: hopper.QueueDepth{Queue: "q", Scheduled: 2},
		},
		{
			name:  "running",
			jobs:  []jobsOf{{"q", testfactory.Running, 4, nil}},
			queue: "q", want: hopper.QueueDepth{Queue: "q", Running: 4},
		},
		{
			name: "other queues and finished jobs do not count",
			jobs: []jobsOf{
				{"q", testfactory.Pending, 1, nil}, {"q", testfactory.Scheduled, 1, &later}, {"q", testfactory.Running, 1, nil},
				{"other", testfactory.Pending, 5, &hourAgo}, {"other", testfactory.Scheduled, 5, &later}, {"other", testfactory.Running, 5, nil},
				{"q", testfactory.Dead, 2, nil}, {"q", testfactory.Cancelled, 2, nil}, {"q", testfactory.Completed, 2, nil},
			},
			queue: "q", want: hopper.QueueDepth{Queue: "q", Ready: 1, Scheduled: 1, Running: 1},
		},
		{
			name:  "exactly the limit is not capped",
			jobs:  []jobsOf{{"q", testfactory.Pending, 3, nil}, {"q", testfactory.Scheduled, 3, &later}, {"q", testfactory.Running, 3, nil}},
			queue: "q", limit: 3, want: hopper.QueueDepth{Queue: "q", Ready: 3, Scheduled: 3, Running: 3},
		},
		{
			name:  "over the limit is capped",
			jobs:  []jobsOf{{"q", testfactory.Pending, 5, nil}, {"q", testfactory.Scheduled, 4, &later}, {"q", testfactory.Running, 6, nil}},
			queue: "q", limit: 3,
			want: hopper.QueueDepth{Queue: "q", Ready: 3, Scheduled: 3, Running: 3, ReadyCapped: true, ScheduledCapped: true, RunningCapped: true},
		},
		{
			name: "scheduled and running are capped over all queues: a lower bound",
			jobs: []jobsOf{
				{"q", testfactory.Pending, 2, nil}, {"q", testfactory.Scheduled, 1, &later}, {"q", testfactory.Running, 1, nil},
				{"other", testfactory.Scheduled, 3, &later}, {"other", testfactory.Running, 3, nil},
			},
			queue: "q", limit: 3,
			want: hopper.QueueDepth{Queue: "q", Ready: 2, Scheduled: 1, Running: 1, ScheduledCapped: true, RunningCapped: true},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			for _, js := range tc.jobs {
				for range js.n {
					testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{Queue: js.queue, State: js.state, RunAt: js.runAt})
				}
			}
			got, err := b.client.GetQueueDepth(b.Ctx, tc.queue, tc.limit)
			require.NoError(t, err)
			if tc.lag {
				require.InDelta(t, time.Hour.Seconds(), got.OldestReady.Seconds(), 60)
			} else if tc.want.Ready == 0 {
				require.Zero(t, got.OldestReady)
			}
			got.OldestReady = 0
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.want.ReadyCapped || tc.want.ScheduledCapped || tc.want.RunningCapped, got.Capped())

			// The Tx variant reads the same, and sees the transaction's own
			// writes.
			tx, err := b.Pool.Begin(b.Ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(b.Ctx) }()
			gotTx, err := b.client.GetQueueDepthTx(b.Ctx, tx, tc.queue, tc.limit)
			require.NoError(t, err)
			gotTx.OldestReady = 0
			require.Equal(t, tc.want, gotTx)
			testfactory.Job(b.Ctx, t, tx, &testfactory.JobOpts{Queue: tc.queue, State: testfactory.Running})
			gotTx, err = b.client.GetQueueDepthTx(b.Ctx, tx, tc.queue, 0)
			require.NoError(t, err)
			require.Positive(t, gotTx.Running)
		})
	}
}

// TestGetQueueDepthRefusesBadInput: an empty queue name or a limit out of
// range is an error that says which, before any statement runs.
func TestGetQueueDepthRefusesBadInput(t *testing.T) {
	b := setup(t)
	_, err := b.client.GetQueueDepth(b.Ctx, "", 0)
	require.ErrorIs(t, err, jobs.ErrInvalidQueue)
	for _, limit := range []int{-1, hopper.MaxDepthLimit + 1} {
		_, err = b.client.GetQueueDepth(b.Ctx, "q", limit)
		require.ErrorIs(t, err, hopper.ErrInvalidFilter)
		require.ErrorContains(t, err, "outside 1 to")
		_, err = b.client.ListQueueDepths(b.Ctx, limit)
		require.ErrorIs(t, err, hopper.ErrInvalidFilter)
	}
	d, err := b.client.GetQueueDepth(b.Ctx, "q", hopper.MaxDepthLimit)
	require.NoError(t, err)
	require.Equal(t, hopper.QueueDepth{Queue: "q"}, d)
}

// TestListQueueDepths: every queue known, by name: served or paused
// queues with no jobs, and queues known only by their ready, scheduled or
// running jobs.
func TestListQueueDepths(t *testing.T) {
	b := setup(t)
	later := time.Now().Add(time.Hour)
	testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{Queue: "ready", State: testfactory.Pending})
	testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{Queue: "ready", State: testfactory.Pending})
	testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{Queue: "scheduled", State: testfactory.Scheduled, RunAt: &later})
	testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{Queue: "running", State: testfactory.Running})
	testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{Queue: "dead", State: testfactory.Dead})
	_, err := b.Pool.Exec(b.Ctx, "INSERT INTO hopper_queues (name) VALUES ('served')")
	require.NoError(t, err)

	got, err := b.client.ListQueueDepths(b.Ctx, 0)
	require.NoError(t, err)
	for i := range got {
		got[i].OldestReady = 0
	}
	require.Equal(t, []hopper.QueueDepth{
		{Queue: "ready", Ready: 2},
		{Queue: "running", Running: 1},
		{Queue: "scheduled", Scheduled: 1},
		{Queue: "served"},
	}, got)

}

// TestListQueueDepthsOfNothing: no queue known, no rows.
func TestListQueueDepthsOfNothing(t *testing.T) {
	b := setup(t)
	got, err := b.client.ListQueueDepths(b.Ctx, 1)
	require.NoError(t, err)
	require.Empty(t, got)
}
