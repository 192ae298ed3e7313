package schema_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	migratedb "github.com/golang-migrate/migrate/v4/database"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/schema"
)

// newestLocks is a table the newest locking migration (newestLocking)
// locks against writers: migration 28 replaces hopper_jobs' metadata
// check under its ACCESS EXCLUSIVE lock (29 only validates it, under a
// lock writers pass). A writer's open transaction on it makes that
// migration wait.
const (
	newestLocks   = "hopper_jobs"
	newestLocking = 28
)

// beforeNewestLocking is the version just before newestLocking: a schema
// there migrates up through it.
func beforeNewestLocking() uint {
	vs := schema.Versions()
	return vs[slices.Index(vs, newestLocking)-1]
}

// TestMigrationWaitsBoundedForLocks: migration newestLocking locks
// newestLocks, which waits for any open transaction that wrote to it.
// Under LockTimeout it waits no longer than the timeout, rolls back whole
// and runs again: with the writer's transaction held past every attempt,
// the run fails with ErrLockTimeout and leaves the schema at the version
// before, clean; with the transaction ending meanwhile, the migration is
// applied on a later attempt.
func TestMigrationWaitsBoundedForLocks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before := beforeNewestLocking()
	d := testdb.NewAtVersion(t, before)

	// A writer's transaction left open: its ROW EXCLUSIVE lock conflicts
	// with the migration's.
	tx, err := d.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, "LOCK TABLE "+newestLocks+" IN ROW EXCLUSIVE MODE")
	require.NoError(t, err)

	var mu sync.Mutex
	var lines []string
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, fmt.Sprintf(format, args...))
	}
	retries := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, l := range lines {
			if strings.Contains(l, "waited lock_timeout") {
				n++
			}
		}
		return n
	}

	mg, err := schema.NewMigrator(ctx, d.Pool, schema.LockTimeout(100*time.Millisecond, 3), schema.Logf(logf))
	require.NoError(t, err)
	err = mg.Up(ctx)
	require.ErrorIs(t, err, schema.ErrLockTimeout)
	require.ErrorContains(t, err, "3 attempts")
	require.Less(t, len(err.Error()), 400, "the error names the timeout, not the migration's text")
	require.Equal(t, 2, retries(), "two runs again after the first")
	v, dirty, err := mg.Version()
	require.NoError(t, err)
	require.Equal(t, before, v, "nothing applied")
	require.False(t, dirty, "the attempt that timed out left no dirty mark")
	require.NoError(t, mg.Close())

	// Again, the writer ending after the first timeout.
	mg, err = schema.NewMigrator(ctx, d.Pool, schema.LockTimeout(100*time.Millisecond, 50), schema.Logf(logf))
	require.NoError(t, err)
	defer mg.Close()
	seen := retries()
	done := make(chan error, 1)
	go func() { done <- mg.Up(ctx) }()
	require.Eventually(t, func() bool { return retries() > seen }, time.Minute, 10*time.Millisecond)
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, <-done)
	v, dirty, err = mg.Version()
	require.NoError(t, err)
	require.Equal(t, schema.Latest(), v)
	require.False(t, dirty)
}

// TestMigrationRunsAgainAfterADeadlock: a transaction that holds a lock
// migration newestLocking waits for, and then waits for a lock the migration
// holds (here the migrations' advisory lock), deadlocks with it. The
// migration is the one PostgreSQL ends (the transaction's deadlock_timeout
// is set far beyond the migration's), rolls back whole, and runs again
// like a migration that waited lock_timeout: once the transaction ends,
// it is applied, with no dirty mark left.
func TestMigrationRunsAgainAfterADeadlock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before := beforeNewestLocking()
	d := testdb.NewAtVersion(t, before)

	tx, err := d.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, "SET LOCAL deadlock_timeout = '10min'")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "LOCK TABLE "+newestLocks+" IN ROW EXCLUSIVE MODE")
	require.NoError(t, err)
	var database string
	require.NoError(t, tx.QueryRow(ctx, "SELECT current_database()").Scan(&database))
	lockID, err := migratedb.GenerateAdvisoryLockId(database, d.Schema, schema.MigrationsTable)
	require.NoError(t, err)

	var mu sync.Mutex
	var lines []string
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, fmt.Sprintf(format, args...))
	}
	// A lock timeout far beyond the migration's deadlock_timeout (the
	// server's, 1s): the wait ends by the deadlock, not by the timeout.
	mg, err := schema.NewMigrator(ctx, d.Pool, schema.LockTimeout(time.Minute, 3), schema.Logf(logf))
	require.NoError(t, err)
	defer mg.Close()
	done := make(chan error, 1)
	go func() { done <- mg.Up(ctx) }()

	// The migration waits for the table the transaction holds...
	require.Eventually(t, func() bool {
		var waiting bool
		err := d.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE NOT granted AND relation = $1::regclass)`,
			d.Schema+"."+newestLocks).Scan(&waiting)
		return err == nil && waiting
	}, time.Minute, 10*time.Millisecond)
	// ...and the transaction then waits for the migrations' lock, which
	// the migration holds: PostgreSQL ends the migration's transaction,
	// golang-migrate gives its lock back, and this gets it.
	_, err = tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockID)
	require.NoError(t, err, "the transaction was not the one ended")
	require.NoError(t, tx.Rollback(ctx))

	require.NoError(t, <-done)
	v, dirty, err := mg.Version()
	require.NoError(t, err)
	require.Equal(t, schema.Latest(), v)
	require.False(t, dirty)
	mu.Lock()
	defer mu.Unlock()
	require.True(t, slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "deadlocked") }),
		"the deadlock was logged and the migration run again: %q", lines)
}

// TestLockTimeoutZeroWaits: a timeout of 0 leaves the server's setting
// (none), and a migration waits for the writer as before.
func TestLockTimeoutZeroWaits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := beforeNewestLocking()
	d := testdb.NewAtVersion(t, before)
	tx, err := d.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "LOCK TABLE "+newestLocks+" IN ROW EXCLUSIVE MODE")
	require.NoError(t, err)
	mg, err := schema.NewMigrator(ctx, d.Pool, schema.LockTimeout(0, 1))
	require.NoError(t, err)
	defer mg.Close()
	done := make(chan error, 1)
	go func() { done <- mg.Up(ctx) }()
	// The migration is waiting on the lock: pg_locks shows its request.
	require.Eventually(t, func() bool {
		var waiting bool
		err := d.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE NOT granted AND relation = $1::regclass)`, newestLocks).Scan(&waiting)
		return err == nil && waiting
	}, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, <-done)
	v, _, err := mg.Version()
	require.NoError(t, err)
	require.Equal(t, schema.Latest(), v)
}

