package tests

import (
	"context"
	debugbuildinfo "debug/buildinfo"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/buildinfo"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/schema"
)

// requireLine checks a failure: the exit code and the exact one line on
// stderr, said once ("hopper migrate: ...", never "hopper migrate: hopper:").
func requireLine(t *testing.T, r result, code int, line string) {
	t.Helper()
	require.Equal(t, code, r.code, "stdout %q stderr %q", r.stdout, r.stderr)
	require.Equal(t, line+"\n", r.stderr)
}

// migrateVersion is the version hopper migrate version reports: its first
// line (the second says which build applied it).
func migrateVersion(t *testing.T, url string) string {
	t.Helper()
	r := runHopper(t, url, "", "migrate", "version")
	require.Zero(t, r.code, r.stderr)
	first, _, _ := strings.Cut(strings.TrimSpace(r.stdout), "\n")
	return first
}

func versionLine(v uint) string {
	return fmt.Sprintf("schema version %d (this build's latest: %d)", v, schema.Latest())
}

// TestMigrateMissingSchema: a search_path (or --schema) naming no existing
// schema is reported as such, with the statement that creates it, instead
// of golang-migrate's scan error on current_schema().
func TestMigrateMissingSchema(t *testing.T) {
	t.Parallel()
	d := testdb.NewEmpty(t)
	server := testdb.Server(t)
	missing := d.Schema + "_missing"
	for _, tc := range []struct {
		name, searchPath string
		args             []string
		line             string
	}{
		{"search_path", missing, []string{"migrate", "up"},
			"hopper migrate: the schema named in search_path, " + missing + ", does not exist: create it with CREATE SCHEMA " + missing},
		{"version", missing, []string{"migrate", "version"},
			"hopper migrate: the schema named in search_path, " + missing + ", does not exist: create it with CREATE SCHEMA " + missing},
		{"quoted", `"` + strings.ToUpper(missing) + `"`, []string{"migrate", "up"},
			`hopper migrate: the schema named in search_path, "` + strings.ToUpper(missing) + `", does not exist: create it with CREATE SCHEMA "` + strings.ToUpper(missing) + `"`},
		{"two names", missing + "," + missing + "_2", []string{"migrate", "up"},
			"hopper migrate: none of the schemas named in search_path (" + missing + ", " + missing + "_2) exists: create one, e.g. CREATE SCHEMA " + missing},
		{"--schema", d.Schema, []string{"migrate", "up", "--schema", missing},
			`hopper migrate: schema "` + missing + `" does not exist: create it with CREATE SCHEMA ` + missing},
	} {
		r := runHopper(t, testdb.WithSearchPath(server, tc.searchPath), "", tc.args...)
		requireLine(t, r, 1, tc.line)
	}
	require.Equal(t, versionLine(0), migrateVersion(t, d.URL), "nothing installed anywhere")
}

// TestSchemaUpMissingSchema: a program calling schema.Up (examples/worker)
// gets ErrNoSchema with the same advice, and succeeds once the schema
// exists.
func TestSchemaUpMissingSchema(t *testing.T) {
	t.Parallel()
	d := testdb.NewEmpty(t)
	ctx := context.Background()
	missing := d.Schema + "_missing"
	pool, err := pgxpool.New(ctx, testdb.WithSearchPath(testdb.Server(t), missing))
	require.NoError(t, err)
	defer pool.Close()

	err = schema.Up(ctx, pool)
	require.ErrorIs(t, err, schema.ErrNoSchema)
	require.EqualError(t, err, "hopper: migrate: the schema named in search_path, "+missing+", does not exist: create it with CREATE SCHEMA "+missing)
	_, err = schema.NewMigrator(ctx, d.Pool, schema.Name(missing))
	require.ErrorIs(t, err, schema.ErrNoSchema)

	_, err = d.Pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{missing}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = d.Pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{missing}.Sanitize()+" CASCADE")
	})
	require.NoError(t, schema.Up(ctx, pool))
}

