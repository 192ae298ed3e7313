package schema_test

import (
	"testing"
	"time"

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

	downTo(ctx, t, mg, 9)
	var without []string
	for _, o := range objectsAt(t, up, 9) {
		if o != "relation hopper_workers" && o != "relation hopper_workers_pkey" {
			without = append(without, o)
		}
	}
	require.Equal(t, without, objects(t, ctx, d, d.Schema), "the down drops the table and its key only (and the later migrations' objects)")

	require.NoError(t, mg.Up(ctx))
	require.Equal(t, up, objects(t, ctx, d, d.Schema))
}

// TestWorkerReleaseMigration: migration 11 adds hopper_workers.released_at
// to a live registry, keeping its rows (NULL: never released), and its
// down drops the column only.
func TestWorkerReleaseMigration(t *testing.T) {
	ctx, d := setup(t)
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close()) }()
	require.NoError(t, mg.Up(ctx))
	require.NoError(t, mg.Down(ctx, int(schema.Latest())-10), "down to version 10")
	_, err = d.Pool.Exec(ctx, `INSERT INTO hopper_workers (id, host, pid, queues, stale_after_ms) VALUES ('w', 'h', 1, '{default}', 3000)`)
	require.NoError(t, err)

	require.NoError(t, mg.Up(ctx))
	var released *time.Time
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT released_at FROM hopper_workers WHERE id = 'w'").Scan(&released))
	require.Nil(t, released, "a worker from before the migration was never released")

	require.NoError(t, mg.Down(ctx, int(schema.Latest())-10))
	var n int
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM hopper_workers").Scan(&n))
	require.Equal(t, 1, n, "the row is kept")
	_, err = d.Pool.Exec(ctx, "SELECT released_at FROM hopper_workers")
	require.ErrorContains(t, err, "released_at", "the column is gone")
}
