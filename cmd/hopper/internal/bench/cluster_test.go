package bench

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hopperq/hopper/internal/testbed/pgcluster"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

const autovacuumWarning = "autovacuum is off: dead tuples pile up and the figures fall over time; not what a production server shows"

func TestScratchCluster(t *testing.T) {
	if err := pgcluster.Available(); err != nil && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	// initdb and a first start are slow on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log strings.Builder
	c, err := pgcluster.Start(ctx, &log)
	require.NoError(t, err)
	defer c.Stop() // if an assertion below fails

	conn, err := pgx.Connect(ctx, c.URL())
	require.NoError(t, err)
	var autovacuum string
	err = conn.QueryRow(ctx, "SHOW autovacuum").Scan(&autovacuum)
	conn.Close(ctx)
	require.NoError(t, err)
	require.Equal(t, "on", autovacuum, "initdb's default")

	s, err := readServer(ctx, c.URL())
	require.NoError(t, err)
	require.NotContains(t, s.Warnings, autovacuumWarning)
	require.Equal(t, "on", s.Settings["fsync"])
	require.Equal(t, c.Statements, s.PgStatStatements)
	require.Contains(t, log.String(), "scratch cluster: PostgreSQL "+s.Version)

	c.Stop()
	c.Stop() // twice is harmless
	_, err = os.Stat(c.Dir())
	require.True(t, os.IsNotExist(err), "the directory is removed: %v", err)
	require.Empty(t, processesOf(t, filepath.Join(c.Dir(), "data")), "no server of the data directory remains")
	require.Contains(t, log.String(), "scratch cluster: stopped")
}

// The shared server of the tests runs with CI settings: the report must say
// so when its autovacuum is off, and only then.
func TestReadServerWarnsAutovacuumOff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := sharedServer(ctx, t)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	var autovacuum string
	err = conn.QueryRow(ctx, "SHOW autovacuum").Scan(&autovacuum)
	conn.Close(ctx)
	require.NoError(t, err)

	s, err := readServer(ctx, url)
	require.NoError(t, err)
	require.NotEmpty(t, s.Version)
	require.Equal(t, autovacuum, s.Settings["autovacuum"])
	require.NotEmpty(t, s.Settings["shared_buffers"])
	require.Equal(t, autovacuum == "off", slices.Contains(s.Warnings, autovacuumWarning), "warnings %q", s.Warnings)
}

// sharedServer is the tests' shared server, found as the test bed finds
// it first (HOPPER_TEST_DATABASE_URL, DATABASE_URL, then the local
// default); without one the test skips, or fails under CI.
func sharedServer(ctx context.Context, t *testing.T) string {
	t.Helper()
	url := cmp.Or(os.Getenv("HOPPER_TEST_DATABASE_URL"), os.Getenv("DATABASE_URL"), "postgres://root@127.0.0.1:5432/test?sslmode=disable")
	conn, err := pgx.Connect(ctx, url)
	if err != nil && os.Getenv("CI") == "" {
		t.Skipf("no shared server: %v", err)
	}
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	return url
}

// processesOf lists the live processes whose command line names dir (the
// postmaster's -D; a zombie's command line is empty).
func processesOf(t *testing.T, dir string) []string {
	t.Helper()
	cmdlines, err := filepath.Glob("/proc/[0-9]*/cmdline")
	require.NoError(t, err)
	var found []string
	for _, name := range cmdlines {
		raw, err := os.ReadFile(name)
		if err == nil && strings.Contains(string(raw), dir) {
			found = append(found, strings.ReplaceAll(string(raw), "\x00", " "))
		}
	}
	return found
}