// TestMigrateRefusesImpossible: down past version 0 and force to a version
// no migration has are refused before anything runs, in one line.
func TestMigrateRefusesImpossible(t *testing.T) {
	t.Parallel()
	d := testdb.NewEmpty(t)
	latest := schema.Latest()
	applied := len(schema.Versions())
	appliedText := fmt.Sprintf("%d migrations are", applied)
	if applied == 1 {
		appliedText = "1 migration is"
	}
	known := "0 (none applied)"
	for i, v := range schema.Versions() {
		if i == applied-1 {
			known += fmt.Sprintf(" and %d", v)
		} else {
			known += fmt.Sprintf(", %d", v)
		}
	}

	for _, tc := range []struct {
		name string
		args []string
		line string
	}{
		{"down at 0", []string{"migrate", "down"}, "hopper migrate: nothing to undo: the schema is at version 0"},
		{"down --yes at 0", []string{"migrate", "down", "--yes"}, "hopper migrate: nothing to undo: the schema is at version 0"},
		{"down N at 0", []string{"migrate", "down", "3"}, "hopper migrate: nothing to undo: the schema is at version 0"},
		{"force unknown at 0", []string{"migrate", "force", fmt.Sprint(latest + 6)},
			fmt.Sprintf("hopper migrate: %d is not a version of Hopper's schema: this build knows %s", latest+6, known)},
	} {
		requireLine(t, runHopper(t, d.URL, "", tc.args...), 1, tc.line)
		require.Equal(t, versionLine(0), migrateVersion(t, d.URL), tc.name)
	}
	r := runHopper(t, d.URL, "", "migrate", "down", "--all")
	require.Zero(t, r.code, "down --all with nothing applied does nothing: %s", r.stderr)
	require.Equal(t, versionLine(0), strings.TrimSpace(r.stdout))

	require.Zero(t, runHopper(t, d.URL, "", "migrate", "up").code)
	for _, tc := range []struct {
		name string
		args []string
		line string
	}{
		{"down too far", []string{"migrate", "down", fmt.Sprint(applied + 4), "--yes"},
			fmt.Sprintf("hopper migrate: cannot go down %d steps from version %d: %s applied", applied+4, latest, appliedText)},
		{"down too far, asking", []string{"migrate", "down", fmt.Sprint(applied + 1)},
			fmt.Sprintf("hopper migrate: cannot go down %d steps from version %d: %s applied", applied+1, latest, appliedText)},
		{"force unknown", []string{"migrate", "force", fmt.Sprint(latest + 6)},
			fmt.Sprintf("hopper migrate: %d is not a version of Hopper's schema: this build knows %s", latest+6, known)},
	} {
		r := runHopper(t, d.URL, "yes\n", tc.args...)
		requireLine(t, r, 1, tc.line)
		require.Empty(t, r.stdout, "%s: nothing ran, nothing asked", tc.name)
		require.Equal(t, versionLine(latest), migrateVersion(t, d.URL), tc.name)
	}

	// 0 is the version with no migration applied; force records it.
	r = runHopper(t, d.URL, "", "migrate", "force", "0")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, versionLine(0), strings.TrimSpace(r.stdout))
	r = runHopper(t, d.URL, "", "migrate", "force", fmt.Sprint(latest))
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, versionLine(latest), strings.TrimSpace(r.stdout))
}

// TestMigrateUnknownRecordedVersion: a schema at a version this build does
// not carry (migrated by a newer Hopper) is refused by up and down, not
// answered with "file does not exist".
func TestMigrateUnknownRecordedVersion(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	future := schema.Latest() + 6
	_, err := d.Pool.Exec(context.Background(), "UPDATE hopper_schema_migrations SET version = $1", future)
	require.NoError(t, err)
	line := fmt.Sprintf("hopper migrate: the schema is at version %d, which this build of Hopper does not carry (its latest is %d): migrate with the Hopper that applied it", future, schema.Latest())
	for _, args := range [][]string{{"migrate", "up"}, {"migrate", "down", "--yes"}, {"migrate", "down", "--all", "--yes"}} {
		requireLine(t, runHopper(t, d.URL, "", args...), 1, line)
	}
	require.Equal(t, versionLine(future), migrateVersion(t, d.URL))
}

// TestMigrateDownAsks: down drops every job, so it asks first, as purge
// does; no answer, or anything but yes, is no.
func TestMigrateDownAsks(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx := context.Background()
	for range 2 {
		require.Zero(t, runHopper(t, d.URL, "", "enqueue", "--kind", "k").code)
	}
	_, err := d.Pool.Exec(ctx, `INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt, max_attempts, errors, reason, created_at)
		VALUES (1000000, 'default', 'k', 1, '{}', 0, 1, 1, '[]', 'test', now())`)
	require.NoError(t, err)
	drop := fmt.Sprintf("This drops Hopper's tables and every job in schema %s (2 live, 1 dead). Type yes to go on: ", d.Schema)
	undo := fmt.Sprintf("This undoes Hopper's schema migrations in schema %s from version %d to %d. Type yes to go on: ",
		d.Schema, schema.Latest(), schema.Latest()-1)

	for _, tc := range []struct {
		name, stdin string
		args        []string
		question    string
		line        string
	}{
		{"no stdin", "", []string{"migrate", "down"}, undo,
			"hopper migrate: not confirmed: no answer on stdin; nothing undone (pass --yes to skip the question)"},
		{"no stdin, --all", "", []string{"migrate", "down", "--all"}, drop,
			"hopper migrate: not confirmed: no answer on stdin; nothing undone (pass --yes to skip the question)"},
		{"no", "no\n", []string{"migrate", "down", "--all"}, drop,
			"hopper migrate: not confirmed; nothing undone (type yes, or pass --yes to skip the question)"},
		{"y is not yes", "y\n", []string{"migrate", "down", "1"}, undo,
			"hopper migrate: not confirmed; nothing undone (type yes, or pass --yes to skip the question)"},
	} {
		r := runHopper(t, d.URL, tc.stdin, tc.args...)
		requireLine(t, r, 1, tc.line)
		require.Equal(t, tc.question, strings.TrimSuffix(r.stdout, "\n"), tc.name)
		require.Equal(t, versionLine(schema.Latest()), migrateVersion(t, d.URL), tc.name)
	}
	var live int
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM hopper_jobs").Scan(&live))
	require.Equal(t, 2, live, "nothing dropped")

	r := runHopper(t, d.URL, "yes\n", "migrate", "down", "--all")
	require.Zero(t, r.code, r.stderr)
	require.True(t, strings.HasPrefix(r.stdout, drop), r.stdout)
	require.Contains(t, r.stdout, versionLine(0))

	require.Zero(t, runHopper(t, d.URL, "", "migrate", "up").code)
	r = runHopper(t, d.URL, "", "migrate", "down", "--yes")
	require.Zero(t, r.code, r.stderr)
	require.NotContains(t, r.stdout, "Type yes")
	require.Contains(t, r.stdout, versionLine(schema.Latest()-1))
}

