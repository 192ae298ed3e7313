package schema_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/schema"
)

// retryLog collects a migrator's log lines and counts its runs again
// after a refused lock wait.
type retryLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *retryLog) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *retryLog) retries() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, "waited lock_timeout") {
			n++
		}
	}
	return n
}

// TestMigratorsRacingAWriter: two replicas migrate the same schema while
// a writer holds the table migration newestLocking locks. Each attempt of
// the one migrating rolls back on lock_timeout; golang-migrate gives its
// lock back with that attempt's dirty mark still set, and the other
// migrator, waiting only for that lock, read the healthy schema as dirty
// (ErrDirty, every run). Both wait for Hopper's run lock first now, which
// is given back only once the mark is cleared: both succeed, over several
// rounds of retries, and the schema ends at the latest version, clean.
func TestMigratorsRacingAWriter(t *testing.T) {
	testdb.Slow(t, "two migrators retrying behind a writer")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := beforeNewestLocking()
	for round := range 3 {
		d := testdb.NewAtVersion(t, before)
		tx, err := d.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "LOCK TABLE "+newestLocks+" IN ROW EXCLUSIVE MODE")
		require.NoError(t, err)

		const racers = 2
		logs := make([]*retryLog, racers)
		done := make(chan error, racers)
		for i := range racers {
			pool, err := pgxpool.New(ctx, d.URL)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			logs[i] = &retryLog{}
			go func() {
				done <- schema.Up(ctx, pool, schema.LockTimeout(100*time.Millisecond, 1000), schema.Logf(logs[i].logf))
			}()
		}
		// The writer holds on until each migrator has run again at least
		// twice: the rolled-back attempts' marks were there to be seen.
		for logs[0].retries() < 2 || logs[1].retries() < 2 {
			select {
			case err := <-done:
				require.NoError(t, err, "round %d: a migrator ended while the writer held the table", round)
				t.Fatalf("round %d: a migrator ended while the writer held the table", round)
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				t.Fatalf("round %d: retries seen %d and %d", round, logs[0].retries(), logs[1].retries())
			}
		}
		require.NoError(t, tx.Rollback(ctx))
		for range racers {
			require.NoError(t, <-done, "round %d", round)
		}
		mg, err := schema.NewMigrator(ctx, d.Pool)
		require.NoError(t, err)
		v, dirty, err := mg.Version()
		require.NoError(t, err)
		require.False(t, dirty)
		require.Equal(t, schema.Latest(), v)
		require.NoError(t, mg.Close())
	}
}

// TestDownToNothingAfterALockTimeout: undoing the first migration marks
// golang-migrate's "no version" (-1) dirty while it runs. When that step
// waited lock_timeout on every attempt, the mark stayed: Version said
// (0, clean), every retry failed at once and Up then failed with
// golang-migrate's raw "Dirty database version -1". The rolled-back step
// leaves the schema at the first version, clean, and Up goes on from it.
func TestDownToNothingAfterALockTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := schema.Versions()[0]
	d := testdb.NewAtVersion(t, first)

	tx, err := d.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, "LOCK TABLE hopper_jobs IN ROW EXCLUSIVE MODE")
	require.NoError(t, err)

	log := &retryLog{}
	mg, err := schema.NewMigrator(ctx, d.Pool, schema.LockTimeout(100*time.Millisecond, 3), schema.Logf(log.logf))
	require.NoError(t, err)
	defer mg.Close()
	err = mg.Down(ctx, 0)
	require.ErrorIs(t, err, schema.ErrLockTimeout)
	require.ErrorContains(t, err, "3 attempts")
	require.Equal(t, 2, log.retries(), "each attempt waited for the writer")
	v, dirty, err := mg.Version()
	require.NoError(t, err)
	require.False(t, dirty, "the rolled-back step left no dirty mark")
	require.Equal(t, first, v, "nothing undone")

	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, mg.Up(ctx))
	v, dirty, err = mg.Version()
	require.NoError(t, err)
	require.False(t, dirty)
	require.Equal(t, schema.Latest(), v)
}

// TestDirtyNoVersionIsReported: a "no version" mark left dirty (a down
// from the first migration that failed for a reason other than a lock
// wait, or an older Hopper's) is reported dirty by Version, and Up
// refuses it with ErrDirty, never with golang-migrate's raw message.
func TestDirtyNoVersionIsReported(t *testing.T) {
	ctx, d := setup(t)
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer mg.Close()
	_, err = d.Pool.Exec(ctx, "INSERT INTO "+schema.MigrationsTable+" (version, dirty) VALUES (-1, true)")
	require.NoError(t, err)
	v, dirty, err := mg.Version()
	require.NoError(t, err)
	require.True(t, dirty)
	require.Zero(t, v)
	err = mg.Up(ctx)
	require.ErrorIs(t, err, schema.ErrDirty)
	require.ErrorContains(t, err, "down from the first version")
}
