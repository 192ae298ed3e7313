// Package citus runs Hopper on a Citus formation (internal/testbed/citusbed:
// a coordinator and two worker nodes on local ports, Citus installed from
// ../shared/citus/install.sh when it is missing): Hopper schemas in
// distributed schemas (schema-based sharding), migrated through the
// coordinator by schema.Up and by `hopper migrate`, checked, a job
// enqueued and claimed through the coordinator, and a worker working jobs
// there. `make citus` runs it verbosely; `make test` runs it too, and it
// skips where Citus cannot be installed (not root, no ../shared).
package citus

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
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
	"github.com/hopperq/hopper/worker"
)

var chore = jobs.MustDefine[bed.Chore]("citus_chore")

// TestCitusMigrations: on one formation, a distributed schema migrated by
// schema.Up and another by `hopper migrate up`, each to the latest
// version, every table of theirs a Citus table of the schema's node
// (schema-based sharding), schema.Check passing on both; then a job
// enqueued and claimed through the coordinator, and a worker that
// registers, claims, runs and acknowledges 50 jobs there.
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

	// A worker on the other distributed schema, through the coordinator:
	// it registers, claims, runs and acknowledges every job enqueued.
	// One statement per job: a batch's INSERT ... SELECT is committed in
	// two phases by Citus, which the trigger's NOTIFY forbids
	// (docs/scaling-out.md).
	const n = 50
	for i := range n {
		_, err = chore.Enqueue(ctx, cli, bed.Chore{N: i})
		require.NoError(t, err)
	}
	w, err := worker.New(cli, worker.Config{Queues: map[string]int{jobs.DefaultQueue: 4}, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.NoError(t, err)
	var ran atomic.Int64
	require.NoError(t, worker.Handle(w, chore, func(context.Context, *jobs.Job[bed.Chore]) error {
		ran.Add(1)
		return nil
	}))
	wctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	began = time.Now()
	go func() { errc <- w.Run(wctx) }()
	testdb.WaitDrained(t, "every job on the distributed schema worked", func() int64 {
		select {
		case err := <-errc:
			require.NoError(t, err, "the worker stopped")
			require.FailNow(t, "the worker stopped")
		default:
		}
		var live int64
		require.NoError(t, cli.QueryRow(ctx, "SELECT count(*) FROM hopper_jobs").Scan(&live))
		return live
	})
	t.Logf("figure: %d jobs worked on a distributed schema in %v", n, time.Since(began).Round(time.Millisecond))
	stop()
	require.NoError(t, <-errc)
	require.EqualValues(t, n, ran.Load(), "each job ran once")
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
