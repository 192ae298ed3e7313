package pruner

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/passbed"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
)

// With a DeadRetention of 8 minutes or more the pruner keeps the dead
// jobs' partitions ahead of now and drops those whose jobs all died longer
// than the retention ago; a job that dies goes to the partition covering
// the time, one that died before any partition to the default one, where
// it is deleted row by row once the retention has passed. A shorter
// retention creates no partition.
func TestPrunerDropsDeadPartitions(t *testing.T) {
	t.Parallel()
	b := passbed.New(t)
	short := mustNew(t, Config{Queries: b.Q, Log: b.Log, Queues: []string{"default"}, Every: time.Hour, DeadRetention: 5 * time.Minute, LongestKeep: func() time.Duration { return 0 }})
	short.PruneOnce(b.Ctx)
	parts, err := b.Q.DeadPartitions(b.Ctx)
	require.NoError(t, err)
	require.Empty(t, parts, "5 minutes of retention: no partition")

	longAgo, hourAgo := time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
	expired := testfactory.Job(b.Ctx, t, b.DB.Pool, &testfactory.JobOpts{State: testfactory.Dead, FinishedAt: &longAgo})
	recent := testfactory.Job(b.Ctx, t, b.DB.Pool, &testfactory.JobOpts{State: testfactory.Dead, FinishedAt: &hourAgo})
	m := mustNew(t, Config{Queries: b.Q, Log: b.Log, Queues: []string{"default"}, Every: time.Hour, DeadRetention: 80 * time.Minute, LongestKeep: func() time.Duration { return 0 }})
	_, dead := m.PruneOnce(b.Ctx)
	require.Equal(t, int64(1), dead, "the job that died 2 hours ago, in the default partition, is deleted")
	parts, err = b.Q.DeadPartitions(b.Ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(parts), 3, "10-minute partitions, two ahead of the current one")
	for _, p := range parts {
		require.Equal(t, 10*time.Minute, p.UpperAt.Sub(p.LowerAt), "an eighth of the retention wide")
	}

	for range 2 {
		b.Enqueue(time.Now().Add(-time.Second))
	}
	rows := b.Claim("w", 60_000)
	require.Len(t, rows, 2)
	_, err = b.Q.NackBatch(b.Ctx, db.NackBatchParams{Ids: []int64{rows[0].ID, rows[1].ID}, Attempts: []int32{rows[0].Attempt, rows[1].Attempt},
		Actions: []string{"dead", "dead"}, Messages: []string{"bad", "bad"}, BackoffsMs: []int64{0, 0}, Reasons: []string{"permanent", "permanent"}})
	require.NoError(t, err)
	where := func(id int64) string {
		var table string
		require.NoError(t, b.DB.Pool.QueryRow(b.Ctx, "SELECT tableoid::regclass::text FROM hopper_dead_jobs WHERE id = $1", id).Scan(&table))
		return table
	}
	inPart := where(rows[0].ID)
	require.NotEqual(t, "hopper_dead_jobs_default", inPart, "a job that died now: a time partition")
	require.Equal(t, inPart, where(rows[1].ID))
	require.Equal(t, "hopper_dead_jobs_default", where(recent.ID), "died before any partition: the default one")
	_, err = b.Q.GetDead(b.Ctx, expired.ID)
	require.Error(t, err)

	// The partition holding the two jobs ends 81 minutes ago (the list is
	// what the drop reads), and those before it earlier still.
	_, err = b.DB.Pool.Exec(b.Ctx, `UPDATE hopper_dead_partitions SET upper_at = now() - interval '81 minutes' - (u.nth * interval '1 hour'),
		lower_at = now() - interval '82 minutes' - (u.nth * interval '1 hour')
		FROM (SELECT name, row_number() OVER (ORDER BY lower_at DESC) - 1 AS nth FROM hopper_dead_partitions
		      WHERE lower_at <= (SELECT lower_at FROM hopper_dead_partitions WHERE name = $1)) AS u
		WHERE hopper_dead_partitions.name = u.name`, inPart)
	require.NoError(t, err)
	_, dead = m.PruneOnce(b.Ctx)
	require.Zero(t, dead, "nothing deleted row by row")
	for _, id := range []int64{rows[0].ID, rows[1].ID} {
		_, err = b.Q.GetDead(b.Ctx, id)
		require.Error(t, err, "the partition went with its jobs")
	}
	_, err = b.Q.GetDead(b.Ctx, recent.ID)
	require.NoError(t, err, "died an hour ago: within the retention")
	after, err := b.Q.DeadPartitions(b.Ctx)
	require.NoError(t, err)
	for _, p := range after {
		require.NotEqual(t, inPart, p.Name)
	}
}

