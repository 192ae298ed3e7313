package worker

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testfactory"
)

// The pruner deletes a completed job once its keep has passed and, with a
// dead retention, a dead job past it; the rows of workers gone for longer
// than workerRowsKept go too, at most once per workerPruneEvery, while a
// live worker's row stays.
func TestPrunerDeletesWhatExpired(t *testing.T) {
	t.Parallel()
	b := newPassBed(t)
	m := newPruner(b.q, b.log, &Config{Queues: map[string]int{"default": 1}, SweepInterval: time.Hour, DeadRetention: time.Millisecond}, func() time.Duration { return 0 })

	b.enqueue(time.Now().Add(-time.Second))
	b.enqueue(time.Now().Add(-time.Second))
	rows := b.claim("w", 60_000)
	require.Len(t, rows, 2)
	kept, buried := rows[0], rows[1]
	_, err := b.q.AckBatchKeep(b.ctx, db.AckBatchKeepParams{Ids: []int64{kept.ID}, Attempts: []int32{kept.Attempt},
		KeepMs: []int64{1}, Results: []json.RawMessage{nil}})
	require.NoError(t, err)
	_, err = b.q.NackBatch(b.ctx, db.NackBatchParams{Ids: []int64{buried.ID}, Attempts: []int32{buried.Attempt},
		Actions: []string{"dead"}, Messages: []string{"bad"}, BackoffsMs: []int64{0}, Reasons: []string{"permanent"}})
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond) // past the keep and the retention
	history, dead := m.pruneOnce(b.ctx)
	require.Equal(t, int64(1), history)
	require.Equal(t, int64(1), dead)
	_, err = b.q.GetDead(b.ctx, buried.ID)
	require.Error(t, err, "the dead job is gone")

	for _, id := range []string{"long-gone", "live"} {
		_, err := b.q.RegisterWorker(b.ctx, db.RegisterWorkerParams{ID: id, Host: "h", Pid: 1, HopperVersion: "test",
			Queues: []string{"default"}, StaleAfterMs: 3000})
		require.NoError(t, err)
	}
	_, err = b.tdb.Pool.Exec(b.ctx, "UPDATE hopper_workers SET last_seen_at = now() - interval '2 days' WHERE id = 'long-gone'")
	require.NoError(t, err)
	m.pruneWorkers(b.ctx)
	left, err := b.q.ListWorkers(b.ctx, nil)
	require.NoError(t, err)
	require.Len(t, left, 1)
	require.Equal(t, "live", left[0].ID)

	_, err = b.tdb.Pool.Exec(b.ctx, "UPDATE hopper_workers SET last_seen_at = now() - interval '2 days'")
	require.NoError(t, err)
	m.pruneWorkers(b.ctx)
	left, err = b.q.ListWorkers(b.ctx, nil)
	require.NoError(t, err)
	require.Len(t, left, 1, "a second prune within workerPruneEvery does not run")
}

// The pruner keeps the history's partitions ahead of the longest keep it
// writes and drops those whose range has passed: a job kept within them
// lands in a time partition, one kept beyond them or for less than a
// partition's width in the default partition, and a worker that keeps
// nothing creates none.
func TestPrunerDropsPartitions(t *testing.T) {
	t.Parallel()
	b := newPassBed(t)
	m := newPruner(b.q, b.log, &Config{SweepInterval: time.Hour, HistoryPartitionWidth: time.Minute}, func() time.Duration { return 10 * time.Minute })
	m.pruneOnce(b.ctx)
	parts, err := b.q.HistoryPartitions(b.ctx)
	require.NoError(t, err)
	require.Empty(t, parts, "an unused history gets no partition")
	testfactory.Job(b.ctx, t, b.tdb.Pool, &testfactory.JobOpts{State: testfactory.Completed}) // a kept job: the history is used
	none := newPruner(b.q, b.log, &Config{SweepInterval: time.Hour, HistoryPartitionWidth: time.Minute}, func() time.Duration { return 0 })
	none.pruneOnce(b.ctx)
	parts, err = b.q.HistoryPartitions(b.ctx)
	require.NoError(t, err)
	require.Empty(t, parts, "a worker that keeps nothing creates no partition")

	m.pruneOnce(b.ctx)
	parts, err = b.q.HistoryPartitions(b.ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(parts), 11, "10 minutes of keep and a width ahead")
	require.False(t, parts[len(parts)-1].UpperAt.Before(time.Now().Add(10*time.Minute)))
	m.pruneOnce(b.ctx)
	again, err := b.q.HistoryPartitions(b.ctx)
	require.NoError(t, err)
	require.Equal(t, len(parts), len(again), "covered: a second pass creates none")

	for range 3 {
		b.enqueue(time.Now().Add(-time.Second))
	}
	rows := b.claim("w", 60_000)
	require.Len(t, rows, 3)
	_, err = b.q.AckBatchKeep(b.ctx, db.AckBatchKeepParams{Ids: []int64{rows[0].ID, rows[1].ID, rows[2].ID},
		Attempts: []int32{rows[0].Attempt, rows[1].Attempt, rows[2].Attempt},
		KeepMs:   []int64{(5 * time.Minute).Milliseconds(), (48 * time.Hour).Milliseconds(), (30 * time.Second).Milliseconds()},
		Results:  []json.RawMessage{nil, nil, nil}})
	require.NoError(t, err)
	where := func(id int64) string {
		var table string
		require.NoError(t, b.tdb.Pool.QueryRow(b.ctx, "SELECT tableoid::regclass::text FROM hopper_job_history WHERE id = $1", id).Scan(&table))
		return table
	}
	inPart := where(rows[0].ID)
	require.NotEqual(t, "hopper_job_history_default", inPart, "kept 5 minutes: a time partition")
	require.Equal(t, "hopper_job_history_default", where(rows[1].ID), "kept 2 days, beyond the partitions: the default one")
	require.Equal(t, "hopper_job_history_default", where(rows[2].ID), "kept 30s, less than a partition's width: the default one")

	// The partition holding the first job passes (the list is what the
	// drop reads).
	_, err = b.tdb.Pool.Exec(b.ctx, `UPDATE hopper_history_partitions SET upper_at = lower_at - interval '1 day' + interval '1 second',
		lower_at = lower_at - interval '1 day' WHERE lower_at <= (SELECT lower_at FROM hopper_history_partitions WHERE name = $1)`, inPart)
	require.NoError(t, err)
	m.pruneOnce(b.ctx)
	var left int
	require.NoError(t, b.tdb.Pool.QueryRow(b.ctx, "SELECT count(*) FROM hopper_job_history").Scan(&left))
	require.Equal(t, 3, left, "the partition went with its job; the default partition's jobs are not due")
	after, err := b.q.HistoryPartitions(b.ctx)
	require.NoError(t, err)
	for _, p := range after {
		require.NotEqual(t, inPart, p.Name)
		require.True(t, p.UpperAt.After(time.Now()), "every partition that passed was dropped")
	}
}

