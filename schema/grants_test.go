package schema_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/tools/doccheck"
	"github.com/hopperq/hopper/schema"
)

// definerGrantsVersion is the migration that took EXECUTE on the
// partition functions from PUBLIC (000027_definer_grants).
const definerGrantsVersion = 27

// definers are the schema's SECURITY DEFINER functions (they run as
// their owner, whoever calls them), whether PUBLIC may execute each, and
// why. A new one is listed here, and in docs/sql-api.md's Grants, with
// its reason before it can merge.
var definers = map[string]struct {
	public bool
	why    string
}{
	"hopper_dead_partition_at": {true, "the dead jobs' partition_at default, run for whoever inserts a dead job: " +
		"it only reads which partition covers a time, from a list every reader of the dead jobs may read"},
	"hopper_dead_partitions_ensure":    {false, "creates dead jobs' partitions: for the roles that may delete dead jobs (the pruner)"},
	"hopper_dead_partitions_drop":      {false, "drops dead jobs' partitions, their durable records and held steps with them: for the roles that may delete dead jobs"},
	"hopper_history_partitions_ensure": {false, "creates the history's partitions: for the roles that may delete from the history (the pruner)"},
	"hopper_history_partitions_drop":   {false, "drops the history's partitions: for the roles that may delete from the history"},
}

// partitionCalls call each partition function as a worker's pruner does
// (queries/retention.sql), by name.
var partitionCalls = map[string]string{
	"hopper_history_partitions_ensure": `SELECT hopper_history_partitions_ensure('1 hour', '2 hours')`,
	"hopper_history_partitions_drop":   `SELECT hopper_history_partitions_drop()`,
	"hopper_dead_partitions_ensure":    `SELECT hopper_dead_partitions_ensure('1 hour', '2 hours')`,
	"hopper_dead_partitions_drop":      `SELECT hopper_dead_partitions_drop('1 minute')`,
}

// TestDefinerGrants: the schema's SECURITY DEFINER functions are the ones
// listed in definers, and PUBLIC may execute exactly those listed so,
// and every other function (SECURITY INVOKER, run with the caller's
// grants), as PostgreSQL grants it by default.
func TestDefinerGrants(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := testdb.New(t)
	type function struct {
		Name            string
		Definer, Public bool
	}
	rows, err := d.Pool.Query(ctx, `SELECT p.proname AS name, p.prosecdef AS definer, has_function_privilege('public', p.oid, 'EXECUTE') AS public
		FROM pg_proc AS p WHERE p.pronamespace = current_schema()::regnamespace ORDER BY 1`)
	require.NoError(t, err)
	functions, err := pgx.CollectRows(rows, pgx.RowToStructByName[function])
	require.NoError(t, err)
	found := 0
	for _, f := range functions {
		want, listed := definers[f.Name]
		require.Equal(t, listed, f.Definer, "%s: SECURITY DEFINER functions are listed in definers, with their reason", f.Name)
		if listed {
			found++
			require.Equal(t, want.public, f.Public, "%s: PUBLIC's EXECUTE (%s)", f.Name, want.why)
		} else {
			require.True(t, f.Public, "%s runs with its caller's grants; PUBLIC keeps EXECUTE", f.Name)
		}
	}
	require.Equal(t, len(definers), found, "every function of definers is in the schema")
}

// TestPrivilegeProducer: a role with exactly the producer's grants of
// docs/sql-api.md enqueues through the SQL API and can neither create nor
// drop a partition (SQLSTATE 42501), whether PUBLIC keeps its default
// EXECUTE on the schema's functions or the administrator revoked it. At
// version 26 the producer ran the partition functions with the first
// (issue 61) and, before the guide's grants named them, with both.
func TestPrivilegeProducer(t *testing.T) {
	t.Parallel()
	for _, revoke := range []bool{false, true} {
		name := "PUBLIC as installed"
		if revoke {
			name = "PUBLIC's EXECUTE revoked"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			d := testdb.New(t)
			if revoke {
				revokePublicExecute(ctx, t, d)
			}
			producer := newRole(ctx, t, d, "producer")
			producer.grant(ctx, t, d, documentedGrants(t, d, "sql-api.md", producer)...)
			conn := producer.conn(ctx, t, d)

			var id int64
			require.NoError(t, conn.QueryRow(ctx, `SELECT id FROM hopper_enqueue(kind => 'email', payload => '{"to": "ada"}')`).Scan(&id))
			rows, err := conn.Query(ctx, `SELECT id FROM hopper_enqueue_many('[{"kind": "email", "payload": {"to": "bob"}}]')`)
			require.NoError(t, err)
			many, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			require.NoError(t, err)
			require.Len(t, many, 1)

			for _, fn := range slices.Sorted(maps.Keys(partitionCalls)) {
				_, err := conn.Exec(ctx, partitionCalls[fn])
				requireDenied(t, err, "the producer calls "+fn)
			}
			_, err = conn.Exec(ctx, `DELETE FROM hopper_dead_jobs`)
			requireDenied(t, err, "the producer deletes dead jobs")
			require.Zero(t, partitionCount(ctx, t, d), "no partition was created")
		})
	}
}

