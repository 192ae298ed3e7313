package schema_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/schema"
)

// planOf is the plan PostgreSQL keeps for a statement run many times
// with one bigint[] or text parameter, as PL/pgSQL's generic plans are:
// EXPLAIN of a prepared statement under plan_cache_mode
// force_generic_plan, in a transaction rolled back. A sequential scan is
// ruled out: the test's table is empty, a queue's is not.
func planOf(ctx context.Context, t *testing.T, tx pgx.Tx, statement, arg string) string {
	t.Helper()
	_, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_seqscan = off`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `PREPARE probe AS `+statement)
	require.NoError(t, err)
	defer func() { _, _ = tx.Exec(ctx, `DEALLOCATE probe`) }() // the rollback keeps it
	rows, err := tx.Query(ctx, `EXPLAIN EXECUTE probe(`+arg+`)`)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}

// TestSequenceWaitingIndexHoldsSequencesOnly: since migration 25 the
// index of waiting sequence jobs holds no workflow step, so that looking
// steps up by id under a generic plan takes the primary key (before, it
// scanned every waiting step), while the sequence statements still read
// the index; its down brings migration 13's index back.
func TestSequenceWaitingIndexHoldsSequencesOnly(t *testing.T) {
	ctx, d := setup(t)
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close()) }()
	require.NoError(t, mg.Up(ctx))

	plans := func() (byID, byKey string) {
		tx, err := d.Pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck // read only
		// The look-up of hopper_workflow_count and hopper_workflow_decide.
		byID = planOf(ctx, t, tx, `SELECT j.id FROM hopper_jobs AS j WHERE j.id = ANY ($1::bigint[]) AND j.state = 'waiting' FOR NO KEY UPDATE OF j`, `'{1,2}'`)
		// The next job of a key (hopper_sequence_promote).
		byKey = planOf(ctx, t, tx, `SELECT w.id FROM hopper_jobs AS w WHERE (w.meta ->> 'hopper.sequence') = $1::text AND w.state = 'waiting' ORDER BY w.id LIMIT 1`, `'k'`)
		return byID, byKey
	}
	byID, byKey := plans()
	require.Contains(t, byID, "hopper_jobs_pkey", byID)
	require.NotContains(t, byID, "hopper_jobs_sequence_waiting_idx", byID)
	require.Contains(t, byKey, "hopper_jobs_sequence_waiting_idx", byKey)

	var def string
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT pg_get_indexdef('hopper_jobs_sequence_waiting_idx'::regclass)`).Scan(&def))
	require.Contains(t, def, "IS NOT NULL")

	downTo(ctx, t, mg, 24)
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT pg_get_indexdef('hopper_jobs_sequence_waiting_idx'::regclass)`).Scan(&def))
	require.NotContains(t, def, "IS NOT NULL", "migration 13's index")
	byID, _ = plans()
	require.Contains(t, byID, "hopper_jobs_sequence_waiting_idx", "the plan this migration ends: %s", byID)
	require.NoError(t, mg.Up(ctx))
	byID, byKey = plans()
	require.Contains(t, byID, "hopper_jobs_pkey", byID)
	require.Contains(t, byKey, "hopper_jobs_sequence_waiting_idx", byKey)
}
