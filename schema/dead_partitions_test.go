package schema_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/schema"
)

// insertDead writes dead jobs with the given ids and metas (nil: none),
// their partition_at left to the column's default when the schema has it.
const insertDead = `
	INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt, max_attempts, errors, reason, created_at, meta)
	SELECT v.id, 'default', 'k', 1, '{}', 0, 1, 1, '[]', 'permanent', now(), v.meta::jsonb
	FROM unnest($1::bigint[], $2::text[]) AS v(id, meta)`

// TestDeadPartitionsMigration: migrations 22 to 24 turn a dead-jobs table
// that holds rows, and grants, into a partitioned table without moving a
// row: the old table becomes the default partition, validated as holding
// only rows without partition_at, keeps its indexes, and its triggers
// fire from the parent; the view reads the parent; grants carry over. A
// job that dies while a partition covers the time goes there. The down
// brings every row back into a plain table with its triggers, and up
// again rebuilds the same objects.
func TestDeadPartitionsMigration(t *testing.T) {
	ctx, d := setup(t)
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close()) }()
	require.NoError(t, mg.Up(ctx))
	up := objects(t, ctx, d, d.Schema)
	downTo(ctx, t, mg, 21)
	require.Equal(t, objectsAt(t, up, 21), objects(t, ctx, d, d.Schema))

	_, err = d.Pool.Exec(ctx, insertDead, []int64{1, 2}, []*string{nil, ptr(`{"hopper.durable": true}`)})
	require.NoError(t, err)
	_, err = d.Pool.Exec(ctx, `INSERT INTO hopper_job_steps (job_id, position, name, kind, state) VALUES (2, 0, 's', 'step', 'done');
		GRANT SELECT, INSERT, DELETE ON hopper_dead_jobs TO PUBLIC`)
	require.NoError(t, err)

	require.NoError(t, mg.Up(ctx))
	require.Equal(t, up, objects(t, ctx, d, d.Schema))
	var kind string
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = 'hopper_dead_jobs'::regclass`).Scan(&kind))
	require.Equal(t, "p", kind, "the dead jobs are partitioned")
	require.Equal(t, []string{"hopper_dead_jobs_default", "hopper_dead_jobs_default"}, deadTables(ctx, t, d.Pool), "the rows stayed where they were")
	var seen int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM hopper_all_jobs WHERE state = 'dead'`).Scan(&seen))
	require.Equal(t, 2, seen, "the view reads the partitioned table")
	var valid bool
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT convalidated FROM pg_constraint
		WHERE conname = 'hopper_dead_jobs_partition_at_check' AND conrelid = 'hopper_dead_jobs_default'::regclass`).Scan(&valid))
	require.True(t, valid)
	var granted bool
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT has_table_privilege('public', 'hopper_dead_jobs', 'INSERT')
		AND has_table_privilege('public', 'hopper_dead_jobs', 'DELETE')
		AND has_table_privilege('public', 'hopper_dead_partitions', 'SELECT')
		AND NOT has_table_privilege('public', 'hopper_dead_jobs', 'UPDATE')`).Scan(&granted))
	require.True(t, granted, "PUBLIC keeps its grants on the dead jobs, may read the partitions' list, and got nothing more")

	// The parent's trigger deletes a durable job's records with it.
	_, err = d.Pool.Exec(ctx, `DELETE FROM hopper_dead_jobs WHERE id = 2`)
	require.NoError(t, err)
	var steps int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM hopper_job_steps`).Scan(&steps))
	require.Zero(t, steps, "the durable job's step went with it")

	// A job dying while a partition covers now goes there; the state
	// check holds on the parent.
	var made int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT hopper_dead_partitions_ensure('1 hour', '2 hours')`).Scan(&made))
	require.GreaterOrEqual(t, made, 2)
	_, err = d.Pool.Exec(ctx, insertDead, []int64{3}, []*string{nil})
	require.NoError(t, err)
	require.Contains(t, deadTables(ctx, t, d.Pool)[1], "hopper_dead_jobs_2", "a time partition holds the new dead job")
	_, err = d.Pool.Exec(ctx, `UPDATE hopper_dead_jobs SET state = 'done' WHERE id = 3`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23514", pgErr.Code, "the state check")

	downTo(ctx, t, mg, 21)
	require.Equal(t, objectsAt(t, up, 21), objects(t, ctx, d, d.Schema))
	require.Equal(t, []string{"hopper_dead_jobs", "hopper_dead_jobs"}, deadTables(ctx, t, d.Pool), "every row is back in the plain table")
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM hopper_all_jobs WHERE state = 'dead'`).Scan(&seen))
	require.Equal(t, 2, seen, "the view reads the plain table again")
	require.NoError(t, mg.Up(ctx))
	require.Equal(t, up, objects(t, ctx, d, d.Schema))
}

// TestDeadPartitionFunctions: ensure creates contiguous partitions ahead
// and refuses widths out of range; drop refuses a retention under a
// minute, removes only the partitions whose jobs all died longer than the
// retention ago, and deletes the jobs a trigger has work for through the
// parent first: a durable job's records and a workflow step's edges go
// with it.
func TestDeadPartitionFunctions(t *testing.T) {
	ctx, d := setup(t)
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close()) }()
	require.NoError(t, mg.Up(ctx))

	for _, bad := range []string{
		`SELECT hopper_dead_partitions_ensure('30 seconds', '1 hour')`,
		`SELECT hopper_dead_partitions_ensure('32 days', '1 hour')`,
		`SELECT hopper_dead_partitions_drop('59 seconds')`,
	} {
		_, err := d.Pool.Exec(ctx, bad)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, bad)
		require.Equal(t, "22023", pgErr.Code, bad)
	}
	var made int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT hopper_dead_partitions_ensure('1 minute', '5 minutes')`).Scan(&made))
	require.GreaterOrEqual(t, made, 5)
	var gaps int
	require.NoError(t, d.Pool.QueryRow(ctx, `
		SELECT count(*) FROM (SELECT lower_at, lag(upper_at) OVER (ORDER BY lower_at) AS before
		                      FROM hopper_dead_partitions) AS p
		WHERE p.before IS NOT NULL AND p.before <> p.lower_at`).Scan(&gaps))
	require.Zero(t, gaps, "contiguous")

	// Three jobs die now, in the first partition: a plain one, a durable
	// one with a step record, a workflow step with an edge to its parent.
	_, err = d.Pool.Exec(ctx, insertDead, []int64{10, 11, 12},
		[]*string{nil, ptr(`{"hopper.durable": true}`), ptr(`{"hopper.workflow": "w"}`)})
	require.NoError(t, err)
	_, err = d.Pool.Exec(ctx, `INSERT INTO hopper_job_steps (job_id, position, name, kind, state) VALUES (11, 0, 's', 'step', 'done');
		INSERT INTO hopper_workflow_deps (parent_id, child_id) VALUES (9, 12)`)
	require.NoError(t, err)
	var part string
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT DISTINCT tableoid::regclass::text FROM hopper_dead_jobs`).Scan(&part))
	require.NotEqual(t, "hopper_dead_jobs_default", part)

	var dropped int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT hopper_dead_partitions_drop('1 hour')`).Scan(&dropped))
	require.Zero(t, dropped, "nothing died an hour ago")
	// The partition's range becomes one that ended 61 minutes ago (the
	// function trusts the list; the table's bounds do not matter to it).
	_, err = d.Pool.Exec(ctx, `UPDATE hopper_dead_partitions
		SET lower_at = now() - interval '62 minutes', upper_at = now() - interval '61 minutes' WHERE name = $1`, part)
	require.NoError(t, err)
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT hopper_dead_partitions_drop('2 hours')`).Scan(&dropped))
	require.Zero(t, dropped, "within a longer retention")
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT hopper_dead_partitions_drop('1 hour')`).Scan(&dropped))
	require.Equal(t, 1, dropped)
	var left, steps, edges, tables int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM hopper_dead_jobs`).Scan(&left))
	require.Zero(t, left, "the partition's jobs went with it")
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM hopper_job_steps`).Scan(&steps))
	require.Zero(t, steps, "the durable job's records went through its trigger")
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM hopper_workflow_deps`).Scan(&edges))
	require.Zero(t, edges, "the step's edge went with it")
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname = $1 AND relnamespace = current_schema()::regnamespace`, part).Scan(&tables))
	require.Zero(t, tables, "the table is gone")
	var listed int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM hopper_dead_partitions`).Scan(&listed))
	require.Equal(t, made-1, listed, "the others stay")
}

// deadTables is the table holding each dead job, by id.
func deadTables(ctx context.Context, t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT tableoid::regclass::text FROM hopper_dead_jobs ORDER BY id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

func ptr[T any](v T) *T { return &v }