// TestPrivilegeWorker: a role with exactly the grants of docs/operating.md
// (workers, the operations and the dashboard run with them), PUBLIC's
// EXECUTE on the schema's functions revoked as that guide allows, runs
// the pruner's statements: it creates and drops the history's and the
// dead jobs' partitions through the functions, prunes both, writes a dead
// job (the column default runs) and enqueues; it cannot drop a partition
// or create a table by itself.
func TestPrivilegeWorker(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := testdb.New(t)
	revokePublicExecute(ctx, t, d)
	app := newRole(ctx, t, d, "app")
	app.grant(ctx, t, d, documentedGrants(t, d, "operating.md", app)...)
	conn := app.conn(ctx, t, d)
	q := db.New(conn)

	made, err := q.EnsureHistoryPartitions(ctx, db.EnsureHistoryPartitionsParams{WidthMs: time.Hour.Milliseconds(), AheadMs: 2 * time.Hour.Milliseconds()})
	require.NoError(t, err)
	require.Positive(t, made)
	made, err = q.EnsureDeadPartitions(ctx, db.EnsureDeadPartitionsParams{WidthMs: time.Hour.Milliseconds(), AheadMs: 2 * time.Hour.Milliseconds()})
	require.NoError(t, err)
	require.Positive(t, made)
	_, err = q.DropHistoryPartitions(ctx)
	require.NoError(t, err)
	_, err = q.DeadPartitionHeld(ctx, db.DeadPartitionHeldParams{RetentionMs: time.Hour.Milliseconds(), Queues: []string{"default"}})
	require.NoError(t, err)
	_, err = q.DropDeadPartitions(ctx, db.DropDeadPartitionsParams{RetentionMs: time.Hour.Milliseconds()})
	require.NoError(t, err)
	_, err = q.PruneHistory(ctx, db.PruneHistoryParams{MaxJobs: 100})
	require.NoError(t, err)
	_, err = q.PruneDead(ctx, db.PruneDeadParams{RetentionMs: time.Hour.Milliseconds(), Queues: []string{"default"}, MaxJobs: 100})
	require.NoError(t, err)

	_, err = conn.Exec(ctx, insertDead, []int64{1}, []*string{nil})
	require.NoError(t, err, "the dead jobs' default (hopper_dead_partition_at) runs for the worker")
	var table string
	require.NoError(t, conn.QueryRow(ctx, `SELECT tableoid::regclass::text FROM hopper_dead_jobs WHERE id = 1`).Scan(&table))
	require.True(t, strings.HasPrefix(table, "hopper_dead_jobs_2"), "the dead job went to a time partition: %s", table)
	var id int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT id FROM hopper_enqueue(kind => 'email', payload => '{}')`).Scan(&id))

	_, err = conn.Exec(ctx, `DROP TABLE `+pgx.Identifier{table}.Sanitize())
	requireDenied(t, err, "the worker drops a partition by itself")
	_, err = conn.Exec(ctx, `CREATE TABLE sneaky (id int)`)
	requireDenied(t, err, "the worker creates a table")
}

// TestPrivilegeReader: a role that may only read Hopper's tables (the
// reader's grants of docs/operating.md, hopper grants --as reader: USAGE
// on the schema, SELECT on every table and view), PUBLIC's EXECUTE as
// PostgreSQL installs it, reads, and can neither enqueue, delete, nor run
// a partition function. At version 26 it ran them.
func TestPrivilegeReader(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := testdb.New(t)
	reader := newRole(ctx, t, d, "reader")
	reader.grant(ctx, t, d, documentedGrants(t, d, "operating.md", reader)...)
	conn := reader.conn(ctx, t, d)

	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM hopper_all_jobs) + (SELECT count(*) FROM hopper_dead_partitions)
		+ (SELECT count(*) FROM hopper_history_partitions)`).Scan(&n))
	var at *time.Time
	require.NoError(t, conn.QueryRow(ctx, `SELECT hopper_dead_partition_at(now())`).Scan(&at), "PUBLIC keeps the column default")
	require.Nil(t, at)

	for fn, call := range partitionCalls {
		_, err := conn.Exec(ctx, call)
		requireDenied(t, err, "the reader calls "+fn)
	}
	_, err := conn.Exec(ctx, `SELECT hopper_enqueue(kind => 'email', payload => '{}')`)
	requireDenied(t, err, "the reader enqueues")
	_, err = conn.Exec(ctx, `DELETE FROM hopper_dead_jobs`)
	requireDenied(t, err, "the reader deletes dead jobs")
	require.Zero(t, partitionCount(ctx, t, d), "no partition was created")
}

