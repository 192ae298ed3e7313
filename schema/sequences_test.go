package schema_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/schema"
)

// sequenceObjects are what migration 13 (sequences) adds.
var sequenceObjects = []string{
	"function hopper_enqueue_many_checked", "function hopper_enqueue_values_checked", "function hopper_sequence_advance", "function hopper_sequence_before", "function hopper_sequence_collect", "function hopper_sequence_lock_id",
	"function hopper_sequence_place", "function hopper_sequence_promote", "function hopper_sequence_promote_keys", "function hopper_sequence_skip",
	"relation hopper_jobs_sequence_head_idx", "relation hopper_jobs_sequence_waiting_idx",
	"relation hopper_sequence_blocks", "relation hopper_sequence_blocks_pkey",
	"trigger hopper_jobs_sequence_advance", "trigger hopper_jobs_sequence_collect", "trigger hopper_jobs_sequence_place",
}

// TestSequencesMigration: migration 13 upgrades a live schema (its jobs
// are kept as they are, and join no sequence); jobs enqueued to a
// sequence then wait their turn; the down makes waiting jobs ready again
// and drops the migration's objects only, and up brings them back.
func TestSequencesMigration(t *testing.T) {
	ctx, d := setup(t)
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close()) }()
	require.NoError(t, mg.Up(ctx))
	up := objects(t, ctx, d, d.Schema)
	for _, o := range sequenceObjects {
		require.Contains(t, up, o)
	}
	downTo(ctx, t, mg, 12)
	_, err = d.Pool.Exec(ctx, `INSERT INTO hopper_jobs (queue, kind, payload, meta) VALUES ('default', 'old', '{}', '{"tag": "x"}'), ('default', 'old', '{}', NULL)`)
	require.NoError(t, err)

	require.NoError(t, mg.Up(ctx))
	state := func(id int64) string {
		var s string
		require.NoError(t, d.Pool.QueryRow(ctx, "SELECT state FROM hopper_jobs WHERE id = $1", id).Scan(&s))
		return s
	}
	require.Equal(t, "pending", state(1))
	require.Equal(t, "pending", state(2))
	for range 3 {
		_, err = d.Pool.Exec(ctx, `SELECT hopper_enqueue('new', '{}', meta => '{"hopper.sequence": "k"}')`)
		require.NoError(t, err)
	}
	require.Equal(t, []string{"pending", "waiting", "waiting"}, []string{state(3), state(4), state(5)})

	downTo(ctx, t, mg, 12)
	require.Equal(t, []string{"pending", "pending", "pending"}, []string{state(3), state(4), state(5)}, "the down makes waiting jobs ready")
	require.Equal(t, objectsAt(t, up, 12), objects(t, ctx, d, d.Schema), "the down drops the migration's objects only (and the later ones')")
	_, err = d.Pool.Exec(ctx, `SELECT hopper_enqueue('after', '{}', meta => '{"hopper.sequence": "k"}')`)
	require.NoError(t, err, "the SQL API works at version 12 again")

	require.NoError(t, mg.Up(ctx))
	require.Equal(t, up, objects(t, ctx, d, d.Schema))
	require.Equal(t, []string{"pending", "waiting", "waiting", "waiting"}, []string{state(3), state(4), state(5), state(6)},
		"jobs that carried a key before the migration wait behind the first of it")
}
