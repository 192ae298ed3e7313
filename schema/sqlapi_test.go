package schema_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/schema"
)

// sqlAPIObjects are what migration 12 (sql_api) adds.
var sqlAPIObjects = []string{
	"function hopper_enqueue", "function hopper_enqueue_many",
	"function hopper_enqueue_values", "function hopper_go_duration", "function hopper_go_escapes",
}

// TestSQLAPIMigration: migration 12 adds the SQL API's functions, each
// bound to the schema it was migrated into (search_path), SECURITY
// INVOKER; its down drops them and nothing else, and up brings them back.
func TestSQLAPIMigration(t *testing.T) {
	ctx, d := setup(t)
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close()) }()
	require.NoError(t, mg.Up(ctx))
	up := objects(t, ctx, d, d.Schema)
	for _, o := range sqlAPIObjects {
		require.Contains(t, up, o)
	}

	rows, err := d.Pool.Query(ctx, `
		SELECT p.proname, p.prosecdef, coalesce(array_to_string(p.proconfig, ' '), '')
		FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
		WHERE n.nspname = $1 AND p.proname IN ('hopper_enqueue', 'hopper_enqueue_many', 'hopper_enqueue_values')
		ORDER BY 1`, d.Schema)
	require.NoError(t, err)
	type fn struct {
		Name    string
		Definer bool
		Config  string
	}
	fns, err := pgx.CollectRows(rows, pgx.RowToStructByPos[fn])
	require.NoError(t, err)
	require.Len(t, fns, 3)
	for _, f := range fns {
		require.False(t, f.Definer, "%s runs with the caller's grants", f.Name)
		require.Equal(t, "search_path="+d.Schema+", pg_temp", f.Config, f.Name) // the test bed's names need no quotes
	}

	downTo(ctx, t, mg, 11)
	require.Equal(t, objectsAt(t, up, 11), objects(t, ctx, d, d.Schema), "the down drops the functions only (and the later migrations' objects)")
	require.NoError(t, mg.Up(ctx))
	require.Equal(t, up, objects(t, ctx, d, d.Schema))
}

// TestSQLAPIInputsMigration: migration 16 upgrades a schema whose job
// tables hold run times Go cannot read back ('infinity', -infinity, years
// past 9998 or BC, stored by the SQL API or by hand): they move into
// range, the check on hopper_jobs validates, and from then on neither a
// raw INSERT nor the SQL API stores one. The down restores migration 12's
// checks (the SQL API takes 'infinity' again) and drops the check only.
func TestSQLAPIInputsMigration(t *testing.T) {
	ctx, d := setup(t)
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close()) }()
	require.NoError(t, mg.Up(ctx))
	up := objects(t, ctx, d, d.Schema)
	downTo(ctx, t, mg, 15)
	require.Equal(t, objectsAt(t, up, 15), objects(t, ctx, d, d.Schema))

	ever := time.Date(9998, 12, 31, 23, 59, 59, 999999000, time.UTC)
	first := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	at15 := func() map[int64]time.Time {
		_, err := d.Pool.Exec(ctx, `INSERT INTO hopper_jobs (id, queue, kind, payload, state, run_at) OVERRIDING SYSTEM VALUE VALUES
			(101, 'default', 'k', '{}', 'scheduled', 'infinity'),
			(102, 'default', 'k', '{}', 'pending', '-infinity'),
			(103, 'default', 'k', '{}', 'scheduled', '20000-01-01 00:00:00+00'),
			(104, 'default', 'k', '{}', 'pending', '4000-01-01 00:00:00+00 BC'),
			(105, 'default', 'k', '{}', 'scheduled', '9998-12-31 23:59:59.999999+00')`)
		require.NoError(t, err)
		var viaAPI int64
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT id FROM hopper_enqueue(kind => 'k', payload => '{}', run_at => 'infinity')`).Scan(&viaAPI))
		_, err = d.Pool.Exec(ctx, `INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt, max_attempts, errors, reason, created_at, run_at, state)
			VALUES (201, 'default', 'k', 1, '{}', 0, 0, 25, '[]', 'by hand', now(), 'infinity', 'cancelled')`)
		require.NoError(t, err)
		_, err = d.Pool.Exec(ctx, `INSERT INTO hopper_job_history (id, queue, kind, version, payload, priority, attempt, max_attempts, errors, run_at, created_at, keep_until)
			VALUES (301, 'default', 'k', 1, '{}', 0, 1, 25, '[]', '-infinity', now(), now() + interval '1 day')`)
		require.NoError(t, err)
		return map[int64]time.Time{101: ever, 102: first, 103: ever, 104: first, viaAPI: ever, 201: ever, 301: first,
			105: ever} // in range already: kept
	}
	want := at15()

	require.NoError(t, mg.Up(ctx))
	require.Equal(t, up, objects(t, ctx, d, d.Schema))
	for id, at := range want {
		var got time.Time
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT run_at FROM hopper_all_jobs WHERE id = $1`, id).Scan(&got), "job %d: Go reads its run_at", id)
		require.True(t, at.Equal(got), "job %d: run_at %v, want %v", id, got, at)
		_, err := json.Marshal(got.In(time.FixedZone("+14", 14*3600)))
		require.NoError(t, err, "job %d", id)
	}
	var valid bool
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT convalidated FROM pg_constraint
		WHERE conname = 'hopper_jobs_run_at_check' AND conrelid = 'hopper_jobs'::regclass`).Scan(&valid))
	require.True(t, valid, "the check is validated")
	var config string
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT array_to_string(proconfig, ' ') FROM pg_proc
		WHERE proname = 'hopper_enqueue_values_checked' AND pronamespace = $1::regnamespace`, d.Schema).Scan(&config))
	require.Equal(t, "search_path="+d.Schema+", pg_temp", config)

	for _, tc := range []struct{ sql, code string }{
		{`INSERT INTO hopper_jobs (queue, kind, payload, state, run_at) VALUES ('default', 'k', '{}', 'scheduled', 'infinity')`, "23514"},
		{`INSERT INTO hopper_jobs (queue, kind, payload, run_at) VALUES ('default', 'k', '{}', '-infinity')`, "23514"},
		{`SELECT * FROM hopper_enqueue(kind => 'k', payload => '{}', run_at => 'infinity')`, "22023"},
		{`SELECT * FROM hopper_enqueue_many('[{"kind": "k", "payload": {}, "run_at": "infinity"}]')`, "22023"},
	} {
		_, err := d.Pool.Exec(ctx, tc.sql)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, tc.sql)
		require.Equal(t, tc.code, pgErr.Code, tc.sql)
	}

	downTo(ctx, t, mg, 15)
	require.Equal(t, objectsAt(t, up, 15), objects(t, ctx, d, d.Schema))
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT array_to_string(proconfig, ' ') FROM pg_proc
		WHERE proname = 'hopper_enqueue_values_checked' AND pronamespace = $1::regnamespace`, d.Schema).Scan(&config))
	require.Equal(t, "search_path="+d.Schema+", pg_temp", config)
	_, err = d.Pool.Exec(ctx, `DELETE FROM hopper_jobs; DELETE FROM hopper_dead_jobs; DELETE FROM hopper_job_history`)
	require.NoError(t, err)
	at15() // migration 15's checks again: 'infinity' stored
	require.NoError(t, mg.Up(ctx), "and up again over them")
}