// TestPrivilegeOwner: a role that is no superuser, owning an empty
// schema, migrates it (the owner role of docs/operating.md) and runs
// every partition function; the functions' EXECUTE is its own and
// PUBLIC's only where definers says so.
func TestPrivilegeOwner(t *testing.T) {
	ctx, d := setup(t)
	owner := newRole(ctx, t, d, "owner")
	owner.grant(ctx, t, d, "ALTER ROLE "+owner.ident+" LOGIN",
		"ALTER SCHEMA "+pgx.Identifier{d.Schema}.Sanitize()+" OWNER TO "+owner.ident)
	// schema.Up migrates on connections of its own, made from the pool's
	// configuration: the owner logs in.
	cfg, err := pgxpool.ParseConfig(d.URL)
	require.NoError(t, err)
	cfg.ConnConfig.User = owner.name
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT current_database()").Scan(&cfg.ConnConfig.Database))
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, schema.Up(ctx, pool), "the owner migrates without being a superuser")
	var owns bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT bool_and(pg_get_userbyid(p.proowner) = current_user)
		FROM pg_proc AS p WHERE p.pronamespace = current_schema()::regnamespace`).Scan(&owns))
	require.True(t, owns, "the owner made the functions")

	for fn, call := range partitionCalls {
		_, err := pool.Exec(ctx, call)
		require.NoError(t, err, "the owner calls %s", fn)
	}
	for fn, want := range definers {
		var public bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT has_function_privilege('public', p.oid, 'EXECUTE')
			FROM pg_proc AS p WHERE p.proname = $1 AND p.pronamespace = current_schema()::regnamespace`, fn).Scan(&public))
		require.Equal(t, want.public, public, "%s: PUBLIC's EXECUTE when the owner migrated", fn)
	}
}

