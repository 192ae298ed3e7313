package schema_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/schema"
)

// sqlAPIObjects are what migration 12 (sql_api) adds.
var sqlAPIObjects = []string{
	"function hopper_enqueue", "function hopper_enqueue_many",
	"function hopper_enqueue_values", "function hopper_go_duration", "function hopper_go_escapes",
}

// TestSQLAPIMigration: migration 12 adds the SQL API's functions, each
// bound to the schema it was migrated into (search_path), SECURITY
// INVOKER; its down drops them and nothing else, and up brings them back.
func TestSQLAPIMigration(t *testing.T) {
	ctx, d := setup(t)
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close()) }()
	require.NoError(t, mg.Up(ctx))
	up := objects(t, ctx, d, d.Schema)
	for _, o := range sqlAPIObjects {
		require.Contains(t, up, o)
	}

	rows, err := d.Pool.Query(ctx, `
		SELECT p.proname, p.prosecdef, coalesce(array_to_string(p.proconfig, ' '), '')
		FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
		WHERE n.nspname = $1 AND p.proname IN ('hopper_enqueue', 'hopper_enqueue_many', 'hopper_enqueue_values')
		ORDER BY 1`, d.Schema)
	require.NoError(t, err)
	type fn struct {
		Name    string
		Definer bool
		Config  string
	}
	fns, err := pgx.CollectRows(rows, pgx.RowToStructByPos[fn])
	require.NoError(t, err)
	require.Len(t, fns, 3)
	for _, f := range fns {
		require.False(t, f.Definer, "%s runs with the caller's grants", f.Name)
		require.Equal(t, "search_path="+d.Schema+", pg_temp", f.Config, f.Name) // the test bed's names need no quotes
	}

	downTo(ctx, t, mg, 11)
	require.Equal(t, objectsAt(t, up, 11), objects(t, ctx, d, d.Schema), "the down drops the functions only (and the later migrations' objects)")
	require.NoError(t, mg.Up(ctx))
	require.Equal(t, up, objects(t, ctx, d, d.Schema))
}
