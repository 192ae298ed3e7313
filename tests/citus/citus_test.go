// Package citus runs Hopper on a Citus formation (internal/testbed/citusbed:
// a coordinator and two worker nodes on local ports, Citus installed from
// ../shared/citus/install.sh when it is missing): Hopper schemas in
// distributed schemas (schema-based sharding), migrated through the
// coordinator by schema.Up and by `hopper migrate`, checked, and a job
// enqueued and claimed through the coordinator. `make citus` runs it
// verbosely; `make test` runs it too, and it skips where Citus cannot be
// installed (not root, no ../shared).
package citus

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/citusbed"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/tests/internal/bed"
)

var chore = jobs.MustDefine[bed.Chore]("citus_chore")

// TestCitusMigrations: on one formation, a distributed schema migrated by
// schema.Up and another by `hopper migrate up`, each to the latest
// version, every table of theirs a Citus table of the schema's node
// (schema-based sharding), schema.Check passing on both; then a job
// enqueued and claimed through the coordinator.
// The figures (the formation's start, each migration's time against a
// plain PostgreSQL schema's in the same run) are logged, never asserted.
func TestCitusMigrations(t *testing.T) {
	testdb.Slow(t, "starts a Citus formation: a coordinator and two worker nodes")
	bin, remove, err := bed.BuildHopper(".")
	require.NoError(t, err)
	t.Cleanup(remove)
	f := citusbed.New(t)
	t.Logf("figure: formation (coordinator and %d workers) up in %v", len(f.Workers), f.Took.Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The same build's migration of a plain PostgreSQL schema, in the same
	// run, for the comparison.
	plain := testdb.NewEmpty(t)
	began := time.Now()
	require.NoError(t, schema.Up(ctx, plain.Pool))
	t.Logf("figure: plain PostgreSQL schema migrated to %d by schema.Up in %v", schema.Latest(), time.Since(began).Round(time.Millisecond))

	// schema.Up through the coordinator.
	up := distributedSchema(t, ctx, f, "hopper_citus_up")
	began = time.Now()
	require.NoError(t, schema.Up(ctx, up))
	t.Logf("figure: distributed schema migrated to %d by schema.Up in %v", schema.Latest(), time.Since(began).Round(time.Millisecond))
	checkMigrated(t, ctx, f, up, "hopper_citus_up")

	// `hopper migrate up`, as an operator runs it.
	cli := distributedSchema(t, ctx, f, "hopper_citus_cli")
	began = time.Now()
	out, err := exec.CommandContext(ctx, bin, "--database-url", f.URL(), "migrate", "up", "--schema", "hopper_citus_cli").CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("figure: distributed schema migrated to %d by hopper migrate up in %v", schema.Latest(), time.Since(began).Round(time.Millisecond))
	checkMigrated(t, ctx, f, cli, "hopper_citus_cli")

	// A job enqueued through the coordinator (the enqueue's trigger runs on
	// the schema's node) and claimed by the worker's claim statement.
	// (A worker does not start on Citus yet: its registration's upsert
	// calls now() in ON CONFLICT DO UPDATE, which Citus refuses; the
	// sharded worker is issue 64's next step.)
	res, err := chore.Enqueue(ctx, up, bed.Chore{N: 1})
	require.NoError(t, err)
	claimed, err := db.New(up).Dequeue(ctx, db.DequeueParams{
		Owner: "citus-test", LeaseMs: 60_000, Queue: jobs.DefaultQueue, AfterPriority: -1, AfterRunAt: time.Time{},
		Kinds: []string{chore.Name()}, MaxVersions: []int32{int32(chore.Version())}, MaxJobs: 10,
	})
	require.NoError(t, err)
	require.Len(t, claimed, 1, "the one job enqueued is claimed")
	require.Equal(t, res.ID, claimed[0].ID)
	require.Equal(t, "running", claimed[0].State)
	require.Equal(t, int32(1), claimed[0].Attempt)
}

// distributedSchema creates a distributed schema (schema-based sharding)
// on the formation and returns a pool whose search_path is that schema.
func distributedSchema(t *testing.T, ctx context.Context, f *citusbed.Formation, name string) *pgxpool.Pool {
	t.Helper()
	conn, err := pgx.Connect(ctx, f.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "SET citus.enable_schema_based_sharding = on")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	cfg, err := pgxpool.ParseConfig(f.URL())
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// checkMigrated: the schema is at the latest version, clean, Check passes,
// and every table of it is a Citus table of the schema (its tables on one
// node), none left on the coordinator alone.
func checkMigrated(t *testing.T, ctx context.Context, f *citusbed.Formation, pool *pgxpool.Pool, name string) {
	t.Helper()
	require.NoError(t, schema.Check(ctx, pool))
	var version int64
	var dirty bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT version, dirty FROM hopper_schema_migrations").Scan(&version, &dirty))
	require.Equal(t, int64(schema.Latest()), version)
	require.False(t, dirty)

	var distributed bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM public.citus_schemas WHERE schema_name = $1::regnamespace)", name).Scan(&distributed))
	require.True(t, distributed, "%s is a distributed schema", name)
	rows, err := pool.Query(ctx, `
		SELECT c.relname, coalesce(t.citus_table_type, 'not a Citus table')
		FROM pg_class AS c
		LEFT JOIN public.citus_tables AS t ON t.table_name = c.oid
		WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
		ORDER BY 1`, name)
	require.NoError(t, err)
	kinds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var rel, kind string
		err := r.Scan(&rel, &kind)
		return rel + ": " + kind, err
	})
	require.NoError(t, err)
	require.NotEmpty(t, kinds)
	for _, k := range kinds {
		require.True(t, strings.HasSuffix(k, ": schema"), "every table is the distributed schema's: %s", k)
	}
	var nodes int
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT count(DISTINCT s.nodeport) FROM pg_catalog.citus_shards AS s
		WHERE s.table_name::regclass::oid IN (SELECT c.oid FROM pg_class AS c WHERE c.relnamespace = $1::regnamespace)`, name).Scan(&nodes))
	require.Equal(t, 1, nodes, "the schema's tables are on one node")
}
