package pruner

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/passbed"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
)

// The pruner deletes a completed job once its keep has passed and, with a
// dead retention, a dead job past it; the rows of workers gone for longer
// than workerRowsKept go too, at most once per workerPruneEvery, while a
// live worker's row stays.
func TestPrunerDeletesWhatExpired(t *testing.T) {
	t.Parallel()
	b := passbed.New(t)
	m := mustNew(t, Config{Queries: b.Q, Log: b.Log, Queues: []string{"default"}, Every: time.Hour, DeadRetention: time.Millisecond, LongestKeep: func() time.Duration { return 0 }})

	b.Enqueue(time.Now().Add(-time.Second))
	b.Enqueue(time.Now().Add(-time.Second))
	rows := b.Claim("w", 60_000)
	require.Len(t, rows, 2)
	kept, buried := rows[0], rows[1]
	_, err := b.Q.AckBatchKeep(b.Ctx, db.AckBatchKeepParams{Ids: []int64{kept.ID}, Attempts: []int32{kept.Attempt},
		KeepMs: []int64{1}, Results: []json.RawMessage{nil}})
	require.NoError(t, err)
	_, err = b.Q.NackBatch(b.Ctx, db.NackBatchParams{Ids: []int64{buried.ID}, Attempts: []int32{buried.Attempt},
		Actions: []string{"dead"}, Messages: []string{"bad"}, BackoffsMs: []int64{0}, Reasons: []string{"permanent"}})
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond) // past the keep and the retention
	history, dead := m.PruneOnce(b.Ctx)
	require.Equal(t, int64(1), history)
	require.Equal(t, int64(1), dead)
	_, err = b.Q.GetDead(b.Ctx, buried.ID)
	require.Error(t, err, "the dead job is gone")

	for _, id := range []string{"long-gone", "live"} {
		_, err := b.Q.RegisterWorker(b.Ctx, db.RegisterWorkerParams{ID: id, Host: "h", Pid: 1, HopperVersion: "test",
			Queues: []string{"default"}, StaleAfterMs: 3000})
		require.NoError(t, err)
	}
	_, err = b.DB.Pool.Exec(b.Ctx, "UPDATE hopper_workers SET last_seen_at = now() - interval '2 days' WHERE id = 'long-gone'")
	require.NoError(t, err)
	m.pruneWorkers(b.Ctx)
	left, err := b.Q.ListWorkers(b.Ctx, nil)
	require.NoError(t, err)
	require.Len(t, left, 1)
	require.Equal(t, "live", left[0].ID)

	_, err = b.DB.Pool.Exec(b.Ctx, "UPDATE hopper_workers SET last_seen_at = now() - interval '2 days'")
	require.NoError(t, err)
	m.pruneWorkers(b.Ctx)
	left, err = b.Q.ListWorkers(b.Ctx, nil)
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
	b := passbed.New(t)
	m := mustNew(t, Config{Queries: b.Q, Log: b.Log, Every: time.Hour, PartitionWidth: time.Minute, LongestKeep: func() time.Duration { return 10 * time.Minute }})
	m.PruneOnce(b.Ctx)
	parts, err := b.Q.HistoryPartitions(b.Ctx)
	require.NoError(t, err)
	require.Empty(t, parts, "an unused history gets no partition")
	testfactory.Job(b.Ctx, t, b.DB.Pool, &testfactory.JobOpts{State: testfactory.Completed}) // a kept job: the history is used
	none := mustNew(t, Config{Queries: b.Q, Log: b.Log, Every: time.Hour, PartitionWidth: time.Minute, LongestKeep: func() time.Duration { return 0 }})
	none.PruneOnce(b.Ctx)
	parts, err = b.Q.HistoryPartitions(b.Ctx)
	require.NoError(t, err)
	require.Empty(t, parts, "a worker that keeps nothing creates no partition")

	m.PruneOnce(b.Ctx)
	parts, err = b.Q.HistoryPartitions(b.Ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(parts), 11, "10 minutes of keep and a width ahead")
	require.False(t, parts[len(parts)-1].UpperAt.Before(time.Now().Add(10*time.Minute)))
	m.PruneOnce(b.Ctx)
	again, err := b.Q.HistoryPartitions(b.Ctx)
	require.NoError(t, err)
	require.Equal(t, len(parts), len(again), "covered: a second pass creates none")

	for range 3 {
		b.Enqueue(time.Now().Add(-time.Second))
	}
	rows := b.Claim("w", 60_000)
	require.Len(t, rows, 3)
	_, err = b.Q.AckBatchKeep(b.Ctx, db.AckBatchKeepParams{Ids: []int64{rows[0].ID, rows[1].ID, rows[2].ID},
		Attempts: []int32{rows[0].Attempt, rows[1].Attempt, rows[2].Attempt},
		KeepMs:   []int64{(5 * time.Minute).Milliseconds(), (48 * time.Hour).Milliseconds(), (30 * time.Second).Milliseconds()},
		Results:  []json.RawMessage{nil, nil, nil}})
	require.NoError(t, err)
	where := func(id int64) string {
		var table string
		require.NoError(t, b.DB.Pool.QueryRow(b.Ctx, "SELECT tableoid::regclass::text FROM hopper_job_history WHERE id = $1", id).Scan(&table))
		return table
	}
	inPart := where(rows[0].ID)
	require.NotEqual(t, "hopper_job_history_default", inPart, "kept 5 minutes: a time partition")
	require.Equal(t, "hopper_job_history_default", where(rows[1].ID), "kept 2 days, beyond the partitions: the default one")
	require.Equal(t, "hopper_job_history_default", where(rows[2].ID), "kept 30s, less than a partition's width: the default one")

	// The partition holding the first job passes (the list is what the
	// drop reads).
	_, err = b.DB.Pool.Exec(b.Ctx, `UPDATE hopper_history_partitions SET upper_at = lower_at - interval '1 day' + interval '1 second',
		lower_at = lower_at - interval '1 day' WHERE lower_at <= (SELECT lower_at FROM hopper_history_partitions WHERE name = $1)`, inPart)
	require.NoError(t, err)
	m.PruneOnce(b.Ctx)
	var left int
	require.NoError(t, b.DB.Pool.QueryRow(b.Ctx, "SELECT count(*) FROM hopper_job_history").Scan(&left))
	require.Equal(t, 3, left, "the partition went with its job; the default partition's jobs are not due")
	after, err := b.Q.HistoryPartitions(b.Ctx)
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
	b := passbed.New(t)
	const ackers, rounds, per = 6, 12, 20
	keeps := []time.Duration{30 * time.Second, 5 * time.Minute, 40 * time.Minute, 3 * 24 * time.Hour}
	for range ackers * rounds * per {
		b.Enqueue(time.Now().Add(-time.Second))
	}
	var acked atomic.Int64
	var ackersDone sync.WaitGroup
	errs := make(chan error, ackers+1)
	for a := range ackers {
		ackersDone.Add(1)
		go func() {
			defer ackersDone.Done()
			for r := range rounds {
				rows, err := b.Q.Dequeue(b.Ctx, db.DequeueParams{Owner: fmt.Sprint("acker-", a), LeaseMs: 60_000, Queue: "default",
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
				done, err := b.Q.AckBatchKeep(b.Ctx, p)
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
			n, err := b.Q.EnsureHistoryPartitions(b.Ctx, db.EnsureHistoryPartitionsParams{WidthMs: time.Minute.Milliseconds(),
				AheadMs: (time.Duration(i%120+1) * time.Minute).Milliseconds()})
			if err != nil {
				errs <- fmt.Errorf("creating partitions beside acknowledgements: %w", err)
				ddlDone <- made
				return
			}
			made += int(n)
			if _, err := b.Q.DropHistoryPartitions(b.Ctx); err != nil {
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
	require.NoError(t, b.DB.Pool.QueryRow(b.Ctx, `
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

func TestMain(m *testing.M) { testdb.Main(m) }

func mustNew(t *testing.T, cfg Config) *Pruner {
	t.Helper()
	p, err := New(cfg)
	require.NoError(t, err)
	return p
}

// A Config missing what the pruner works with is refused at New, and the
// queues it is given are its own sorted copy.
func TestPrunerConfig(t *testing.T) {
	t.Parallel()
	queues := []string{"b", "a"}
	whole := Config{Queries: db.New(nil), Log: slog.Default(), Every: time.Second, Queues: queues,
		LongestKeep: func() time.Duration { return 0 }}
	p, err := New(whole)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, p.queues)
	require.Equal(t, []string{"b", "a"}, queues, "the caller's slice is left as it was")
	for name, edit := range map[string]func(*Config){
		"no queries": func(c *Config) { c.Queries = nil }, "no log": func(c *Config) { c.Log = nil },
		"no keep": func(c *Config) { c.LongestKeep = nil }, "no interval": func(c *Config) { c.Every = 0 },
		"negative dead retention":  func(c *Config) { c.DeadRetention = -1 },
		"negative event retention": func(c *Config) { c.EventRetention = -1 },
	} {
		cfg := whole
		edit(&cfg)
		_, err := New(cfg)
		require.Error(t, err, name)
	}
}
