package schema_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/schema"
)

// TestUpConcurrently: replicas that all start at once each call schema.Up
// on the same schema, fresh or at an older version. None may report the
// healthy schema dirty while another is migrating it (they read the
// version under the migrations' lock), and the schema ends at the latest
// version, clean. Each racer has its own pool, so its own sessions, as a
// separate process would.
func TestUpConcurrently(t *testing.T) {
	testdb.Slow(t, "eight schemas migrated by four racers each")
	const racers, trials = 4, 4
	setup(t)
	for _, from := range []uint{0, 11} {
		for trial := range trials {
			// A deadline per trial, not one for the eight: on a busy
			// machine a racer may wait minutes for the others' run.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			d := testdb.NewEmpty(t)
			if from > 0 {
				mg, err := schema.NewMigrator(ctx, d.Pool)
				require.NoError(t, err)
				require.NoError(t, mg.Up(ctx))
				downTo(ctx, t, mg, from)
				require.NoError(t, mg.Close())
			}
			pools := make([]*pgxpool.Pool, racers)
			for i := range pools {
				pool, err := pgxpool.New(ctx, d.URL)
				require.NoError(t, err)
				t.Cleanup(pool.Close)
				pools[i] = pool
			}
			var wg sync.WaitGroup
			errs := make([]error, racers)
			start := make(chan struct{})
			for i, pool := range pools {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					errs[i] = schema.Up(ctx, pool)
				}()
			}
			close(start)
			wg.Wait()
			for i, err := range errs {
				require.NoError(t, err, "racer %d of trial %d from version %d", i, trial, from)
			}
			mg, err := schema.NewMigrator(context.Background(), d.Pool)
			require.NoError(t, err)
			v, dirty, err := mg.Version()
			require.NoError(t, err)
			require.False(t, dirty)
			require.Equal(t, schema.Latest(), v)
			require.NoError(t, mg.Close())
		}
	}
}
