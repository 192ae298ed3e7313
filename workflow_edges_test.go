package hopper_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

// The defects found where workflows meet retention, raw SQL and the
// callers' isolation levels, each as it was reported.

// cancelAndPurge cancels a live step and purges its dead row, as the
// workers' dead-job retention would.
func (b *bundle) cancelAndPurge(t *testing.T, id int64) {
	t.Helper()
	_, err := b.client.CancelJobs(b.Ctx, id)
	require.NoError(t, err)
	n, err := b.client.PurgeDeadJobs(b.Ctx, hopper.DeadFilter{IDs: []int64{id}, States: []jobs.State{jobs.StateCancelled}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// ack deletes a ready step, as its acknowledgement does.
func (b *bundle) ack(t *testing.T, id int64) {
	t.Helper()
	tag, err := b.Pool.Exec(b.Ctx, `DELETE FROM hopper_jobs WHERE id = $1 AND state IN ('pending', 'scheduled')`, id)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected(), "job %d is ready", id)
}

func (b *bundle) where(t *testing.T, id int64) (state, reason string) {
	t.Helper()
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT state, coalesce(reason, '') FROM hopper_all_jobs WHERE id = $1`, id).Scan(&state, &reason))
	return state, reason
}

// TestPurgedParentStaysFailed: a parent cancelled and then purged is
// still a failure for its children under every policy, and for a batch's
// counts and a step's view of its parents.
func TestPurgedParentStaysFailed(t *testing.T) {
	for _, policy := range []jobs.WorkflowPolicy{jobs.WorkflowCancel, jobs.WorkflowRun, jobs.WorkflowWait} {
		t.Run(string(policy), func(t *testing.T) {
			b := setup(t)
			res, err := jobs.EnqueueWorkflow(b.Ctx, b.Pool, jobs.NewWorkflow("purged-"+string(policy)).
				Add("a", step("a")).Add("b", step("b")).
				Add("c", step("c"), jobs.After("a", "b"), jobs.OnParentFailure(policy)))
			require.NoError(t, err)
			a, bb, c := res.Steps["a"], res.Steps["b"], res.Steps["c"]
			b.cancelAndPurge(t, a)
			b.ack(t, bb)

			counts, err := jobs.CountParents(b.Ctx, b.Pool, c)
			require.NoError(t, err)
			require.Equal(t, jobs.ParentCounts{Completed: 1, Cancelled: 1}, counts, "the purged parent counts as cancelled")
			parents, err := jobs.Parents(b.Ctx, b.Pool, c)
			require.NoError(t, err)
			require.Equal(t, "cancelled", parents[0].State)

			state, reason := b.where(t, c)
			switch policy {
			case jobs.WorkflowRun:
				require.Equal(t, "pending", state)
			case jobs.WorkflowCancel:
				require.Equal(t, "cancelled", state)
				require.Equal(t, fmt.Sprintf("parent %d ended cancelled and was purged", a), reason)
			case jobs.WorkflowWait:
				// No retry can bring the parent back: waiting would be forever.
				require.Equal(t, "cancelled", state)
				require.Equal(t, fmt.Sprintf("parent %d ended cancelled and was purged", a), reason)
				back, err := b.client.RetryWorkflow(b.Ctx, "purged-wait")
				require.NoError(t, err)
				require.Equal(t, []int64{c}, back, "the workflow's retry brings the step back")
				state, _ = b.where(t, c)
				require.Equal(t, "cancelled", state, "and it meets the purged parent's failure again")
			}
		})
	}
}

// TestHeldStepCancelledWhenParentPurged: a step held under the wait policy
// by a dead parent is cancelled when that parent is purged, not left
// waiting for a retry that can no longer come.
func TestHeldStepCancelledWhenParentPurged(t *testing.T) {
	b := setup(t)
	res, err := jobs.EnqueueWorkflow(b.Ctx, b.Pool, jobs.NewWorkflow("held").
		Add("a", step("a")).Add("c", step("c"), jobs.After("a"), jobs.OnParentFailure(jobs.WorkflowWait)).
		Add("d", step("d"), jobs.After("c")))
	require.NoError(t, err)
	a, c, d := res.Steps["a"], res.Steps["c"], res.Steps["d"]
	_, err = b.client.CancelJobs(b.Ctx, a)
	require.NoError(t, err)
	state, _ := b.where(t, c)
	require.Equal(t, "waiting", state, "held for the parent's retry")
	n, err := b.client.PurgeDeadJobs(b.Ctx, hopper.DeadFilter{IDs: []int64{a}, States: []jobs.State{jobs.StateCancelled}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	state, reason := b.where(t, c)
	require.Equal(t, "cancelled", state)
	require.Equal(t, fmt.Sprintf("parent %d ended cancelled and was purged", a), reason)
	state, reason = b.where(t, d)
	require.Equal(t, "cancelled", state, "and the cancel goes on down")
	require.Equal(t, fmt.Sprintf("parent %d ended cancelled", c), reason)
}

// TestAfterJobsRefusesNoJob: a parent given by id must be a step of the
// workflow: an id no job has (above every id of this schema too), and a
// job of another schema whose id this schema never issued, are refused,
// with nothing written.
func TestAfterJobsRefusesNoJob(t *testing.T) {
	b := setup(t)
	other := testdb.New(t)
	var foreign int64
	for range 5 { // the other schema's ids run ahead of this one's
		res, err := jobs.EnqueueWorkflow(b.Ctx, other.Pool, jobs.NewWorkflow("w").Add(fmt.Sprint(foreign), step("x")))
		require.NoError(t, err)
		foreign = res.Steps[fmt.Sprint(foreign)]
	}
	res, err := jobs.EnqueueWorkflow(b.Ctx, b.Pool, jobs.NewWorkflow("w").Add("a", step("a")))
	require.NoError(t, err)
	require.Less(t, res.Steps["a"], foreign)
	for _, id := range []int64{foreign, res.Steps["a"] + 1, res.Steps["a"] + 1_000_000} {
		_, err := jobs.EnqueueWorkflow(b.Ctx, b.Pool, jobs.NewWorkflow("w").Add("late", step("late"), jobs.AfterJobs(id)))
		require.ErrorIs(t, err, jobs.ErrInvalidWorkflow, "job %d", id)
		require.ErrorContains(t, err, fmt.Sprintf("job %d is no step of the workflow", id))
	}
	live, _ := b.Totals(t)
	require.EqualValues(t, 1, live, "nothing written")
}

// TestLinkCountsStoredEdges: a child's edges recorded by several calls of
// hopper_workflow_link in one transaction, or a parent added to a step
// that already waits, count all the child's parents: it runs only after
// the last.
func TestLinkCountsStoredEdges(t *testing.T) {
	b := setup(t)
	insert := func(tx pgx.Tx, name, state string) int64 {
		var id int64
		require.NoError(t, tx.QueryRow(b.Ctx, `INSERT INTO hopper_jobs (queue, kind, payload, state, meta)
			VALUES ('default', 'workflow_step', '{}', $1, jsonb_build_object('hopper.workflow', 'sql', 'hopper.step', $2::text)) RETURNING id`,
			state, name).Scan(&id))
		return id
	}
	link := func(tx pgx.Tx, parent, child int64) {
		_, err := tx.Exec(b.Ctx, `SELECT hopper_workflow_link(ARRAY[$1::bigint], ARRAY[$2::bigint])`, parent, child)
		require.NoError(t, err)
	}
	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	a, bb, c := insert(tx, "a", "pending"), insert(tx, "b", "pending"), insert(tx, "c", "waiting")
	link(tx, a, c)
	link(tx, bb, c)
	require.NoError(t, tx.Commit(b.Ctx))

	// A third parent, added once c already waits.
	tx, err = b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	d := insert(tx, "d", "pending")
	link(tx, d, c)
	require.NoError(t, tx.Commit(b.Ctx))

	for _, p := range []int64{a, bb} {
		b.ack(t, p)
		state, _ := b.where(t, c)
		require.Equal(t, "waiting", state, "after job %d, c still waits", p)
	}
	b.ack(t, d)
	state, _ := b.where(t, c)
	require.Equal(t, "pending", state)
}

// TestSequencesAndWorkflowsRefuseOtherIsolation: a write that reaches the
// triggers of sequences or workflows from a REPEATABLE READ or
// SERIALIZABLE transaction is refused with jobs.ErrIsolation (the SQL API
// with SQLSTATE 0A000), never left to strand work; plain jobs are written
// under any level.
func TestSequencesAndWorkflowsRefuseOtherIsolation(t *testing.T) {
	b := setup(t)
	head, err := email.Enqueue(b.Ctx, b.Pool, Email{To: "a"}, jobs.Sequence("k"))
	require.NoError(t, err)
	wf, err := jobs.EnqueueWorkflow(b.Ctx, b.Pool, jobs.NewWorkflow("iso").Add("a", step("a")).Add("b", step("b"), jobs.After("a")))
	require.NoError(t, err)
	plain, err := email.Enqueue(b.Ctx, b.Pool, Email{To: "plain"})
	require.NoError(t, err)
	// A workflow with a cancelled step (dead, and its child cancelled
	// with it), so its retry and the dead step's purge and retry have
	// rows to write; a step a handler would acknowledge; a sequence
	// whose head is blocked.
	failed, err := jobs.EnqueueWorkflow(b.Ctx, b.Pool, jobs.NewWorkflow("iso_failed").Add("x", step("x")).Add("y", step("y"), jobs.After("x")))
	require.NoError(t, err)
	_, err = b.client.CancelJobs(b.Ctx, failed.Steps["x"])
	require.NoError(t, err)
	deadStep := hopper.DeadFilter{IDs: []int64{failed.Steps["x"]}, States: []jobs.State{jobs.StateCancelled}}
	blocked, err := email.Enqueue(b.Ctx, b.Pool, Email{To: "blocked"}, jobs.Sequence("k2"))
	require.NoError(t, err)
	_, err = b.client.CancelJobs(b.Ctx, blocked.ID)
	require.NoError(t, err)

	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		writes := map[string]func(tx pgx.Tx) error{
			"enqueue to a sequence": func(tx pgx.Tx) error {
				_, err := email.Enqueue(b.Ctx, tx, Email{To: "b"}, jobs.Sequence("k"))
				return err
			},
			"enqueue a workflow": func(tx pgx.Tx) error {
				_, err := jobs.EnqueueWorkflow(b.Ctx, tx, jobs.NewWorkflow("iso2").Add("a", step("a")))
				return err
			},
			"cancel a sequence's head": func(tx pgx.Tx) error {
				_, err := b.client.CancelJobsTx(b.Ctx, tx, head.ID)
				return err
			},
			"delete a workflow step": func(tx pgx.Tx) error {
				_, err := b.client.DeleteJobTx(b.Ctx, tx, wf.Steps["a"])
				return err
			},
			"retry a workflow": func(tx pgx.Tx) error {
				_, err := b.client.RetryWorkflowTx(b.Ctx, tx, "iso_failed")
				return err
			},
			"purge a workflow's dead step": func(tx pgx.Tx) error {
				_, err := b.client.PurgeDeadJobsTx(b.Ctx, tx, deadStep)
				return err
			},
			"retry a workflow's dead step": func(tx pgx.Tx) error {
				_, err := b.client.RetryDeadJobsTx(b.Ctx, tx, deadStep)
				return err
			},
			"skip a sequence's blocked head": func(tx pgx.Tx) error {
				_, err := b.client.SkipSequenceTx(b.Ctx, tx, "k2")
				return err
			},
			"hopper_workflow_link": func(tx pgx.Tx) error {
				_, err := tx.Exec(b.Ctx, `SELECT hopper_workflow_link(ARRAY[$1::bigint], ARRAY[$2::bigint])`, wf.Steps["a"], wf.Steps["b"])
				return err
			},
			"hopper_enqueue_many to a sequence": func(tx pgx.Tx) error {
				_, err := tx.Exec(b.Ctx, `SELECT hopper_enqueue_many('[{"kind": "sql", "payload": {}, "meta": {"hopper.sequence": "k"}}]')`)
				return err
			},
		}
		for name, write := range writes {
			tx, err := b.Pool.BeginTx(b.Ctx, pgx.TxOptions{IsoLevel: level})
			require.NoError(t, err)
			err = write(tx)
			require.NoError(t, tx.Rollback(b.Ctx))
			if strings.HasPrefix(name, "hopper_") {
				require.ErrorContains(t, err, "SQLSTATE 0A000", "the SQL API's %s under %s", name, level)
			} else {
				require.ErrorIs(t, err, jobs.ErrIsolation, "%s under %s", name, level)
			}
			require.ErrorContains(t, err, "hopper: read committed required", "%s under %s", name, level)
		}

		tx, err := b.Pool.BeginTx(b.Ctx, pgx.TxOptions{IsoLevel: level})
		require.NoError(t, err)
		_, err = tx.Exec(b.Ctx, `SELECT hopper_enqueue('sql', '{}', meta => '{"hopper.sequence": "k"}')`)
		require.ErrorContains(t, err, "SQLSTATE 0A000", "the SQL API under %s", level)
		require.NoError(t, tx.Rollback(b.Ctx))

		tx, err = b.Pool.BeginTx(b.Ctx, pgx.TxOptions{IsoLevel: level})
		require.NoError(t, err)
		_, err = email.Enqueue(b.Ctx, tx, Email{To: "plain too"})
		require.NoError(t, err, "a plain job under %s", level)
		_, err = b.client.DeleteJobTx(b.Ctx, tx, plain.ID)
		require.NoError(t, err, "a plain job under %s", level)
		require.NoError(t, tx.Rollback(b.Ctx))
	}
	// Nothing was stranded: the head and the step are where they were.
	state, _ := b.where(t, head.ID)
	require.Equal(t, "pending", state)
	state, _ = b.where(t, wf.Steps["b"])
	require.Equal(t, "waiting", state)
	state, _ = b.where(t, failed.Steps["x"])
	require.Equal(t, "cancelled", state)
}

// TestLinkRefusedWhenStepDecidedMeanwhile: a parent is added by SQL to a
// step that waits while another transaction ends that step's last parent.
// The end cannot see the uncommitted edge and makes the step ready; the
// link, which waited for the end's locks, must then refuse (22023) rather
// than commit an edge the ready step would never wait for.
func TestLinkRefusedWhenStepDecidedMeanwhile(t *testing.T) {
	b := setup(t)
	res, err := jobs.EnqueueWorkflow(b.Ctx, b.Pool, jobs.NewWorkflow("meanwhile").Add("a", step("a")).Add("n", step("n")).Add("c", step("c"), jobs.After("a")))
	require.NoError(t, err)
	a, n, c := res.Steps["a"], res.Steps["n"], res.Steps["c"]

	ender, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer func() { _ = ender.Rollback(b.Ctx) }()
	_, err = ender.Exec(b.Ctx, `DELETE FROM hopper_jobs WHERE id = $1`, a) // a's acknowledgement
	require.NoError(t, err)
	var xid string
	require.NoError(t, ender.QueryRow(b.Ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid))

	linked := make(chan error, 1)
	go func() {
		_, err := b.Pool.Exec(b.Ctx, `SELECT hopper_workflow_link(ARRAY[$1::bigint], ARRAY[$2::bigint])`, n, c)
		linked <- err
	}()
	testdb.WaitFor(t, "the link waits for the end's transaction", func() bool {
		var waiting bool
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT EXISTS (SELECT FROM pg_locks
			WHERE locktype = 'transactionid' AND NOT granted AND transactionid::text = $1)`, xid).Scan(&waiting))
		return waiting
	})
	require.NoError(t, ender.Commit(b.Ctx))
	err = <-linked
	require.ErrorContains(t, err, "SQLSTATE 22023")
	require.ErrorContains(t, err, "no longer waits")
	state, _ := b.where(t, c)
	require.Equal(t, "pending", state, "c is ready: its only parent ended")
	var edges int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT count(*) FROM hopper_workflow_deps WHERE child_id = $1 AND parent_id = $2`, c, n).Scan(&edges))
	require.Zero(t, edges, "the refused edge was not recorded")
}

// TestCancelWorkflowCatchesStepsAddedMeanwhile: a handler's transaction
// adds a step after its own and acknowledges its own (AckTx) while
// CancelWorkflow runs: the cancel waits for that transaction on the
// acknowledged row, finds it gone, and must still cancel the new step,
// which its first list of live steps did not hold.
func TestCancelWorkflowCatchesStepsAddedMeanwhile(t *testing.T) {
	b := setup(t)
	res, err := jobs.EnqueueWorkflow(b.Ctx, b.Pool, jobs.NewWorkflow("adding").Add("s", step("s")))
	require.NoError(t, err)
	s := res.Steps["s"]

	handler, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer func() { _ = handler.Rollback(b.Ctx) }()
	added, err := jobs.EnqueueWorkflow(b.Ctx, handler, jobs.NewWorkflow("adding").Add("n", step("n"), jobs.AfterJobs(s)))
	require.NoError(t, err)
	_, err = handler.Exec(b.Ctx, `DELETE FROM hopper_jobs WHERE id = $1`, s) // its acknowledgement
	require.NoError(t, err)
	var xid string
	require.NoError(t, handler.QueryRow(b.Ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid))

	type result struct {
		ids []int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		ids, err := b.client.CancelWorkflow(b.Ctx, "adding")
		done <- result{ids, err}
	}()
	testdb.WaitFor(t, "the cancel waits for the handler's transaction", func() bool {
		var waiting bool
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT EXISTS (SELECT FROM pg_locks
			WHERE locktype = 'transactionid' AND NOT granted AND transactionid::text = $1)`, xid).Scan(&waiting))
		return waiting
	})
	require.NoError(t, handler.Commit(b.Ctx))
	r := <-done
	require.NoError(t, r.err)
	n := added.Steps["n"]
	require.Equal(t, []int64{n}, r.ids, "the step added meanwhile is cancelled")
	state, _ := b.where(t, n)
	require.Equal(t, "cancelled", state)
}

