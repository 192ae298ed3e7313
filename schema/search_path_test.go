package schema_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/schema"
)

// unpinned are the functions of Hopper's schema that run with the
// caller's search_path, and why that is safe.
var unpinned = map[string]string{
	"hopper_dead_partition_at":    "a BEGIN ATOMIC body: its names were bound when it was created",
	"hopper_go_duration":          "pure: reads no table",
	"hopper_go_escapes":           "pure: reads no table",
	"hopper_ready_keys":           "called by the keyed claim, which runs in the schema (a SQL function inlined into it until migration 35)",
	"hopper_sequence_before":      "a SQL function inlined into hopper_sequence_place_keys, which pins the path",
	"hopper_silent":               "pure: reads no table; a SQL function inlined into hopper_wake's test, which a SET would prevent",
	"hopper_sequence_place_queue": "pure: reads no table; a SQL function inlined into the placement trigger's WHEN, which a SET would prevent",
}

// TestFunctionsPinSearchPath: every function of the schema that reads or
// writes Hopper's tables by name runs with the schema first in its
// search_path (migration 25 restored the pins that CREATE OR REPLACE had
// dropped), so that a session reaching the tables by a qualified name runs
// the triggers on the same schema's tables.
func TestFunctionsPinSearchPath(t *testing.T) {
	ctx, d := setup(t)
	require.NoError(t, schema.Up(ctx, d.Pool))
	rows, err := d.Pool.Query(ctx, `SELECT p.proname::text,
			coalesce((SELECT c FROM unnest(p.proconfig) AS c WHERE c LIKE 'search_path=%'), '')
		FROM pg_proc AS p
		WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'hopper\_%'
		ORDER BY 1`)
	require.NoError(t, err)
	type fn struct{ Name, Path string }
	fns, err := pgx.CollectRows(rows, pgx.RowToStructByPos[fn])
	require.NoError(t, err)
	require.NotEmpty(t, fns)
	want := "search_path=" + d.Schema + ", pg_temp"
	for _, f := range fns {
		if why, ok := unpinned[f.Name]; ok {
			require.Empty(t, f.Path, "%s is listed as unpinned (%s)", f.Name, why)
			continue
		}
		require.Equal(t, want, f.Path, "function %s", f.Name)
	}
}
