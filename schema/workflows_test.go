package schema_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/schema"
)

// workflowObjects are what migration 14 (workflows) adds.
var workflowObjects = []string{
	"function hopper_workflow_advance", "function hopper_workflow_count", "function hopper_workflow_decide",
	"function hopper_workflow_link", "function hopper_workflow_pass", "function hopper_workflow_retry", "function hopper_workflow_returned",
	"relation hopper_dead_jobs_workflow_idx", "relation hopper_job_history_workflow_idx", "relation hopper_jobs_workflow_idx",
	"relation hopper_workflow_deps", "relation hopper_workflow_deps_child_idx", "relation hopper_workflow_deps_pkey",
	"relation hopper_workflow_waits", "relation hopper_workflow_waits_pkey",
	"trigger hopper_jobs_workflow_advance", "trigger hopper_jobs_workflow_returned",
}

// TestWorkflowsMigration: migration 14 upgrades a live schema (its jobs,
// sequences' waiting ones included, are kept as they are); steps then wait
// for their parents, and a parent's delete promotes its child; the down
// makes waiting steps ready (a sequence's waiting jobs stay waiting) and
// drops the migration's objects only, and up brings them back.
func TestWorkflowsMigration(t *testing.T) {
	ctx, d := setup(t)
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close()) }()
	require.NoError(t, mg.Up(ctx))
	up := objects(t, ctx, d, d.Schema)
	for _, o := range workflowObjects {
		require.Contains(t, up, o)
	}
	downTo(ctx, t, mg, 13)
	for range 2 {
		_, err = d.Pool.Exec(ctx, `SELECT hopper_enqueue('old', '{}', meta => '{"hopper.sequence": "k"}')`)
		require.NoError(t, err)
	}
	require.NoError(t, mg.Up(ctx))
	state := func(id int64) string {
		var s string
		require.NoError(t, d.Pool.QueryRow(ctx, "SELECT state FROM hopper_jobs WHERE id = $1", id).Scan(&s))
		return s
	}
	require.Equal(t, []string{"pending", "waiting"}, []string{state(1), state(2)}, "a sequence keeps its order")

	_, err = d.Pool.Exec(ctx, `INSERT INTO hopper_jobs (queue, kind, payload, state, meta) VALUES
		('default', 'step', '{}', 'pending', '{"hopper.workflow": "w", "hopper.step": "a"}'),
		('default', 'step', '{}', 'waiting', '{"hopper.workflow": "w", "hopper.step": "b"}')`)
	require.NoError(t, err)
	_, err = d.Pool.Exec(ctx, `SELECT hopper_workflow_link('{3}', '{4}', 3)`)
	require.NoError(t, err)
	require.Equal(t, "waiting", state(4))
	_, err = d.Pool.Exec(ctx, `INSERT INTO hopper_jobs (queue, kind, payload, state, meta) VALUES
		('default', 'step', '{}', 'waiting', '{"hopper.workflow": "v", "hopper.step": "c"}')`)
	require.NoError(t, err)

	downTo(ctx, t, mg, 13)
	require.Equal(t, []string{"pending", "waiting", "pending", "pending", "pending"},
		[]string{state(1), state(2), state(3), state(4), state(5)}, "the down makes waiting steps ready")
	require.Equal(t, objectsAt(t, up, 13), objects(t, ctx, d, d.Schema), "the down drops the migration's objects only")

	require.NoError(t, mg.Up(ctx))
	require.Equal(t, up, objects(t, ctx, d, d.Schema))
	_, err = d.Pool.Exec(ctx, `UPDATE hopper_jobs SET state = 'waiting' WHERE id = 2`)
	require.NoError(t, err, "a sequence's job may wait")
	for _, bad := range []string{
		`{"hopper.workflow": ""}`,
		`{"hopper.workflow": "w"}`,
		`{"hopper.workflow": "w", "hopper.step": "s", "hopper.workflow_policy": "never"}`,
		`{"hopper.workflow": "w", "hopper.step": "s", "hopper.sequence": "k"}`,
		`{"hopper.step": "s"}`,
	} {
		_, err = d.Pool.Exec(ctx, `INSERT INTO hopper_jobs (queue, kind, payload, meta) VALUES ('default', 'x', '{}', $1)`, bad)
		require.ErrorContains(t, err, "hopper_jobs_workflow_check", bad)
	}
	_, err = d.Pool.Exec(ctx, `INSERT INTO hopper_jobs (queue, kind, payload, state) VALUES ('default', 'x', '{}', 'waiting')`)
	require.ErrorContains(t, err, "hopper_jobs_sequence_check", "a job of no sequence or workflow cannot wait")
}