// TestMigrateDirtyDown: down on a dirty migrations table says how to
// repair it, before asking anything.
func TestMigrateDirtyDown(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	_, err := d.Pool.Exec(context.Background(), "UPDATE hopper_schema_migrations SET dirty = true")
	require.NoError(t, err)
	line := fmt.Sprintf("hopper migrate: the schema migrations table is dirty: migration %d failed half-way; repair the schema by hand, then run hopper migrate force <version it is at>", schema.Latest())
	for _, args := range [][]string{{"migrate", "down"}, {"migrate", "up"}} {
		r := runHopper(t, d.URL, "", args...)
		requireLine(t, r, 1, line)
		require.Empty(t, r.stdout)
	}
}

// TestMigrateUsage: argument mistakes are found before connecting, and the
// unknown-action message lists every action.
func TestMigrateUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		line string
	}{
		{[]string{"migrate"}, "hopper migrate: say up, down, version or force (run hopper migrate --help)"},
		{[]string{"migrate", "sideways"}, `hopper migrate: unknown migrate action "sideways" (up, down, version or force) (run hopper migrate --help)`},
		{[]string{"migrate", "down", "0"}, "hopper migrate: down takes a positive number of migrations (run hopper migrate --help)"},
		{[]string{"migrate", "down", "2", "--all"}, "hopper migrate: say down N or down --all, not both (run hopper migrate --help)"},
		{[]string{"migrate", "up", "2"}, "hopper migrate: up takes no argument (run hopper migrate --help)"},
		{[]string{"migrate", "force"}, "hopper migrate: force takes the version the schema is really at (0 for none) (run hopper migrate --help)"},
		{[]string{"migrate", "force", "x"}, "hopper migrate: force takes the version the schema is really at (0 for none) (run hopper migrate --help)"},
	} {
		// An unreachable server: usage errors come first.
		requireLine(t, runHopper(t, "postgres://nobody@127.0.0.1:1/none?connect_timeout=2", "", tc.args...), 2, tc.line)
	}
}

// TestCLIMigrateBuilds: hopper migrate version says which build applied
// the schema's version: the hopper binary that migrated, as hopper version
// names it, with its commit (or unstamped), its Go and the role; a schema
// the application migrated names the application's program instead, so
// the two can be set side by side. Before migration 30 nothing was
// recorded, and it says so.
func TestCLIMigrateBuilds(t *testing.T) {
	t.Parallel()
	info, err := debugbuildinfo.ReadFile(hopperBin)
	require.NoError(t, err)
	bin := buildinfo.Of(info)
	d := testdb.NewEmpty(t)
	var role string
	require.NoError(t, d.Pool.QueryRow(context.Background(), "SELECT current_user").Scan(&role))
	require.Zero(t, runHopper(t, d.URL, "", "migrate", "up").code)
	r := runHopper(t, d.URL, "", "migrate", "version")
	require.Zero(t, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2, r.stdout)
	require.Equal(t, versionLine(schema.Latest()), lines[0])
	require.Regexp(t, `^applied by hopper `+regexp.QuoteMeta(fmt.Sprintf("%s (%s, commit %s, %s) as role %s at ",
		bin.Version, buildinfo.Module+"/cmd/hopper", bin.Commit(), bin.Go, role))+`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`, lines[1])

	// Migrated by the application (this test binary, through testdb).
	app := testdb.New(t)
	r = runHopper(t, app.URL, "", "migrate", "version")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "applied by hopper "+buildinfo.Version()+" ("+buildinfo.Read().Program+", commit ")

	old := testdb.NewAtVersion(t, 29)
	r = runHopper(t, old.URL, "", "migrate", "version")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, versionLine(29)+"\napplied by a build that did not record itself (before migration 30, or an older Hopper)\n", r.stdout)
}
