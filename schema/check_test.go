package schema_test

import (
	"context"
	"testing"

	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
)

// TestCheck: schema.Check answers without DDL rights whether the schema
// is migrated: nil at the latest version; jobs.ErrNotMigrated, naming
// what is missing, when it is older or empty; ErrDirty after a migration
// failed half-way; ErrNoAccess, naming the GRANT, for a role that may not
// read the migrations table, and nil once it may.
func TestCheck(t *testing.T) {
	ctx, empty := setup(t)
	require.ErrorIs(t, schema.Check(ctx, empty.Pool), jobs.ErrNotMigrated)
	require.ErrorContains(t, schema.Check(ctx, empty.Pool), "has no Hopper tables (version 0)")

	old := testdb.NewAtVersion(t, 14)
	err := schema.Check(ctx, old.Pool)
	require.ErrorIs(t, err, jobs.ErrNotMigrated)
	require.ErrorContains(t, err, "is at version 14 without migration")

	d := testdb.New(t)
	require.NoError(t, schema.Check(ctx, d.Pool))
	require.NoError(t, schema.Check(ctx, empty.Pool, schema.Name(d.Schema)), "the Name option picks the schema")

	// A role with the least-privilege grants but none on the migrations
	// table.
	role := d.Schema + "_checker"
	roleID := pgx.Identifier{role}.Sanitize()
	for _, stmt := range []string{
		"CREATE ROLE " + roleID + " LOGIN",
		"GRANT USAGE ON SCHEMA " + pgx.Identifier{d.Schema}.Sanitize() + " TO " + roleID,
	} {
		_, err := d.Pool.Exec(ctx, stmt)
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for _, stmt := range []string{"DROP OWNED BY " + roleID, "DROP ROLE " + roleID} {
			_, _ = d.Pool.Exec(context.Background(), stmt)
		}
	})
	cfg, err := pgxpool.ParseConfig(d.URL)
	require.NoError(t, err)
	cfg.ConnConfig.User = role
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT current_database()").Scan(&cfg.ConnConfig.Database))
	app, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(app.Close)
	err = schema.Check(ctx, app)
	require.ErrorIs(t, err, schema.ErrNoAccess)
	grant := "GRANT SELECT ON " + pgx.Identifier{d.Schema, schema.MigrationsTable}.Sanitize() + " TO " + roleID
	require.ErrorContains(t, err, grant)
	_, err = d.Pool.Exec(ctx, grant)
	require.NoError(t, err)
	require.NoError(t, schema.Check(ctx, app), "with the grant the error named")

	_, err = d.Pool.Exec(ctx, "UPDATE "+schema.MigrationsTable+" SET dirty = true")
	require.NoError(t, err)
	require.ErrorIs(t, schema.Check(ctx, app), schema.ErrDirty)
}

// TestCheckWaitsOutAMigration: while a migration runs, golang-migrate
// holds its lock and records the version dirty. Check, called then (an app
// replica starting while the deploy's migration step runs), waits for the
// lock instead of reporting a healthy schema as half-migrated, and answers
// nil once the migration ends clean. The migration is played by
// golang-migrate's own driver, so the lock is the one it really takes.
func TestCheckWaitsOutAMigration(t *testing.T) {
	ctx, _ := setup(t)
	d := testdb.New(t)
	connCfg := d.Pool.Config().ConnConfig
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT current_database()").Scan(&connCfg.Database))
	sqlDB := stdlib.OpenDB(*connCfg)
	t.Cleanup(func() { _ = sqlDB.Close() })
	driver, err := migratepgx.WithInstance(sqlDB, &migratepgx.Config{MigrationsTable: schema.MigrationsTable, SchemaName: d.Schema})
	require.NoError(t, err)
	t.Cleanup(func() { _ = driver.Close() })

	latest := int(schema.Latest())
	require.NoError(t, driver.Lock())
	require.NoError(t, driver.SetVersion(latest, true), "what golang-migrate records before it runs a migration")

	checked := make(chan error, 1)
	go func() { checked <- schema.Check(ctx, d.Pool) }()
	testdb.WaitFor(t, "Check to wait for the migrations' lock", func() bool {
		var waiting bool
		err := d.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND NOT granted)").Scan(&waiting)
		return err == nil && waiting
	})
	select {
	case err := <-checked:
		t.Fatalf("Check answered while the migration ran: %v", err)
	default:
	}
	require.NoError(t, driver.SetVersion(latest, false), "the migration ends clean")
	require.NoError(t, driver.Unlock())
	require.NoError(t, <-checked)
}
