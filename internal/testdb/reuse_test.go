package testdb

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
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
}

// spares copies the list of schemas ready for reuse.
func spares() []string {
	spare.Lock()
	defer spare.Unlock()
	return slices.Clone(spare.names)
}
