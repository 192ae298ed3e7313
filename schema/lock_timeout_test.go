package schema_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testdb"
	"github.com/hopperq/hopper/schema"
)

// newestLocks is a table the newest migration locks against writers
// (migration 25 builds an index on hopper_jobs): a writer's open transaction
// on it makes that migration wait.
const newestLocks = "hopper_jobs"

// TestMigrationWaitsBoundedForLocks: the newest migration locks
// newestLocks, which waits for any open transaction that wrote to it.
// Under LockTimeout it waits no longer than the timeout, rolls back whole
// and runs again: with the writer's transaction held past every attempt,
// the run fails with ErrLockTimeout and leaves the schema at the version
// before, clean; with the transaction ending meanwhile, the migration is
// applied on a later attempt.
func TestMigrationWaitsBoundedForLocks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before := schema.Versions()[len(schema.Versions())-2]
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

// TestLockTimeoutZeroWaits: a timeout of 0 leaves the server's setting
// (none), and a migration waits for the writer as before.
func TestLockTimeoutZeroWaits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := schema.Versions()[len(schema.Versions())-2]
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
