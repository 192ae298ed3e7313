package hopper_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

// TestWorkflowProperty: goroutines do random things to random workflows
// at once, each in transactions of its own: enqueue DAGs, one at a time
// or several in one EnqueueWorkflows (some rolled
// back), end ready steps in batches (as acknowledgements do), kill steps
// to the dead table, cancel steps wherever they stand, delete waiting
// ones, retry dead steps one by one (a step with parents comes back
// waiting for those still live) or workflows whole, and add steps to a
// running workflow after a live or dead step; and, where workflows meet
// the rest: purge dead steps (a dead parent's failure must outlive its
// row), record a child's edges by several calls of the SQL API, add a
// parent to a step that already waits, name a parent that is no job (it
// must be refused), edit waiting steps, and end steps inside REPEATABLE
// READ or SERIALIZABLE transactions (they must be refused, never strand). After every round
// these rules must hold:
//
//   - each waiting step of several parents has a count of those still to
//     end, equal to the number of its parents that are live (exact
//     counting: no end counted twice or missed); only such a step has
//     one (a step of one parent waits for that parent's end);
//   - no step waits with every parent ended unless a parent failed and its
//     policy is wait (nothing stranded);
//   - no step under the cancel or wait policy is ready or running while a
//     parent is live, dead or cancelled, or was when it was purged
//     (nothing runs early);
//   - each edge says how its parent ended: the dead table's state while
//     the parent is there, that failure still once it is purged, none
//     once it completed (what CountParents and the verdict read).
//
// The seed is printed; HOPPER_WORKFLOW_SEED repeats a run's plan (not its
// timing).
func TestWorkflowProperty(t *testing.T) {
	seed := propertySeed(t, "HOPPER_WORKFLOW_SEED")
	b := setup(t)
	const actors = 6
	rounds := testdb.Rounds(50)
	var mu sync.Mutex
	var made []string          // workflow ids
	purged := map[int64]bool{} // dead steps purged
	policies := []jobs.WorkflowPolicy{jobs.WorkflowCancel, jobs.WorkflowRun, jobs.WorkflowWait}
	pick := func(r *rand.Rand) string {
		mu.Lock()
		defer mu.Unlock()
		if len(made) == 0 {
			return "none"
		}
		return made[r.IntN(len(made))]
	}
	someStep := func(ctx context.Context, table, where string) (int64, string, error) {
		var id int64
		var wf string
		err := b.Pool.QueryRow(ctx, `SELECT id, meta ->> 'hopper.workflow' FROM `+table+` WHERE meta ? 'hopper.workflow' AND `+where+` ORDER BY random() LIMIT 1`).Scan(&id, &wf)
		if err == pgx.ErrNoRows {
			return 0, "", nil
		}
		return id, wf, err
	}
	ops := []func(ctx context.Context, r *rand.Rand) error{
		func(ctx context.Context, r *rand.Rand) error { // random DAGs, one or a batch (EnqueueWorkflows), sometimes rolled back
			var wfs []*jobs.Workflow
			for range 1 + r.IntN(3) {
				mu.Lock()
				id := fmt.Sprintf("p%d", len(made))
				made = append(made, id)
				mu.Unlock()
				wf := jobs.NewWorkflow(id)
				n := 2 + r.IntN(7)
				for i := range n {
					var opts []jobs.StepOption
					for p := range i {
						if r.IntN(3) == 0 {
							opts = append(opts, jobs.After(fmt.Sprintf("s%d", p)))
						}
					}
					opts = append(opts, jobs.OnParentFailure(policies[r.IntN(3)]))
					wf.Add(fmt.Sprintf("s%d", i), stepKind.Entry(Step{Name: fmt.Sprintf("s%d", i)}), opts...)
				}
				wfs = append(wfs, wf)
			}
			tx, err := b.Pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if len(wfs) == 1 {
				if _, err := jobs.EnqueueWorkflow(ctx, tx, wfs[0]); err != nil {
					return err
				}
			} else if res, err := jobs.EnqueueWorkflows(ctx, tx, wfs); err != nil {
				return err
			} else if len(res) != len(wfs) {
				return fmt.Errorf("EnqueueWorkflows: %d results for %d workflows", len(res), len(wfs))
			}
			if r.IntN(6) == 0 {
				return tx.Rollback(ctx)
			}
			return tx.Commit(ctx)
		},
		func(ctx context.Context, r *rand.Rand) error { // end ready steps, as an ack batch does, at any isolation level
			level := isolationLevels[r.IntN(len(isolationLevels))]
			tx, err := b.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(ctx) }()
			tag, err := tx.Exec(ctx, `DELETE FROM hopper_jobs WHERE id = ANY (ARRAY(
				SELECT id FROM hopper_jobs WHERE state IN ('pending', 'scheduled') AND meta ? 'hopper.workflow'
				ORDER BY random() LIMIT $1 FOR UPDATE SKIP LOCKED))`, 1+r.IntN(4))
			if level != pgx.ReadCommitted {
				return wantIsolationRefused(err, tag.RowsAffected())
			}
			if err != nil {
				return err
			}
			return tx.Commit(ctx)
		},
		func(ctx context.Context, r *rand.Rand) error { // purge a dead step, as the dead-job retention does
			id, _, err := someStep(ctx, "hopper_dead_jobs", "true")
			if err != nil || id == 0 {
				return err
			}
			mu.Lock() // held through the purge, so that the check never reads a purge the set lacks
			defer mu.Unlock()
			n, err := b.client.PurgeDeadJobs(ctx, hopper.DeadFilter{IDs: []int64{id}, States: []jobs.State{jobs.StateDead, jobs.StateCancelled}})
			if n == 1 {
				purged[id] = true
			}
			return err
		},
		func(ctx context.Context, r *rand.Rand) error { // a child and its parents by SQL, one hopper_workflow_link call per edge
			mu.Lock()
			wf := fmt.Sprintf("p%d", len(made))
			made = append(made, wf)
			mu.Unlock()
			tx, err := b.Pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(ctx) }()
			var ids []int64
			n := 2 + r.IntN(3)
			for i := range n + 1 {
				state := "pending"
				if i == n {
					state = "waiting"
				}
				var id int64
				if err := tx.QueryRow(ctx, `INSERT INTO hopper_jobs (queue, kind, payload, state, meta)
					VALUES ('default', 'workflow_step', '{}', $1, jsonb_build_object('hopper.workflow', $2::text, 'hopper.step', $3::text, 'hopper.workflow_policy', $4::text))
					RETURNING id`, state, wf, fmt.Sprintf("s%d", i), string(policies[r.IntN(3)])).Scan(&id); err != nil {
					return err
				}
				ids = append(ids, id)
			}
			child := ids[n]
			for _, p := range ids[:n] {
				if _, err := tx.Exec(ctx, `SELECT hopper_workflow_link(ARRAY[$1::bigint], ARRAY[$2::bigint])`, p, child); err != nil {
					return err
				}
			}
			return tx.Commit(ctx)
		},
		func(ctx context.Context, r *rand.Rand) error { // a ready step becomes one more parent of a step that waits
			id, wf, err := someStep(ctx, "hopper_jobs", "state = 'waiting'")
			if err != nil || id == 0 {
				return err
			}
			// A ready or running step cannot be below a waiting one: no cycle.
			var parent int64
			err = b.Pool.QueryRow(ctx, `SELECT id FROM hopper_jobs WHERE meta ->> 'hopper.workflow' = $1 AND state IN ('pending', 'scheduled', 'running')
				ORDER BY random() LIMIT 1`, wf).Scan(&parent)
			if err == pgx.ErrNoRows {
				return nil
			}
			if err != nil {
				return err
			}
			_, err = b.Pool.Exec(ctx, `SELECT hopper_workflow_link(ARRAY[$1::bigint], ARRAY[$2::bigint])`, parent, id)
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "22023" {
				return nil // the step was promoted or ended meanwhile, or the parent ended and is not kept: refused
			}
			return err
		},
		func(ctx context.Context, r *rand.Rand) error { // an operator edits a waiting step (its priority, its run time)
			id, _, err := someStep(ctx, "hopper_jobs", "state = 'waiting'")
			if err != nil || id == 0 {
				return err
			}
			priority := r.IntN(10)
			_, err = b.client.UpdateJob(ctx, id, hopper.JobUpdate{Priority: &priority, RunNow: r.IntN(2) == 0})
			if err != nil && !isEditRace(err) {
				return err
			}
			return nil
		},
		func(ctx context.Context, r *rand.Rand) error { // a parent that is no job at all must be refused
			var top int64
			if err := b.Pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM hopper_all_jobs`).Scan(&top); err != nil {
				return err
			}
			ghost := top + 1_000_000 + int64(r.IntN(1000))
			_, err := jobs.EnqueueWorkflow(ctx, b.Pool, jobs.NewWorkflow(pick(r)).
				Add(fmt.Sprintf("ghost-%d", r.Uint32()), step("ghost"), jobs.AfterJobs(ghost)))
			if !errors.Is(err, jobs.ErrInvalidWorkflow) {
				return fmt.Errorf("a step after job %d, which is no job, was not refused: %v", ghost, err)
			}
			return nil
		},
		func(ctx context.Context, r *rand.Rand) error { // a ready step dies, as a failed last attempt does
			_, err := b.Pool.Exec(ctx, `WITH gone AS (
				DELETE FROM hopper_jobs WHERE id = (SELECT id FROM hopper_jobs WHERE state IN ('pending', 'scheduled')
					AND meta ? 'hopper.workflow' ORDER BY random() LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING *)
				INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt, max_attempts, unique_key, errors,
					reason, created_at, run_at, state, meta, concurrency_key)
				SELECT id, queue, kind, version, payload, priority, attempt, max_attempts, unique_key, errors,
					'property', created_at, run_at, 'dead', meta, concurrency_key FROM gone`)
			return err
		},
		func(ctx context.Context, r *rand.Rand) error { // cancel a live step, wherever it stands
			id, _, err := someStep(ctx, "hopper_jobs", "true")
			if err != nil || id == 0 {
				return err
			}
			_, err = b.client.CancelJobs(ctx, id)
			return err
		},
		func(ctx context.Context, r *rand.Rand) error { // delete a waiting step
			id, _, err := someStep(ctx, "hopper_jobs", "state = 'waiting'")
			if err != nil || id == 0 {
				return err
			}
			if _, err := b.client.DeleteJob(ctx, id); err != nil && !isEditRace(err) {
				return err
			}
			return nil
		},
		func(ctx context.Context, r *rand.Rand) error { // retry one dead step
			id, _, err := someStep(ctx, "hopper_dead_jobs", "true")
			if err != nil || id == 0 {
				return err
			}
			_, err = b.client.RetryDeadJobs(ctx, hopper.DeadFilter{IDs: []int64{id}, States: []jobs.State{jobs.StateDead, jobs.StateCancelled}})
			return err
		},
		func(ctx context.Context, r *rand.Rand) error { // retry a workflow whole
			_, err := b.client.RetryWorkflow(ctx, pick(r))
			return err
		},
		func(ctx context.Context, r *rand.Rand) error { // add a step after a live (or dead) step
			table := "hopper_jobs"
			if r.IntN(4) == 0 {
				table = "hopper_dead_jobs"
			}
			id, wf, err := someStep(ctx, table, "true")
			if err != nil || id == 0 {
				return err
			}
			_, err = jobs.EnqueueWorkflow(ctx, b.Pool, jobs.NewWorkflow(wf).
				Add(fmt.Sprintf("added-%d", r.Uint32()), step("added"), jobs.AfterJobs(id), jobs.OnParentFailure(policies[r.IntN(3)])))
			if errors.Is(err, jobs.ErrInvalidWorkflow) {
				return nil // the parent completed meanwhile, and is not kept: refused
			}
			return err
		},
	}

	// Each rule is a query for the steps that break it.
	rules := map[string]string{
		"a waiting step's count is not its live parents": `SELECT j.id FROM hopper_jobs AS j
			LEFT JOIN hopper_workflow_waits AS w ON w.child_id = j.id
			WHERE j.state = 'waiting' AND (SELECT count(*) FROM hopper_workflow_deps AS d WHERE d.child_id = j.id) > 1
			  AND (w.parents_left IS NULL OR w.parents_left <> (
				SELECT count(*) FROM hopper_workflow_deps AS d JOIN hopper_jobs AS p ON p.id = d.parent_id WHERE d.child_id = j.id))`,
		"a step of one parent has a count": `SELECT w.child_id FROM hopper_workflow_waits AS w
			WHERE (SELECT count(*) FROM hopper_workflow_deps AS d WHERE d.child_id = w.child_id) < 2`,
		"a count outlives its waiting": `SELECT w.child_id FROM hopper_workflow_waits AS w
			WHERE NOT EXISTS (SELECT FROM hopper_jobs AS j WHERE j.id = w.child_id AND j.state = 'waiting')`,
		"a step is stranded": `SELECT j.id FROM hopper_jobs AS j
			WHERE j.state = 'waiting'
			  AND NOT EXISTS (SELECT FROM hopper_workflow_deps AS d JOIN hopper_jobs AS p ON p.id = d.parent_id WHERE d.child_id = j.id)
			  AND NOT (coalesce(j.meta ->> 'hopper.workflow_policy', 'cancel') = 'wait'
			           AND EXISTS (SELECT FROM hopper_workflow_deps AS d JOIN hopper_dead_jobs AS x ON x.id = d.parent_id WHERE d.child_id = j.id))`,
		"a step runs early": `SELECT j.id FROM hopper_jobs AS j
			WHERE j.state <> 'waiting' AND coalesce(j.meta ->> 'hopper.workflow_policy', 'cancel') <> 'run'
			  AND EXISTS (SELECT FROM hopper_workflow_deps AS d WHERE d.child_id = j.id
			              AND (EXISTS (SELECT FROM hopper_jobs AS p WHERE p.id = d.parent_id)
			                   OR EXISTS (SELECT FROM hopper_dead_jobs AS x WHERE x.id = d.parent_id)
			                   OR d.parent_id = ANY ($1::bigint[])))`,
		"an edge's failure is not its dead parent's state": `SELECT d.child_id FROM hopper_workflow_deps AS d
			JOIN hopper_dead_jobs AS x ON x.id = d.parent_id
			WHERE d.parent_failed IS DISTINCT FROM x.state`,
		"an edge forgot its purged parent's failure": `SELECT d.child_id FROM hopper_workflow_deps AS d
			WHERE d.parent_id = ANY ($1::bigint[]) AND d.parent_failed IS NULL`,
		"an edge of a completed parent says it failed": `SELECT d.child_id FROM hopper_workflow_deps AS d
			WHERE d.parent_failed IS NOT NULL AND NOT d.parent_id = ANY ($1::bigint[])
			  AND NOT EXISTS (SELECT FROM hopper_jobs AS p WHERE p.id = d.parent_id)
			  AND NOT EXISTS (SELECT FROM hopper_dead_jobs AS x WHERE x.id = d.parent_id)`,
	}
	check := func(round int) {
		mu.Lock()
		gone := make([]int64, 0, len(purged))
		for id := range purged {
			gone = append(gone, id)
		}
		mu.Unlock()
		for rule, q := range rules {
			var args []any
			if strings.Contains(q, "$1") {
				args = append(args, gone)
			}
			rows, err := b.Pool.Query(b.Ctx, q, args...)
			require.NoError(t, err)
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			require.NoError(t, err)
			require.Empty(t, ids, "round %d (seed %d): %s\n%s", round, seed, rule, describeSteps(t, b, ids))
		}
	}
	for round := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, actors)
		for a := range actors {
			r := rand.New(rand.NewPCG(seed, uint64(round*actors+a)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 4 {
					if err := ops[r.IntN(len(ops))](b.Ctx, r); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err, "round %d (seed %d)", round, seed)
		}
		check(round)
	}
}

// describeSteps prints steps and their parents, for a failure's message.
func describeSteps(t *testing.T, b *bundle, ids []int64) string {
	out := ""
	for _, id := range ids {
		rows, err := b.Pool.Query(b.Ctx, `SELECT a.id, a.state, coalesce(a.meta ->> 'hopper.workflow_policy', 'cancel'), coalesce(a.reason, ''), a.attempt, a.max_attempts
			FROM hopper_all_jobs AS a WHERE a.id = $1 OR a.id IN (SELECT parent_id FROM hopper_workflow_deps WHERE child_id = $1) ORDER BY a.id`, id)
		require.NoError(t, err)
		for rows.Next() {
			var sid int64
			var state, policy, reason string
			var attempt, max int32
			require.NoError(t, rows.Scan(&sid, &state, &policy, &reason, &attempt, &max))
			out += fmt.Sprintf("  step %d of %d: %s policy=%s reason=%q attempt=%d/%d\n", sid, id, state, policy, reason, attempt, max)
		}
		require.NoError(t, rows.Err())
	}
	return out
}

// isolationLevels are the levels a property test's transactions run at:
// only READ COMMITTED may write a sequence's or a workflow's jobs.
var isolationLevels = []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable}

// wantIsolationRefused checks a write of a sequence's or a workflow's
// jobs outside READ COMMITTED: refused (SQLSTATE 0A000), or, when it
// wrote no row, accepted; SERIALIZABLE may refuse it as a serialization
// failure first.
func wantIsolationRefused(err error, rows int64) error {
	var pgErr *pgconn.PgError
	switch {
	case err == nil && rows == 0:
		return nil
	case errors.As(err, &pgErr) && (pgErr.Code == "0A000" || pgErr.Code == "40001"):
		return nil
	}
	return fmt.Errorf("a write of %d rows outside READ COMMITTED was not refused: %v", rows, err)
}
