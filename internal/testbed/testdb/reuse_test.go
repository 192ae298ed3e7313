package testdb

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/schema"
)

// TestReuse: a schema a test gave back comes to the next test renamed,
// empty and with its ids starting at 1 again, while what the last test
// still held (its search_path) reaches nothing; a schema a test changed is
// dropped, never reused. Not parallel: it reads the binary's list of
// spare schemas.
func TestReuse(t *testing.T) {
	if reuseOff() {
		t.Skip("HOPPER_TEST_FRESH_SCHEMAS is set: no reuse")
	}
	var used, changed *DB
	t.Run("a test that leaves rows behind", func(t *testing.T) {
		used = New(t)
		_, err := used.Pool.Exec(t.Context(), `INSERT INTO hopper_jobs (queue, kind, payload) VALUES ('q', 'k', '{}'), ('q', 'k', '{}')`)
		require.NoError(t, err)
		_, err = used.Pool.Exec(t.Context(), `INSERT INTO hopper_queues (name, paused_at) VALUES ('q', now())`)
		require.NoError(t, err)
	})
	require.NotEmpty(t, spares(), "the schema was given back")
	next := New(t)
	require.NotEqual(t, used.Schema, next.Schema, "renamed")
	var jobs, queues int
	require.NoError(t, next.Pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM hopper_jobs), (SELECT count(*) FROM hopper_queues)`).Scan(&jobs, &queues))
	require.Zero(t, jobs)
	require.Zero(t, queues)
	var id int64
	require.NoError(t, next.Pool.QueryRow(t.Context(), `SELECT id FROM hopper_enqueue('k', '{}')`).Scan(&id))
	require.EqualValues(t, 1, id, "ids start at 1, as in a fresh schema")
	var builds int
	require.NoError(t, next.Pool.QueryRow(t.Context(), `SELECT count(*) FROM hopper_migration_builds`).Scan(&builds))
	require.Equal(t, len(schema.Versions()), builds, "the record of which build applied each migration stays, as the version does")

	stray := open(t, Server(t), used.Schema) // what the first test might have left connected
	var gone bool
	require.NoError(t, stray.Pool.QueryRow(t.Context(), `SELECT to_regclass('hopper_jobs') IS NULL`).Scan(&gone))
	require.True(t, gone, "the old name leads nowhere")

	t.Run("a test that changes its schema", func(t *testing.T) {
		changed = New(t)
		_, err := changed.Pool.Exec(t.Context(), `ALTER TABLE hopper_jobs SET (fillfactor = 50)`)
		require.NoError(t, err)
	})
	var exists bool
	require.NoError(t, next.Pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)`, changed.Schema).Scan(&exists))
	require.False(t, exists, "a changed schema is dropped")
	require.False(t, slices.Contains(spares(), changed.Schema))

	spare.Lock()
	dropped := spare.dropped
	spare.Unlock()
	t.Run("a test that rewrites the builds' record", func(t *testing.T) {
		rewrote := New(t)
		_, err := rewrote.Pool.Exec(t.Context(), `UPDATE hopper_migration_builds SET program = 'example.com/other' WHERE version = 1`)
		require.NoError(t, err)
	})
	spare.Lock()
	defer spare.Unlock()
	require.Equal(t, dropped+1, spare.dropped, "a schema whose record a test rewrote is dropped, not reused")
}

// spares copies the list of schemas ready for reuse.
func spares() []string {
	spare.Lock()
	defer spare.Unlock()
	return slices.Clone(spare.names)
}