// TestRevivalsOfAWorkflowTakeTurns: RetryDeadJobs of a workflow's step and
// RetryWorkflow of the same workflow at once could deadlock (each holds a
// dead row the other's trigger locks as a parent), and PostgreSQL aborted
// one. They take turns on the workflow's lock: the second waits for the
// first to commit, then both succeed.
func TestRevivalsOfAWorkflowTakeTurns(t *testing.T) {
	b := setup(t)
	res, err := jobs.EnqueueWorkflow(b.Ctx, b.Pool, jobs.NewWorkflow("turns").
		Add("p", step("p")).Add("x", step("x"), jobs.After("p")).Add("c", step("c"), jobs.After("x")))
	require.NoError(t, err)
	_, err = b.client.CancelJobs(b.Ctx, res.Steps["p"]) // x and c are cancelled with it
	require.NoError(t, err)
	for _, s := range []string{"p", "x", "c"} {
		state, _ := b.where(t, res.Steps[s])
		require.Equal(t, "cancelled", state, s)
	}

	first, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer func() { _ = first.Rollback(b.Ctx) }()
	retried, err := b.client.RetryDeadJobsTx(b.Ctx, first, hopper.DeadFilter{IDs: []int64{res.Steps["x"]}, States: []jobs.State{jobs.StateCancelled}})
	require.NoError(t, err)
	require.Equal(t, []int64{res.Steps["x"]}, retried.Retried)

	type result struct {
		ids []int64
		err error
	}
	second := make(chan result, 1)
	go func() {
		ids, err := b.client.RetryWorkflow(b.Ctx, "turns")
		second <- result{ids, err}
	}()
	testdb.WaitFor(t, "RetryWorkflow waits for the workflow's lock", func() bool {
		var waiting bool
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND NOT granted)`).Scan(&waiting))
		return waiting
	})
	require.NoError(t, first.Commit(b.Ctx))
	r := <-second
	require.NoError(t, r.err)
	// x came back and, its parent still cancelled, was cancelled again by
	// its policy: the workflow's retry brings all three back.
	require.ElementsMatch(t, []int64{res.Steps["p"], res.Steps["x"], res.Steps["c"]}, r.ids)
	state, _ := b.where(t, res.Steps["p"])
	require.Equal(t, "pending", state)
	for _, s := range []string{"x", "c"} {
		state, _ := b.where(t, res.Steps[s])
		require.Equal(t, "waiting", state, s)
	}
}
