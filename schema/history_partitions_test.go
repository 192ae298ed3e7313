package schema_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/schema"
)

// TestHistoryPartitionsMigration: migrations 19 to 21 turn a history that
// holds rows, and grants, into a partitioned table without moving a row:
// the old table becomes the default partition, validated as holding only
// rows without drop_after, and keeps its indexes; the parent and the view
// read the rows; the grants carry over. The down brings every row back
// into a plain table, including those written into partitions, and up
// again rebuilds the same objects.
func TestHistoryPartitionsMigration(t *testing.T) {
	ctx, d := setup(t)
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close()) }()
	require.NoError(t, mg.Up(ctx))
	up := objects(t, ctx, d, d.Schema)
	downTo(ctx, t, mg, 18)
	require.Equal(t, objectsAt(t, up, 18), objects(t, ctx, d, d.Schema))

	_, err = d.Pool.Exec(ctx, `
		INSERT INTO hopper_job_history (id, queue, kind, version, payload, priority, attempt, max_attempts, errors,
		                                run_at, created_at, keep_until, unique_key, meta)
		VALUES (1, 'default', 'k', 1, '{}', 0, 1, 25, '[]', now(), now(), now() + interval '1 hour', 'key-1', NULL),
		       (2, 'default', 'k', 1, '{}', 0, 1, 25, '[]', now(), now(), now() + interval '1 day', NULL,
		        '{"hopper.workflow": "w"}');
		GRANT SELECT, INSERT ON hopper_job_history TO PUBLIC`)
	require.NoError(t, err)

	require.NoError(t, mg.Up(ctx))
	require.Equal(t, up, objects(t, ctx, d, d.Schema))
	var kind string
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = 'hopper_job_history'::regclass`).Scan(&kind))
	require.Equal(t, "p", kind, "the history is partitioned")
	var where []string
	rows, err := d.Pool.Query(ctx, `SELECT tableoid::regclass::text FROM hopper_job_history ORDER BY id`)
	require.NoError(t, err)
	where, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"hopper_job_history_default", "hopper_job_history_default"}, where, "the rows stayed where they were")
	var seen int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM hopper_all_jobs WHERE state = 'completed'`).Scan(&seen))
	require.Equal(t, 2, seen, "the view reads the partitioned table")
	var valid bool
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT convalidated FROM pg_constraint
		WHERE conname = 'hopper_job_history_drop_after_check' AND conrelid = 'hopper_job_history_default'::regclass`).Scan(&valid))
	require.True(t, valid)
	var granted bool
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT has_table_privilege('public', 'hopper_job_history', 'INSERT')
		AND has_table_privilege('public', 'hopper_history_partitions', 'SELECT')
		AND NOT has_table_privilege('public', 'hopper_job_history', 'DELETE')`).Scan(&granted))
	require.True(t, granted, "PUBLIC keeps SELECT and INSERT on the history, may read the partitions' list, and got nothing more")

	// A row kept within a partition's range goes there; one without
	// drop_after goes to the default partition.
	var made int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT hopper_history_partitions_ensure('1 hour', '3 hours')`).Scan(&made))
	require.GreaterOrEqual(t, made, 3)
	_, err = d.Pool.Exec(ctx, `
		INSERT INTO hopper_job_history (id, queue, kind, version, payload, priority, attempt, max_attempts, errors,
		                                run_at, created_at, keep_until, drop_after)
		VALUES (3, 'default', 'k', 1, '{}', 0, 1, 25, '[]', now(), now(), now() + interval '90 minutes', now() + interval '90 minutes')`)
	require.NoError(t, err)
	var part string
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM hopper_job_history WHERE id = 3`).Scan(&part))
	require.Contains(t, part, "hopper_job_history_2", "a time partition holds it")

	downTo(ctx, t, mg, 18)
	require.Equal(t, objectsAt(t, up, 18), objects(t, ctx, d, d.Schema))
	var ids []int64
	rows, err = d.Pool.Query(ctx, `SELECT id FROM hopper_job_history ORDER BY id`)
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2, 3}, ids, "every row is back in the plain table")
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM hopper_all_jobs WHERE state = 'completed'`).Scan(&seen))
	require.Equal(t, 3, seen, "the view reads the plain table again")
	require.NoError(t, mg.Up(ctx))
	require.Equal(t, up, objects(t, ctx, d, d.Schema))
}

// TestHistoryPartitionFunctions: ensure creates contiguous partitions up
// to now() + ahead, nothing more on a second call, and refuses widths out
// of range; drop removes the partitions whose range has passed, with
// their rows and the edges of the workflow steps among them, and nothing
// else.
func TestHistoryPartitionFunctions(t *testing.T) {
	ctx, d := setup(t)
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close()) }()
	require.NoError(t, mg.Up(ctx))

	for _, bad := range []string{"30 seconds", "32 days"} {
		_, err := d.Pool.Exec(ctx, `SELECT hopper_history_partitions_ensure($1::interval, '1 hour')`, bad)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, bad)
		require.Equal(t, "22023", pgErr.Code, bad)
	}
	// Both calls in one transaction, so at one now(): apart, a minute's
	// boundary passed between them asks one partition more.
	var made, again int
	tx, err := d.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(ctx, `SELECT hopper_history_partitions_ensure('1 minute', '10 minutes')`).Scan(&made))
	require.NoError(t, tx.QueryRow(ctx, `SELECT hopper_history_partitions_ensure('1 minute', '10 minutes')`).Scan(&again))
	require.NoError(t, tx.Commit(ctx))
	require.GreaterOrEqual(t, made, 10)
	require.Zero(t, again, "covered already")
	var gaps int
	require.NoError(t, d.Pool.QueryRow(ctx, `
		SELECT count(*) FROM (SELECT lower_at, lag(upper_at) OVER (ORDER BY lower_at) AS before
		                      FROM hopper_history_partitions) AS p
		WHERE p.before IS NOT NULL AND p.before <> p.lower_at`).Scan(&gaps))
	require.Zero(t, gaps, "contiguous")
	var covers bool
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT max(upper_at) >= now() + interval '10 minutes' FROM hopper_history_partitions`).Scan(&covers))
	require.True(t, covers)

	// Rows in the oldest partition, one of them a workflow step with an
	// edge to its parent, and a row in the next.
	var oldest, next string
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT name FROM hopper_history_partitions ORDER BY lower_at LIMIT 1`).Scan(&oldest))
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT name FROM hopper_history_partitions ORDER BY lower_at OFFSET 1 LIMIT 1`).Scan(&next))
	_, err = d.Pool.Exec(ctx, `
		INSERT INTO hopper_job_history (id, queue, kind, version, payload, priority, attempt, max_attempts, errors,
		                                run_at, created_at, keep_until, drop_after, meta)
		SELECT v.id, 'default', 'k', 1, '{}', 0, 1, 25, '[]', now(), now(), b.at, b.at, v.meta::jsonb
		FROM (VALUES (10, 0, NULL), (11, 0, '{"hopper.workflow": "w"}'), (12, 1, NULL)) AS v(id, nth, meta)
		CROSS JOIN LATERAL (SELECT p.lower_at AS at FROM hopper_history_partitions AS p
		                    ORDER BY p.lower_at OFFSET v.nth LIMIT 1) AS b;
		INSERT INTO hopper_workflow_deps (parent_id, child_id) VALUES (9, 11)`)
	require.NoError(t, err)

	var dropped int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT hopper_history_partitions_drop()`).Scan(&dropped))
	require.Zero(t, dropped, "no range has passed")
	// Make the oldest partition's range a past one in the list (the
	// function trusts the list; the table's bounds do not matter to it).
	_, err = d.Pool.Exec(ctx, `UPDATE hopper_history_partitions
		SET lower_at = now() - interval '2 hours', upper_at = now() - interval '1 hour' WHERE name = $1`, oldest)
	require.NoError(t, err)
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT hopper_history_partitions_drop()`).Scan(&dropped))
	require.Equal(t, 1, dropped)
	var left []int64
	rows, err := d.Pool.Query(ctx, `SELECT id FROM hopper_job_history ORDER BY id`)
	require.NoError(t, err)
	left, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{12}, left, "the oldest partition's rows went with it")
	var edges, listed, tables int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM hopper_workflow_deps`).Scan(&edges))
	require.Zero(t, edges, "the step's edge went with it")
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM hopper_history_partitions WHERE name = $1`, oldest).Scan(&listed))
	require.Zero(t, listed)
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname = $1 AND relnamespace = current_schema()::regnamespace`, oldest).Scan(&tables))
	require.Zero(t, tables, "the table is gone")
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname = $1 AND relnamespace = current_schema()::regnamespace`, next).Scan(&tables))
	require.Equal(t, 1, tables, "the next one stays")
}
