package schema_test

import (
	"context"
	"testing"
	"testing/fstest"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/schema"
)

func setup(t *testing.T) (context.Context, *testdb.DB) {
	t.Helper()
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx, testdb.NewEmpty(t)
}

// objects lists every relation, function and trigger in a schema, so that a
// test can compare the catalog before and after migrations.
func objects(t *testing.T, ctx context.Context, d *testdb.DB, schemaName string) []string {
	t.Helper()
	rows, err := d.Pool.Query(ctx, `
		SELECT 'relation ' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
		UNION ALL
		SELECT 'function ' || p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1
		UNION ALL
		SELECT 'type ' || ty.typname FROM pg_type ty JOIN pg_namespace n ON n.oid = ty.typnamespace
		  WHERE n.nspname = $1 AND ty.typrelid = 0 AND ty.typelem = 0
		UNION ALL
		SELECT 'trigger ' || tg.tgname FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid
		  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND NOT tg.tgisinternal
		ORDER BY 1`, schemaName)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

func TestUpDownUp(t *testing.T) {
	ctx, d := setup(t)
	before := objects(t, ctx, d, d.Schema)
	require.Empty(t, before)

	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close()) }()

	v, dirty, err := mg.Version()
	require.NoError(t, err)
	require.Zero(t, v)
	require.False(t, dirty)

	require.NoError(t, mg.Up(ctx))
	require.NoError(t, mg.Up(ctx), "being up to date is not an error")
	v, dirty, err = mg.Version()
	require.NoError(t, err)
	require.Equal(t, schema.Latest(), v)
	require.False(t, dirty)
	up := objects(t, ctx, d, d.Schema)
	for _, want := range []string{
		"relation hopper_jobs", "relation hopper_dead_jobs", "relation hopper_jobs_ready_idx",
		"relation hopper_jobs_lease_idx", "relation hopper_jobs_unique_key_idx",
		"function hopper_notify_enqueued", "trigger hopper_jobs_notify_enqueued",
		"relation hopper_schema_migrations",
	} {
		require.Contains(t, up, want)
	}

	require.NoError(t, mg.Down(ctx, 0))
	v, _, err = mg.Version()
	require.NoError(t, err)
	require.Zero(t, v)
	// Down leaves nothing behind but the (now empty) migrations table.
	require.Equal(t, []string{"relation hopper_schema_migrations", "relation hopper_schema_migrations_pkey"},
		objects(t, ctx, d, d.Schema))

	require.NoError(t, mg.Up(ctx))
	require.Equal(t, up, objects(t, ctx, d, d.Schema), "up again rebuilds exactly the same objects")
}

func TestDownSteps(t *testing.T) {
	ctx, d := setup(t)
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer mg.Close()
	require.NoError(t, mg.Up(ctx))
	require.NoError(t, mg.Down(ctx, len(schema.Versions())))
	v, _, err := mg.Version()
	require.NoError(t, err)
	require.Zero(t, v)
}

// An application that uses golang-migrate for its own tables keeps its own
// schema_migrations; Hopper's state lives in hopper_schema_migrations.
func TestCoexistsWithApplicationMigrations(t *testing.T) {
	ctx, d := setup(t)
	appFiles := fstest.MapFS{
		"1_orders.up.sql":   {Data: []byte("CREATE TABLE orders (id bigint PRIMARY KEY);")},
		"1_orders.down.sql": {Data: []byte("DROP TABLE orders;")},
		"2_notes.up.sql":    {Data: []byte("ALTER TABLE orders ADD COLUMN note text;")},
		"2_notes.down.sql":  {Data: []byte("ALTER TABLE orders DROP COLUMN note;")},
	}
	src, err := iofs.New(appFiles, ".")
	require.NoError(t, err)
	appDB := stdlib.OpenDBFromPool(d.Pool)
	driver, err := migratepgx.WithInstance(appDB, &migratepgx.Config{})
	require.NoError(t, err)
	app, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	require.NoError(t, err)
	require.NoError(t, app.Up())

	require.NoError(t, schema.Up(ctx, d.Pool))

	appVersion, _, err := app.Version()
	require.NoError(t, err)
	require.Equal(t, uint(2), appVersion, "the application's version is untouched")
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer mg.Close()
	v, _, err := mg.Version()
	require.NoError(t, err)
	require.Equal(t, schema.Latest(), v)

	require.NoError(t, mg.Down(ctx, 0))
	require.Contains(t, objects(t, ctx, d, d.Schema), "relation orders", "Hopper's down leaves the application's tables")
	_, err = app.Close()
	require.NoError(t, err)
}

func TestDirtyIsReported(t *testing.T) {
	ctx, d := setup(t)
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer mg.Close()
	require.NoError(t, mg.Up(ctx))
	_, err = d.Pool.Exec(ctx, "UPDATE hopper_schema_migrations SET dirty = true")
	require.NoError(t, err)

	_, dirty, err := mg.Version()
	require.NoError(t, err)
	require.True(t, dirty)
	require.ErrorIs(t, mg.Up(ctx), schema.ErrDirty)
	require.ErrorIs(t, mg.Down(ctx, 1), schema.ErrDirty)

	require.NoError(t, mg.Force(int(schema.Latest())))
	require.NoError(t, mg.Up(ctx))
}

func TestWithSchema(t *testing.T) {
	ctx, d := setup(t)
	// The tables go to the named schema even though the pool's search_path
	// names another one.
	target := d.Schema + "_jobs"
	_, err := d.Pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{target}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = d.Pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{target}.Sanitize()+" CASCADE")
	})

	require.NoError(t, schema.Up(ctx, d.Pool, schema.Name(target)))
	require.Contains(t, objects(t, ctx, d, target), "relation hopper_jobs")
	require.Contains(t, objects(t, ctx, d, target), "relation hopper_schema_migrations")
	require.Empty(t, objects(t, ctx, d, d.Schema))

	err = schema.Up(ctx, d.Pool, schema.Name(d.Schema+"_missing"))
	require.Error(t, err)
}

func TestProgressLog(t *testing.T) {
	ctx, d := setup(t)
	var lines []string
	require.NoError(t, schema.Up(ctx, d.Pool, schema.Logf(func(format string, args ...any) {
		lines = append(lines, format)
	})))
	require.NotEmpty(t, lines, "one line per migration applied")
}

func TestVersionsMatchFiles(t *testing.T) {
	t.Parallel()
	versions := schema.Versions()
	require.NotEmpty(t, versions)
	require.Equal(t, uint(1), versions[0])
	for i, v := range versions {
		require.Equal(t, uint(i+1), v, "migration versions are contiguous")
	}
}
