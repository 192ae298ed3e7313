package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
)

// The releaser hands back the running jobs of a worker gone without a
// clean stop (its row stale) and announces them, recording the reason in
// the job's errors; a live worker's jobs stay, unless named and forced, as
// a worker taking over its own ID at start does.
func TestReleaserHandsBackGoneWorkersJobs(t *testing.T) {
	t.Parallel()
	b := newPassBed(t)
	rel := newReleaser(b.q, b.log, b.metrics, &Config{SweepBatch: 10}, b.announce)
	register := func(id string, staleAfter time.Duration) {
		t.Helper()
		_, err := b.q.RegisterWorker(b.ctx, db.RegisterWorkerParams{ID: id, Host: "h-" + id, Pid: 7, HopperVersion: "test",
			Queues: []string{"default"}, StaleAfterMs: staleAfter.Milliseconds()})
		require.NoError(t, err)
	}
	register("gone", time.Millisecond)
	register("live", time.Hour)
	goneJob := b.enqueue(time.Now().Add(-2 * time.Second))
	require.Len(t, b.claim("gone", 60_000), 1)
	liveJob := b.enqueue(time.Now().Add(-time.Second))
	require.Len(t, b.claim("live", 60_000), 1)
	time.Sleep(20 * time.Millisecond) // "gone" misses its stale window

	rel.releaseGone(b.ctx, time.Hour)
	require.Equal(t, "pending", b.state(goneJob))
	require.Equal(t, "running", b.state(liveJob))
	require.Equal(t, []int64{goneJob}, b.sawAnnounced("release"))
	j, err := b.q.GetJob(b.ctx, goneJob)
	require.NoError(t, err)
	require.Contains(t, string(j.Errors), reasonWorkerGone)

	id := "live"
	gone, err := rel.releaseJobsOf(b.ctx, db.ReleaseWorkerJobsParams{WorkerID: &id, Force: true, Reason: reasonWorkerRestarted})
	require.NoError(t, err)
	require.Len(t, gone, 1)
	require.Equal(t, goneWorker{id: "live", host: "h-live", pid: 7, requeued: 1}, *gone[0])
	require.Equal(t, "pending", b.state(liveJob))
}