func TestLockTimeoutRefusesNegative(t *testing.T) {
	ctx, d := setup(t)
	_, err := schema.NewMigrator(ctx, d.Pool, schema.LockTimeout(-time.Second, 1))
	require.ErrorContains(t, err, "negative lock timeout")
}

// holdMigrationsLock takes, in a session of its own, the advisory lock
// golang-migrate takes for d's schema, as another migrator does while it
// migrates; release gives it back.
func holdMigrationsLock(ctx context.Context, t *testing.T, d *testdb.DB) (release func()) {
	t.Helper()
	conn, err := d.Pool.Acquire(ctx)
	require.NoError(t, err)
	var database string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_database()").Scan(&database))
	id, err := migratedb.GenerateAdvisoryLockId(database, d.Schema, schema.MigrationsTable)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT pg_advisory_lock($1)", id)
	require.NoError(t, err)
	released := false
	release = func() {
		if !released {
			released = true
			_, err := conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", id)
			require.NoError(t, err)
			conn.Release()
		}
	}
	t.Cleanup(release)
	return release
}

// taggedPool is a pool on d's schema whose sessions carry app as their
// application_name, so that the sessions a migrator opens from it can be
// counted whatever else the server runs.
func taggedPool(ctx context.Context, t *testing.T, d *testdb.DB, app string) *pgxpool.Pool {
	t.Helper()
	cfg := d.Pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// noSessionsOf reports whether the server has no session named app.
func noSessionsOf(ctx context.Context, d *testdb.DB, app string) bool {
	var n int
	err := d.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n)
	return err == nil && n == 0
}

// TestNewMigratorWaitsForTheMigrationsLock: opening a migrator takes the
// migrations' lock (golang-migrate creates its version table under it), so
// a replica starting while another migrates waited lock_timeout and
// failed (TestUpConcurrently, in CI). The open is tried again, as a
// migration is; when the attempts run out, ErrLockTimeout; and the
// sessions of the failed opens are closed.
func TestNewMigratorWaitsForTheMigrationsLock(t *testing.T) {
	ctx, d := setup(t)
	app := "hopper-open-" + d.Schema
	pool := taggedPool(ctx, t, d, app)
	release := holdMigrationsLock(ctx, t, d)

	_, err := schema.NewMigrator(ctx, pool, schema.LockTimeout(50*time.Millisecond, 2))
	require.ErrorIs(t, err, schema.ErrLockTimeout)
	require.ErrorContains(t, err, "2 attempts")
	// A closed session leaves pg_stat_activity a moment after its client
	// closed it; a leaked one never does.
	require.Eventually(t, func() bool { return noSessionsOf(ctx, d, app) }, 20*time.Second, 20*time.Millisecond,
		"a failed open's session was left open")

	retried := make(chan struct{}, 1)
	type opened struct {
		mg  *schema.Migrator
		err error
	}
	done := make(chan opened, 1)
	go func() {
		mg, err := schema.NewMigrator(ctx, pool, schema.LockTimeout(50*time.Millisecond, 100), schema.Logf(func(format string, args ...any) {
			if strings.Contains(fmt.Sprintf(format, args...), "opening waited lock_timeout") {
				select {
				case retried <- struct{}{}:
				default:
				}
			}
		}))
		done <- opened{mg, err}
	}()
	select {
	case <-retried:
	case <-ctx.Done():
		t.Fatal("the open never waited for the lock")
	}
	release()
	o := <-done
	require.NoError(t, o.err)
	require.NoError(t, o.mg.Up(ctx))
	require.NoError(t, o.mg.Close())
	require.Eventually(t, func() bool { return noSessionsOf(ctx, d, app) }, 20*time.Second, 20*time.Millisecond,
		"a migrator's session outlived it")
}
