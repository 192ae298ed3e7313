package hopper_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
)

// TestClientNotMigrated: on a schema migrated only part of the way, every
// Client method says jobs.ErrNotMigrated with the version the schema is
// at, the version this build needs and what to run, whether or not its
// statements would find what they name; on an empty schema, what is
// missing. Never a bare "does not exist".
func TestClientNotMigrated(t *testing.T) {
	t.Parallel()
	needs := fmt.Sprintf("this build of Hopper needs schema version %d; run `hopper migrate up` (or schema.Up)", schema.Latest())
	for v := uint(0); v < schema.Latest(); v++ {
		t.Run(fmt.Sprintf("version %d", v), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			client := hopper.NewClient(testdb.NewAtVersion(t, v).Pool)
			calls := map[string]func() error{
				"ListKeys":        func() error { _, err := client.ListKeys(ctx, "", 10); return err },
				"GetStats":        func() error { _, err := client.GetStats(ctx); return err },
				"ListQueues":      func() error { _, err := client.ListQueues(ctx); return err },
				"ListJobs":        func() error { _, err := client.ListJobs(ctx, hopper.ListParams{}); return err },
				"GetJob":          func() error { _, err := client.GetJob(ctx, 1); return err },
				"ListSchedules":   func() error { _, err := client.ListSchedules(ctx); return err },
				"ListRateBudgets": func() error { _, err := client.ListRateBudgets(ctx); return err },
				"CancelJobs":      func() error { _, err := client.CancelJobs(ctx, 1); return err },
				"PurgeDeadJobs":   func() error { _, err := client.PurgeDeadJobs(ctx, hopper.DeadFilter{IDs: []int64{1}}); return err },
				"UpdateJob":       func() error { _, err := client.UpdateJob(ctx, 1, hopper.JobUpdate{RunNow: true}); return err },
				"DeleteJob":       func() error { _, err := client.DeleteJob(ctx, 1); return err },
				"EmitEvent":       func() error { _, err := client.EmitEvent(ctx, "e", nil); return err },
			}
			for name, call := range calls {
				err := call()
				require.ErrorIs(t, err, jobs.ErrNotMigrated, name)
				require.ErrorContains(t, err, needs, name)
				if v == 0 {
					require.ErrorContains(t, err, "does not exist: "+needs, name)
				} else {
					require.ErrorContains(t, err, fmt.Sprintf("is at version %d without migration", v), name)
				}
			}
		})
	}
}

// TestClientNotMigratedInSchema: a Client on jobs.InSchema names the
// schema in the command to run, for its own pool and for a caller's
// transaction alike.
func TestClientNotMigratedInSchema(t *testing.T) {
	b := setup(t)
	empty := testdb.NewEmpty(t)
	scoped, err := jobs.InSchema(b.Pool, empty.Schema)
	require.NoError(t, err)
	client := hopper.NewClient(scoped)
	_, err = client.GetStats(b.Ctx)
	require.ErrorIs(t, err, jobs.ErrNotMigrated)
	require.ErrorContains(t, err, "run `hopper migrate up --schema "+empty.Schema+"` (or schema.Up with schema.Name)")

	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.Ctx) //nolint:errcheck
	_, err = client.ListKeysTx(b.Ctx, tx, "", 10)
	require.ErrorIs(t, err, jobs.ErrNotMigrated)
	require.ErrorContains(t, err, "--schema "+empty.Schema)
}
