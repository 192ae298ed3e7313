package hopper_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
	"github.com/hopperq/hopper/jobs"
)

// TestReleaseWorkerJobs: the operator's side of a crash. A gone worker's
// jobs are handed back on request, charged and woken; a live worker's only
// when forced; an unknown id is refused; other workers' jobs stay theirs.
func TestReleaseWorkerJobs(t *testing.T) {
	b := setup(t)
	testfactory.Worker(b.Ctx, t, b.Pool, &testfactory.WorkerOpts{ID: "gone-1", StaleAfter: time.Second, LastBeatAgo: time.Minute})
	testfactory.Worker(b.Ctx, t, b.Pool, &testfactory.WorkerOpts{ID: "live-1", Host: "node-b", StaleAfter: time.Hour})
	held := func(owner string, maxAttempts int32) int64 {
		return testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{
			State: testfactory.Running, LeaseOwner: owner, MaxAttempts: maxAttempts}).ID
	}
	goneJob, lastTry, liveJob := held("gone-1", 3), held("gone-1", 1), held("live-1", 3)

	list, err := b.client.ListWorkers(b.Ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "gone-1", list[0].ID)
	require.True(t, list[0].Gone)
	require.Equal(t, 2, list[0].JobsHeld)
	require.GreaterOrEqual(t, list[0].SinceBeat, time.Minute)
	require.Equal(t, "live-1", list[1].ID)
	require.False(t, list[1].Gone)
	require.Equal(t, 1, list[1].JobsHeld)
	require.Equal(t, []string{"default"}, list[1].Queues)

	for _, c := range []struct {
		name string
		id   string
		opts hopper.ReleaseOptions
		want error
	}{
		{"an unknown worker", "nobody", hopper.ReleaseOptions{}, hopper.ErrUnknownWorker},
		{"a live worker, unforced", "live-1", hopper.ReleaseOptions{}, hopper.ErrWorkerAlive},
	} {
		_, err := b.client.ReleaseWorkerJobs(b.Ctx, c.id, c.opts)
		require.ErrorIs(t, err, c.want, c.name)
	}
	_, err = b.client.ReleaseWorkerJobs(b.Ctx, "", hopper.ReleaseOptions{})
	require.ErrorContains(t, err, "empty worker id")
	require.Equal(t, jobs.StateRunning, b.state(t, liveJob), "refused: nothing released")

	res, err := b.client.ReleaseWorkerJobs(b.Ctx, "gone-1", hopper.ReleaseOptions{})
	require.NoError(t, err)
	require.Equal(t, []int64{goneJob}, res.Requeued)
	require.Equal(t, []int64{lastTry}, res.Dead)
	require.Equal(t, jobs.StatePending, b.state(t, goneJob))
	require.Equal(t, jobs.StateDead, b.state(t, lastTry))
	info, err := b.client.GetJob(b.Ctx, goneJob)
	require.NoError(t, err)
	require.Len(t, info.Errors, 1, "charged: the attempt is in its history")
	require.Equal(t, "released by an operator", info.Errors[0].Error)
	require.Equal(t, jobs.StateRunning, b.state(t, liveJob), "another worker's job")

	res, err = b.client.ReleaseWorkerJobs(b.Ctx, "live-1", hopper.ReleaseOptions{Force: true})
	require.NoError(t, err)
	require.Equal(t, []int64{liveJob}, res.Requeued)
	require.Equal(t, jobs.StatePending, b.state(t, liveJob))
}
