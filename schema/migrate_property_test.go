package schema_test

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/schema"
)

// TestMigrationRetriesProperty: replicas migrate one schema at once while
// writers hold the table the newest locking migration locks, in random
// plans: two or three migrators, each with its own lock timeout, some
// starting late, from a random older version; a writer that holds on for
// a random number of the migrators' retries, sometimes a second one after
// it. Whatever the plan, the promises of the migrations' retries hold:
// every migrator returns nil (none reports the healthy schema dirty, none
// gives up while attempts remain), the schema ends at the latest version,
// clean, with the migrations table's one row, and its catalog is a fresh
// schema's (no migration applied twice or half). The seed is printed;
// HOPPER_MIGRATE_SEED repeats a run's plan (not its timing).
func TestMigrationRetriesProperty(t *testing.T) {
	testdb.Slow(t, "schemas migrated by racing replicas behind writers")
	_, fresh := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("HOPPER_MIGRATE_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d: repeat with HOPPER_MIGRATE_SEED=%d", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	require.NoError(t, schema.Up(ctx, fresh.Pool))
	want := objects(t, ctx, fresh, fresh.Schema)

	froms := []uint{beforeNewestLocking(), beforeNewestLocking() - 1, 21}
	for round := range testdb.Rounds(4) {
		from := froms[rng.IntN(len(froms))]
		racers := 2 + rng.IntN(2)
		holdFor := 1 + rng.IntN(3) // retries each running migrator logs while a writer holds on
		second := rng.IntN(2) == 0
		late := rng.IntN(racers + 1) // this racer starts after the first hold (none when == racers)
		t.Logf("round %d: from %d, %d migrators (late: %d), writer holds for %d retries, a second writer: %v",
			round, from, racers, late, holdFor, second)

		d := testdb.NewAtVersion(t, from)
		logs := make([]*retryLog, racers)
		done := make(chan error, racers)
		started := make([]bool, racers)
		startRacer := func(i int) {
			pool, err := pgxpool.New(ctx, d.URL)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			timeout := time.Duration(50+rng.IntN(150)) * time.Millisecond
			started[i] = true
			go func() {
				done <- schema.Up(ctx, pool, schema.LockTimeout(timeout, 10_000), schema.Logf(logs[i].logf))
			}()
		}
		hold := func() {
			tx, err := d.Pool.Begin(ctx)
			require.NoError(t, err)
			// Rolled back on every way out, a failure's too: the pool's
			// Close, a cleanup, waits for this connection, and would hang
			// the test binary until its timeout instead of reporting.
			defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
			_, err = tx.Exec(ctx, "LOCK TABLE "+newestLocks+" IN ROW EXCLUSIVE MODE")
			require.NoError(t, err)
			base := make([]int, racers)
			for i := range logs {
				base[i] = logs[i].retries()
			}
			for {
				enough := true
				for i := range logs {
					if started[i] && logs[i].retries()-base[i] < holdFor {
						enough = false
					}
				}
				if enough {
					break
				}
				select {
				case err := <-done:
					require.NoError(t, err, "seed %d round %d: a migrator ended while the writer held the table", seed, round)
					t.Fatalf("seed %d round %d: a migrator ended while the writer held the table", seed, round)
				case <-ctx.Done():
					t.Fatalf("seed %d round %d: the migrators did not retry", seed, round)
				case <-time.After(10 * time.Millisecond):
				}
			}
			require.NoError(t, tx.Rollback(ctx))
		}
		for i := range racers {
			logs[i] = &retryLog{}
			if i != late {
				startRacer(i)
			}
		}
		hold()
		if late < racers {
			startRacer(late)
		}
		if second {
			hold()
		}
		for range racers {
			require.NoError(t, <-done, "seed %d round %d", seed, round)
		}
		mg, err := schema.NewMigrator(ctx, d.Pool)
		require.NoError(t, err)
		v, dirty, err := mg.Version()
		require.NoError(t, err)
		require.False(t, dirty, "seed %d round %d", seed, round)
		require.Equal(t, schema.Latest(), v, "seed %d round %d", seed, round)
		require.NoError(t, mg.Close())
		var rows int
		require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM "+schema.MigrationsTable).Scan(&rows))
		require.Equal(t, 1, rows)
		require.Equal(t, want, objects(t, ctx, d, d.Schema), "seed %d round %d: the catalog of a fresh schema", seed, round)
	}
}
