package schema_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/buildinfo"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/schema"
)

// versionsOf lists the versions builds records.
func versionsOf(builds []schema.MigrationBuild) []uint {
	out := []uint{}
	for _, b := range builds {
		out = append(out, b.Version)
	}
	return out
}

// TestMigrationBuildsRecorded: migrating from nothing records this build
// as the one that applied every migration, with the role that ran it;
// a run that applies nothing changes nothing.
func TestMigrationBuildsRecorded(t *testing.T) {
	ctx, d := setup(t)
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close()) }()
	builds, err := mg.Builds(ctx)
	require.NoError(t, err)
	require.Empty(t, builds, "nothing applied, no table yet")

	start := time.Now()
	require.NoError(t, mg.Up(ctx))
	builds, err = mg.Builds(ctx)
	require.NoError(t, err)
	require.Equal(t, schema.Versions(), versionsOf(builds))
	var role string
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT current_user").Scan(&role))
	b := buildinfo.Read()
	for _, got := range builds {
		require.Equal(t, b.Version, got.HopperVersion)
		require.Equal(t, b.Program, got.Program)
		require.Equal(t, b.Revision, got.Revision)
		require.Equal(t, b.Modified, got.Modified)
		require.Equal(t, b.Go, got.Go)
		require.Equal(t, role, got.AppliedBy)
		require.WithinRange(t, got.AppliedAt, start.Add(-time.Minute), time.Now().Add(time.Minute))
	}
	// A test binary records no commit: the record says so, rather than
	// naming one.
	require.Equal(t, "devel "+buildinfo.Unstamped, builds[0].HopperVersion)
	require.Empty(t, builds[0].Revision)
	require.True(t, builds[0].CommitTime.IsZero())

	require.NoError(t, mg.Up(ctx))
	again, err := mg.Builds(ctx)
	require.NoError(t, err)
	require.Equal(t, builds, again, "a run with nothing to apply records nothing")
}

// TestMigrationBuildsFollowDown: an upgrade from a schema older than the
// table records only the migrations it applied (the older ones are not
// claimed for this build); a down forgets the migrations it undid, down
// below the table drops it, and up again records anew. The record is the
// builds table as the SQL shows it too.
func TestMigrationBuildsFollowDown(t *testing.T) {
	ctx, _ := setup(t)
	d := testdb.NewAtVersion(t, 27)
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close()) }()
	var exists bool
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT to_regclass('hopper_migration_builds') IS NOT NULL").Scan(&exists))
	require.False(t, exists)

	require.NoError(t, mg.Up(ctx))
	builds, err := mg.Builds(ctx)
	require.NoError(t, err)
	applied := slices.DeleteFunc(schema.Versions(), func(v uint) bool { return v < 28 })
	require.Equal(t, applied, versionsOf(builds), "only what this run applied")

	// Down below 30 drops the table, and up records 28 on again.
	downTo(ctx, t, mg, 29)
	builds, err = mg.Builds(ctx)
	require.NoError(t, err)
	require.Empty(t, builds)
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT to_regclass('hopper_migration_builds') IS NOT NULL").Scan(&exists))
	require.False(t, exists)
	require.NoError(t, mg.Up(ctx))
	var n int
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM hopper_migration_builds WHERE version = 30 AND program = $1",
		buildinfo.Read().Program).Scan(&n))
	require.Equal(t, 1, n)
}

// TestMigrationBuildsForgetUndone: the statement a run records with
// forgets the migrations above the version the run left (what a down
// undid) and records the ones it applied, replacing an older record of
// the same migration. 30 being the latest, a down from it drops the table,
// so the statement is run here as a down from a later version would.
func TestMigrationBuildsForgetUndone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := testdb.New(t)
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close()) }()
	latest := int64(schema.Latest())
	// Rows of two later migrations, as a newer Hopper leaves them.
	_, err = d.Pool.Exec(ctx, `INSERT INTO hopper_migration_builds (version, hopper_version, program, revision, vcs_modified, go_version)
		VALUES ($1, 'v9.0.0', 'example.com/new', '', false, 'go1.99'), ($1 + 1, 'v9.0.0', 'example.com/new', '', false, 'go1.99')`, latest+1)
	require.NoError(t, err)

	// Down from latest+2 to latest: both forgotten, nothing recorded.
	q := db.New(d.Pool)
	require.NoError(t, q.RecordMigrationBuilds(ctx, db.RecordMigrationBuildsParams{HopperVersion: "v9.0.0", Program: "example.com/new",
		GoVersion: "go1.99", Versions: []int64{}, ToVersion: latest}))
	builds, err := mg.Builds(ctx)
	require.NoError(t, err)
	require.Equal(t, schema.Versions(), versionsOf(builds), "the migrations above the version left are forgotten")

	// Up again from latest-1 by another build: its row replaces this one's.
	require.NoError(t, q.RecordMigrationBuilds(ctx, db.RecordMigrationBuildsParams{HopperVersion: "v9.0.0", Program: "example.com/new",
		GoVersion: "go1.99", Versions: []int64{latest}, ToVersion: latest}))
	builds, err = mg.Builds(ctx)
	require.NoError(t, err)
	require.Equal(t, schema.Versions(), versionsOf(builds))
	require.Equal(t, "example.com/new", builds[len(builds)-1].Program)
	require.Equal(t, buildinfo.Read().Program, builds[len(builds)-2].Program)
}