// Jobs die while the dead jobs' partitions are attached under them: no
// failure is refused, every job is in the dead jobs once, and a row is in
// a time partition exactly when its partition_at is set, within that
// partition's range.
func TestDeadPartitionsUnderFailures(t *testing.T) {
	t.Parallel()
	b := passbed.New(t)
	const failers, rounds, per = 6, 10, 10
	for range failers * rounds * per {
		b.Enqueue(time.Now().Add(-time.Second))
	}
	var failersDone sync.WaitGroup
	errs := make(chan error, failers+1)
	for f := range failers {
		failersDone.Add(1)
		go func() {
			defer failersDone.Done()
			for range rounds {
				rows, err := b.Q.Dequeue(b.Ctx, db.DequeueParams{Owner: fmt.Sprint("failer-", f), LeaseMs: 60_000, Queue: "default",
					AfterPriority: -1, Kinds: []string{"k"}, MaxVersions: []int32{1}, MaxJobs: per})
				if err != nil {
					errs <- err
					return
				}
				p := db.NackBatchParams{}
				for _, row := range rows {
					p.Ids = append(p.Ids, row.ID)
					p.Attempts = append(p.Attempts, row.Attempt)
					p.Actions = append(p.Actions, "dead")
					p.Messages = append(p.Messages, "bad")
					p.BackoffsMs = append(p.BackoffsMs, 0)
					p.Reasons = append(p.Reasons, "permanent")
				}
				if _, err := b.Q.NackBatch(b.Ctx, p); err != nil {
					errs <- fmt.Errorf("a failure beside the partitions' DDL: %w", err)
					return
				}
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
			n, err := b.Q.EnsureDeadPartitions(b.Ctx, db.EnsureDeadPartitionsParams{WidthMs: time.Minute.Milliseconds(),
				AheadMs: (time.Duration(i%120+1) * time.Minute).Milliseconds()})
			if err == nil {
				_, err = b.Q.DropDeadPartitions(b.Ctx, db.DropDeadPartitionsParams{RetentionMs: time.Minute.Milliseconds()})
			}
			if err != nil {
				errs <- fmt.Errorf("partitions beside failures: %w", err)
				ddlDone <- made
				return
			}
			made += int(n)
		}
	}()
	failersDone.Wait()
	close(stop)
	made := <-ddlDone
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Positive(t, made, "partitions were attached while jobs died")

	var rows, distinct, inParts, wrong int64
	require.NoError(t, b.DB.Pool.QueryRow(b.Ctx, `
		SELECT count(*), count(DISTINCT d.id), count(*) FILTER (WHERE d.partition_at IS NOT NULL),
		       count(*) FILTER (WHERE (d.partition_at IS NULL) <> (d.tableoid = 'hopper_dead_jobs_default'::regclass)
		           OR (d.partition_at IS NOT NULL AND NOT EXISTS (
		               SELECT FROM hopper_dead_partitions AS p
		               WHERE p.name = d.tableoid::regclass::text AND p.lower_at <= d.partition_at AND d.partition_at < p.upper_at)))
		FROM hopper_dead_jobs AS d`).Scan(&rows, &distinct, &inParts, &wrong))
	require.Equal(t, int64(failers*rounds*per), rows, "every job that died is there")
	require.Equal(t, rows, distinct)
	require.Positive(t, inParts, "jobs went to time partitions")
	require.Zero(t, wrong, "a row is in the partition its partition_at names, or in the default one without it")
}