// Acknowledgements that keep history go on while partitions are attached
// under them: no acknowledgement fails, every acknowledged job is in the
// history once, and a row is in a time partition only where one covers
// its keep_until and is no wider than its keep.
func TestHistoryPartitionsUnderAcks(t *testing.T) {
	t.Parallel()
	b := newPassBed(t)
	const ackers, rounds, per = 6, 12, 20
	keeps := []time.Duration{30 * time.Second, 5 * time.Minute, 40 * time.Minute, 3 * 24 * time.Hour}
	for range ackers * rounds * per {
		b.enqueue(time.Now().Add(-time.Second))
	}
	var acked atomic.Int64
	var ackersDone sync.WaitGroup
	errs := make(chan error, ackers+1)
	for a := range ackers {
		ackersDone.Add(1)
		go func() {
			defer ackersDone.Done()
			for r := range rounds {
				rows, err := b.q.Dequeue(b.ctx, db.DequeueParams{Owner: fmt.Sprint("acker-", a), LeaseMs: 60_000, Queue: "default",
					AfterPriority: -1, Kinds: []string{"k"}, MaxVersions: []int32{1}, MaxJobs: per})
				if err != nil {
					errs <- err
					return
				}
				p := db.AckBatchKeepParams{}
				for i, row := range rows {
					p.Ids = append(p.Ids, row.ID)
					p.Attempts = append(p.Attempts, row.Attempt)
					p.KeepMs = append(p.KeepMs, keeps[(a+r+i)%len(keeps)].Milliseconds())
					p.Results = append(p.Results, nil)
				}
				done, err := b.q.AckBatchKeep(b.ctx, p)
				if err != nil {
					errs <- fmt.Errorf("an acknowledgement beside the partitions' DDL: %w", err)
					return
				}
				acked.Add(int64(len(done)))
			}
		}()
	}
	stop := make(chan struct{})
	ddlDone := make(chan int)
	go func() {
		made := 0
		for i := 1; ; i++ {
			select {
			case <-stop:
				ddlDone <- made
				return
			default:
			}
			// A minute further ahead each time: about a partition a call.
			n, err := b.q.EnsureHistoryPartitions(b.ctx, db.EnsureHistoryPartitionsParams{WidthMs: time.Minute.Milliseconds(),
				AheadMs: (time.Duration(i%120+1) * time.Minute).Milliseconds()})
			if err != nil {
				errs <- fmt.Errorf("creating partitions beside acknowledgements: %w", err)
				ddlDone <- made
				return
			}
			made += int(n)
			if _, err := b.q.DropHistoryPartitions(b.ctx); err != nil {
				errs <- err
				ddlDone <- made
				return
			}
		}
	}()
	ackersDone.Wait()
	close(stop)
	made := <-ddlDone
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Positive(t, made, "partitions were attached while the acknowledgements ran")

	var rows, distinct, inParts, wrong int64
	require.NoError(t, b.tdb.Pool.QueryRow(b.ctx, `
		SELECT count(*), count(DISTINCT h.id), count(*) FILTER (WHERE h.drop_after IS NOT NULL),
		       count(*) FILTER (WHERE h.drop_after IS NOT NULL AND (h.drop_after <> h.keep_until OR NOT EXISTS (
		           SELECT FROM hopper_history_partitions AS p
		           WHERE p.name = h.tableoid::regclass::text AND p.lower_at <= h.keep_until AND h.keep_until < p.upper_at
		             AND p.upper_at - p.lower_at <= h.keep_until - h.finished_at)))
		FROM hopper_job_history AS h`).Scan(&rows, &distinct, &inParts, &wrong))
	require.Equal(t, acked.Load(), rows, "every acknowledged job is kept")
	require.Equal(t, rows, distinct)
	require.Positive(t, inParts, "some rows went to time partitions")
	require.Less(t, inParts, rows, "and some (kept 30s, or 3 days) to the default one")
	require.Zero(t, wrong, "a row is in a partition that covers its keep_until and is no wider than its keep")
}
