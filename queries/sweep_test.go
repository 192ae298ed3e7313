package queries_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
)

func TestSweep(t *testing.T) {
	b := setup(t)
	ranOut := testfactory.Ptr(b.dbNow(t).Add(-time.Second))
	claim := func(maxAttempts int32, leaseUntil *time.Time) int64 {
		return testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{
			State: testfactory.Running, Attempt: 1, MaxAttempts: maxAttempts,
			LeaseOwner: "crashed", LeaseUntil: leaseUntil,
		}).ID
	}
	requeue := claim(2, ranOut)
	bury := claim(1, ranOut)
	healthy := claim(1, nil) // a lease 30 seconds long

	rows, err := b.Queries.Sweep(b.Ctx, db.SweepParams{MaxJobs: 100})
	require.NoError(t, err)
	moved := map[int64]bool{}
	for _, r := range rows {
		require.Equal(t, "default", r.Queue)
		moved[r.ID] = r.Dead
	}
	require.Equal(t, map[int64]bool{requeue: false, bury: true}, moved)

	j, err := b.Queries.GetJob(b.Ctx, requeue)
	require.NoError(t, err)
	require.Equal(t, "pending", j.State)
	for _, r := range rows {
		if r.ID == requeue {
			require.True(t, j.RunAt.Equal(r.RunAt), "the requeued job's place in claim order is reported, for the wake-up")
			require.Equal(t, j.Priority, r.Priority)
		}
	}
	require.Nil(t, j.LeaseOwner)
	h := history(t, j.Errors)
	require.Len(t, h, 1)
	require.Equal(t, "lease expired", h[0].Error)
	require.Equal(t, "crashed", h[0].Owner)
	require.Equal(t, int32(1), h[0].Attempt)

	d, err := b.Queries.GetDead(b.Ctx, bury)
	require.NoError(t, err)
	require.Equal(t, "lease expired on last attempt", d.Reason)
	require.Equal(t, "lease expired", history(t, d.Errors)[0].Error)

	j, err = b.Queries.GetJob(b.Ctx, healthy)
	require.NoError(t, err)
	require.Equal(t, "running", j.State, "a live lease is left alone")

	again, err := b.Queries.Sweep(b.Ctx, db.SweepParams{MaxJobs: 100})
	require.NoError(t, err)
	require.Empty(t, again)
	require.Len(t, b.claim(t, "w", 10), 1, "the requeued job is ready at once")
}

func TestSweepBounded(t *testing.T) {
	b := setup(t)
	for range 5 {
		b.expiredClaim(t, "w")
	}
	first, err := b.Queries.Sweep(b.Ctx, db.SweepParams{MaxJobs: 2})
	require.NoError(t, err)
	require.Len(t, first, 2)
	rest, err := b.Queries.Sweep(b.Ctx, db.SweepParams{MaxJobs: 100})
	require.NoError(t, err)
	require.Len(t, rest, 3)
}

// TestSweepWithin: a sweep given within_ms takes only leases that expired
// that recently; 0 takes them all.
func TestSweepWithin(t *testing.T) {
	b := setup(t)
	ranOut := func(ago time.Duration) int64 {
		return testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{
			State: testfactory.Running, LeaseOwner: "w", LeaseUntil: testfactory.Ptr(b.dbNow(t).Add(-ago)),
		}).ID
	}
	old := ranOut(time.Hour)
	recent := ranOut(time.Second)
	got, err := b.Queries.Sweep(b.Ctx, db.SweepParams{MaxJobs: 100, WithinMs: time.Minute.Milliseconds()})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, recent, got[0].ID, "the lease that expired within the minute")
	got, err = b.Queries.Sweep(b.Ctx, db.SweepParams{MaxJobs: 100})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, old, got[0].ID, "within 0: every expired lease")
}

// TestPromoteWithin: a promotion given within_ms takes only jobs that fell
// due that recently; 0 takes them all.
func TestPromoteWithin(t *testing.T) {
	b := setup(t)
	old := b.enqueue(t, jobSpec{delay: time.Hour})
	recent := b.enqueue(t, jobSpec{delay: time.Hour})
	for id, ago := range map[int64]string{old: "1 hour", recent: "1 second"} {
		_, err := b.Pool.Exec(b.Ctx, "UPDATE hopper_jobs SET run_at = now() - $2::interval WHERE id = $1", id, ago)
		require.NoError(t, err)
	}
	got, err := b.Queries.Promote(b.Ctx, db.PromoteParams{MaxJobs: 100, WithinMs: time.Minute.Milliseconds()})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, recent, got[0].ID, "the job that fell due within the minute")
	got, err = b.Queries.Promote(b.Ctx, db.PromoteParams{MaxJobs: 100})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, old, got[0].ID, "within 0: every job due")
}

// TestSweepConcurrent: sweeps from several connections at once move each
// expired job exactly once.
func TestSweepConcurrent(t *testing.T) {
	b := setup(t)
	const total, sweepers = 3000, 8
	rows := make([]db.EnqueueBatchParams, total)
	for i := range rows {
		// Half have a retry left, half are on their last attempt.
		rows[i] = db.EnqueueBatchParams{Queue: "default", Kind: "k", Version: 1, Payload: json.RawMessage(`{}`), MaxAttempts: int32(1 + i%2)}
	}
	_, err := b.Queries.EnqueueBatch(b.Ctx, withIDs(t, b.Queries, rows))
	require.NoError(t, err)
	claimed, err := b.Queries.Dequeue(b.Ctx, db.DequeueParams{
		Queue: "default", Kinds: []string{"k"}, MaxVersions: []int32{1}, MaxJobs: total, Owner: "crashed", LeaseMs: -1000,
	})
	require.NoError(t, err)
	require.Len(t, claimed, total)

	var (
		mu    sync.Mutex
		moved = map[int64]int{}
		dead  int
		wg    sync.WaitGroup
		errs  = make(chan error, sweepers)
	)
	for range sweepers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := b.Pool.Acquire(b.Ctx)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Release()
			q := db.New(conn)
			for {
				got, err := q.Sweep(b.Ctx, db.SweepParams{MaxJobs: 50})
				if err != nil {
					errs <- err
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, r := range got {
					moved[r.ID]++
					if r.Dead {
						dead++
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, moved, total)
	for id, n := range moved {
		require.Equal(t, 1, n, "job %d moved %d times", id, n)
	}
	require.Equal(t, total/2, dead)
	live, deadRows := b.Totals(t)
	require.EqualValues(t, total/2, live)
	require.EqualValues(t, total/2, deadRows)
}
