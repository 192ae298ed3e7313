package schema_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/schema"
)

// TestWorkersMigrationDown: migration 10's down drops hopper_workers (a
// row in it included) and nothing else, and up brings it back.
func TestWorkersMigrationDown(t *testing.T) {
	ctx, d := setup(t)
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close()) }()
	require.NoError(t, mg.Up(ctx))
	up := objects(t, ctx, d, d.Schema)
	require.Contains(t, up, "relation hopper_workers")
	_, err = d.Pool.Exec(ctx, `INSERT INTO hopper_workers (id, host, pid, queues, stale_after_ms) VALUES ('w', 'h', 1, '{default}', 30000)`)
	require.NoError(t, err)

	require.NoError(t, mg.Down(ctx, int(schema.Latest())-9), "down to version 9")
	v, dirty, err := mg.Version()
	require.NoError(t, err)
	require.False(t, dirty)
	require.EqualValues(t, 9, v)
	var without []string
	for _, o := range up {
		if o != "relation hopper_workers" && o != "relation hopper_workers_pkey" {
			without = append(without, o)
		}
	}
	require.Equal(t, without, objects(t, ctx, d, d.Schema), "the down drops the table and its key only")

	require.NoError(t, mg.Up(ctx))
	require.Equal(t, up, objects(t, ctx, d, d.Schema))
}