// TestDefinerGrantsMigration: on a schema at the version before
// definerGrantsVersion, where PUBLIC may execute the partition functions
// (a producer created partitions with the grants docs/sql-api.md gave
// then), the migration takes EXECUTE from PUBLIC and from every role
// that may not delete from the table whose partitions a function manages,
// even one granted it by name (those grants' GRANT EXECUTE ON ALL
// FUNCTIONS), and grants it to the roles that may: a worker keeps its
// pruner without a new grant. The down gives PUBLIC its EXECUTE back.
func TestDefinerGrantsMigration(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := testdb.NewAtVersion(t, definerGrantsVersion-1)
	schemaID := pgx.Identifier{d.Schema}.Sanitize()
	producer := newRole(ctx, t, d, "producer")
	producer.grant(ctx, t, d, "GRANT USAGE ON SCHEMA "+schemaID+" TO "+producer.ident,
		"GRANT SELECT, INSERT ON "+schemaID+".hopper_jobs TO "+producer.ident,
		"GRANT USAGE ON SEQUENCE "+schemaID+".hopper_jobs_id_seq TO "+producer.ident,
		"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA "+schemaID+" TO "+producer.ident)
	worker := newRole(ctx, t, d, "worker") // EXECUTE through PUBLIC only
	worker.grant(ctx, t, d, "GRANT USAGE ON SCHEMA "+schemaID+" TO "+worker.ident,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON "+schemaID+".hopper_dead_jobs, "+schemaID+".hopper_job_history TO "+worker.ident)
	purger := newRole(ctx, t, d, "purger") // may delete dead jobs, not the history
	purger.grant(ctx, t, d, "GRANT USAGE ON SCHEMA "+schemaID+" TO "+purger.ident,
		"GRANT SELECT, DELETE ON "+schemaID+".hopper_dead_jobs TO "+purger.ident,
		"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA "+schemaID+" TO "+purger.ident)

	may := func(r string) map[string]bool {
		t.Helper()
		out := map[string]bool{}
		for fn := range partitionCalls {
			var ok bool
			require.NoError(t, d.Pool.QueryRow(ctx, `SELECT has_function_privilege($1, p.oid, 'EXECUTE')
				FROM pg_proc AS p WHERE p.proname = $2 AND p.pronamespace = current_schema()::regnamespace`, r, fn).Scan(&ok))
			out[fn] = ok
		}
		return out
	}
	all := map[string]bool{"hopper_dead_partitions_drop": true, "hopper_dead_partitions_ensure": true,
		"hopper_history_partitions_drop": true, "hopper_history_partitions_ensure": true}
	none := map[string]bool{"hopper_dead_partitions_drop": false, "hopper_dead_partitions_ensure": false,
		"hopper_history_partitions_drop": false, "hopper_history_partitions_ensure": false}
	for _, r := range []string{"public", producer.name, worker.name, purger.name} {
		require.Equal(t, all, may(r), "%s may run every partition function before the migration", r)
	}

	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close()) }()
	require.NoError(t, mg.Up(ctx))

	require.Equal(t, none, may("public"))
	require.Equal(t, none, may(producer.name), "the producer's grant by name is taken back")
	require.Equal(t, all, may(worker.name), "the worker keeps its pruner")
	require.Equal(t, map[string]bool{"hopper_dead_partitions_drop": true, "hopper_dead_partitions_ensure": true,
		"hopper_history_partitions_drop": false, "hopper_history_partitions_ensure": false}, may(purger.name),
		"a role that may delete dead jobs only keeps the dead jobs' functions")
	conn := producer.conn(ctx, t, d)
	var id int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT id FROM hopper_enqueue(kind => 'email', payload => '{}')`).Scan(&id),
		"the producer still enqueues")
	_, err = conn.Exec(ctx, partitionCalls["hopper_dead_partitions_drop"])
	requireDenied(t, err, "the producer drops dead jobs' partitions after the migration")

	downTo(ctx, t, mg, definerGrantsVersion-1)
	require.Equal(t, all, may("public"), "the down gives PUBLIC its EXECUTE back")
}

// role is a role made for one test, named after its schema: roles belong
// to the cluster, and tests run side by side.
type role struct{ name, ident string }

// newRole creates a role without login for d's test, dropped with what it
// was granted when the test ends (what it owns given to the administrator,
// who drops the schema).
func newRole(ctx context.Context, t *testing.T, d *testdb.DB, name string) role {
	t.Helper()
	r := role{name: d.Schema + "_" + name}
	r.ident = pgx.Identifier{r.name}.Sanitize()
	_, err := d.Pool.Exec(ctx, "CREATE ROLE "+r.ident+" NOLOGIN")
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, stmt := range []string{"REASSIGN OWNED BY " + r.ident + " TO CURRENT_USER", "DROP OWNED BY " + r.ident, "DROP ROLE " + r.ident} {
			_, err := d.Pool.Exec(context.Background(), stmt)
			require.NoError(t, err, stmt)
		}
	})
	return r
}

// grant runs stmts as d's administrator.
func (r role) grant(ctx context.Context, t *testing.T, d *testdb.DB, stmts ...string) {
	t.Helper()
	require.NotEmpty(t, stmts, "grants for %s", r.name)
	for _, stmt := range stmts {
		_, err := d.Pool.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
}

// conn is a connection to d's schema that has SET ROLE to r, closed
// before r is dropped.
func (r role) conn(ctx context.Context, t *testing.T, d *testdb.DB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, d.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, "SET ROLE "+r.ident)
	require.NoError(t, err)
	return conn
}

// documentedGrants are the grants docs/<file> gives the role named as r
// is without its schema's prefix ("app", "producer"), for d's schema and
// r (doccheck.Grants).
func documentedGrants(t *testing.T, d *testdb.DB, file string, r role) []string {
	t.Helper()
	md, err := os.ReadFile(filepath.Join("..", "docs", file))
	require.NoError(t, err)
	name := strings.TrimPrefix(r.name, d.Schema+"_")
	return doccheck.Grants("docs/"+file, string(md), name, pgx.Identifier{d.Schema}.Sanitize(), r.ident)
}

// revokePublicExecute takes PUBLIC's EXECUTE on every function of d's
// schema, as an administrator may (docs/operating.md, Least privilege).
func revokePublicExecute(ctx context.Context, t *testing.T, d *testdb.DB) {
	t.Helper()
	_, err := d.Pool.Exec(ctx, "REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA "+pgx.Identifier{d.Schema}.Sanitize()+" FROM PUBLIC")
	require.NoError(t, err)
}

// requireDenied requires err to be PostgreSQL's permission denied
// (SQLSTATE 42501).
func requireDenied(t *testing.T, err error, what string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, what)
	require.Equal(t, "42501", pgErr.Code, "%s: %v", what, err)
}

// partitionCount is how many partitions of the history and of the dead
// jobs d's schema lists.
func partitionCount(ctx context.Context, t *testing.T, d *testdb.DB) int {
	t.Helper()
	var n int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM hopper_history_partitions)
		+ (SELECT count(*) FROM hopper_dead_partitions)`).Scan(&n))
	return n
}
