package schema_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/schema"
)

// TestKeysOrderBytewiseUnderAnyCollation: in a database whose collation is
// linguistic (ICU's root locale, where 'a' < 'B'), the fair claim's round of
// keys (hopper_ready_keys) still goes in byte order, the order in which the
// worker compares keys to know where the last round ended.
func TestKeysOrderBytewiseUnderAnyCollation(t *testing.T) {
	testdb.Slow(t, "a database of its own created and migrated")
	ctx, d := setup(t)
	name := d.Schema + "_icu"
	_, err := d.Pool.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %s TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'und' LOCALE 'C.UTF-8'`,
		pgx.Identifier{name}.Sanitize()))
	require.NoError(t, err)
	t.Cleanup(func() {
		// A context of its own: the test's may have run out, and the
		// database must go all the same.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := d.Pool.Exec(ctx, fmt.Sprintf("DROP DATABASE %s WITH (FORCE)", pgx.Identifier{name}.Sanitize()))
		require.NoError(t, err)
	})
	cfg, err := pgxpool.ParseConfig(d.URL)
	require.NoError(t, err)
	cfg.ConnConfig.Database = name
	delete(cfg.ConnConfig.RuntimeParams, "search_path") // the new database's public schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	var linguistic bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT 'a' < 'B'").Scan(&linguistic))
	require.True(t, linguistic, "the database's own collation puts a before B")

	require.NoError(t, schema.Up(ctx, pool))
	_, err = pool.Exec(ctx, `INSERT INTO hopper_jobs (queue, kind, payload, concurrency_key) VALUES ('q', 'k', '{}', 'a'), ('q', 'k', '{}', 'B'), ('q', 'k', '{}', 'c')`)
	require.NoError(t, err)
	rows, err := pool.Query(ctx, "SELECT k FROM hopper_ready_keys('q', '', 10, 0) AS k")
	require.NoError(t, err)
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"B", "a", "c"}, keys, "byte order, as the worker's lastKey compares")
	rows, err = pool.Query(ctx, "SELECT k FROM hopper_ready_keys('q', 'B', 10, 0) AS k")
	require.NoError(t, err)
	keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"a", "c"}, keys, "the next round starts after B")
}
