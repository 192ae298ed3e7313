package schema_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/schema"
)

// edgeObjects are what migration 15 (workflow_edges) adds: the isolation
// check and its triggers, the purge's trigger, the revivals' lock, and a second
// hopper_workflow_link (of two arguments).
var edgeObjects = []string{
	"function hopper_isolation_check", "function hopper_require_read_committed",
	"function hopper_workflow_link", "function hopper_workflow_lock_id", "function hopper_workflow_purged", "relation hopper_workflow_deps_failed_idx",
	"trigger hopper_dead_jobs_isolation_delete", "trigger hopper_dead_jobs_workflow_purged",
	"trigger hopper_jobs_isolation_delete", "trigger hopper_jobs_isolation_insert",
}

// TestWorkflowEdgesMigration: migration 15 upgrades a live schema whose
// edges lead from dead parents: they take their parents' failure, so a
// purge after the upgrade still cancels the child. The down drops the
// migration's objects only (and the column), and up brings them back.
func TestWorkflowEdgesMigration(t *testing.T) {
	ctx, d := setup(t)
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close()) }()
	require.NoError(t, mg.Up(ctx))
	up := objects(t, ctx, d, d.Schema)
	for _, o := range edgeObjects {
		require.Contains(t, up, o)
	}
	downTo(ctx, t, mg, 14)
	require.Equal(t, objectsAt(t, up, 14), objects(t, ctx, d, d.Schema), "the down drops the migration's objects only")

	// At version 14: c after a and b; a is cancelled.
	_, err = d.Pool.Exec(ctx, `INSERT INTO hopper_jobs (id, queue, kind, payload, state, meta) OVERRIDING SYSTEM VALUE VALUES
		(1, 'default', 'step', '{}', 'pending', '{"hopper.workflow": "w", "hopper.step": "a"}'),
		(2, 'default', 'step', '{}', 'pending', '{"hopper.workflow": "w", "hopper.step": "b"}'),
		(3, 'default', 'step', '{}', 'waiting', '{"hopper.workflow": "w", "hopper.step": "c"}')`)
	require.NoError(t, err)
	_, err = d.Pool.Exec(ctx, `SELECT hopper_workflow_link('{1,2}', '{3,3}', 1)`)
	require.NoError(t, err)
	_, err = d.Pool.Exec(ctx, `WITH gone AS (DELETE FROM hopper_jobs WHERE id = 1 RETURNING *)
		INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt, max_attempts, errors, reason, created_at, run_at, state, meta)
		SELECT id, queue, kind, version, payload, priority, attempt, max_attempts, errors, 'by hand', created_at, run_at, 'cancelled', meta FROM gone`)
	require.NoError(t, err)

	require.NoError(t, mg.Up(ctx))
	require.Equal(t, up, objects(t, ctx, d, d.Schema))
	var failed string
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT parent_failed FROM hopper_workflow_deps WHERE parent_id = 1`).Scan(&failed))
	require.Equal(t, "cancelled", failed, "the upgrade writes a dead parent's failure on its edges")
	_, err = d.Pool.Exec(ctx, `DELETE FROM hopper_dead_jobs WHERE id = 1`)
	require.NoError(t, err)
	_, err = d.Pool.Exec(ctx, `DELETE FROM hopper_jobs WHERE id = 2`)
	require.NoError(t, err)
	var state, reason string
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT state, reason FROM hopper_dead_jobs WHERE id = 3`).Scan(&state, &reason))
	require.Equal(t, "cancelled", state, "a purged parent stays failed")
	require.Equal(t, "parent 1 ended cancelled and was purged", reason)
}
