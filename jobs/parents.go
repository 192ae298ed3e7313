package jobs

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/migrated"
)

// Parent is one parent of a workflow step, as its child sees it.
type Parent struct {
	ID int64
	// Step is the parent's step name ("" when it is gone).
	Step string
	// State is where the parent is: "completed" (kept in the history,
	// with its result), "dead" or "cancelled" (still, once the dead row
	// is purged: the edge keeps the failure), a live state while it has
	// not ended (a step with WorkflowWait sees its failed parent retried),
	// or "gone": it completed and is no longer kept (see the worker's
	// KeepWorkflowSteps), or an operator deleted it.
	State string
	// Result is the parent's handler's result as JSON (HandleWithResult),
	// nil when it has none or is not completed.
	Result json.RawMessage
}

// Parents lists the parents of the workflow step with the given id (a
// handler passes job.ID), in id order; none for a step without parents.
func Parents(ctx context.Context, dbtx DBTX, id int64) ([]Parent, error) {
	rows, err := db.New(dbtx).WorkflowParents(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("parents of job %d: %w", id, migrated.Explain(err, dbtx))
	}
	out := make([]Parent, len(rows))
	for i, r := range rows {
		out[i] = Parent{ID: r.ID, Step: r.Step, State: r.State, Result: r.Result}
	}
	return out, nil
}

// ParentResult decodes into R the result of the parent named step of the
// workflow step with the given id. It returns an error wrapping
// ErrNoResult when the step has no such parent, or the parent has no
// result (it failed, has not ended, is no longer kept, or its handler
// returns none).
func ParentResult[R any](ctx context.Context, dbtx DBTX, id int64, step string) (R, error) {
	var out R
	parents, err := Parents(ctx, dbtx, id)
	if err != nil {
		return out, err
	}
	for _, p := range parents {
		if p.Step != step {
			continue
		}
		if p.State != string(StateCompleted) || len(p.Result) == 0 || string(p.Result) == "null" {
			return out, fmt.Errorf("result of step %q for job %d: %w: the parent (job %d) is %s", step, id, ErrNoResult, p.ID, describeParent(p))
		}
		if err := json.Unmarshal(p.Result, &out); err != nil {
			return out, fmt.Errorf("result of step %q for job %d: decode: %w", step, id, err)
		}
		return out, nil
	}
	return out, fmt.Errorf("result of step %q for job %d: %w: no parent of that name", step, id, ErrNoResult)
}

func describeParent(p Parent) string {
	if p.State == string(StateCompleted) {
		return "completed without a result"
	}
	return p.State
}

// ParentCounts says how a step's parents ended: what a batch's callback
// reports.
type ParentCounts struct {
	// Completed counts the parents that succeeded (or were deleted).
	Completed int64
	// Dead and Cancelled count the parents that ended so, whether their
	// rows are still in the dead table or were purged since.
	Dead      int64
	Cancelled int64
	// Live counts the parents that have not ended (none for a step that
	// runs, unless a parent was retried meanwhile).
	Live int64
}

// CountParents counts how the parents of the workflow step with the given
// id ended, in one statement however many there are.
func CountParents(ctx context.Context, dbtx DBTX, id int64) (ParentCounts, error) {
	r, err := db.New(dbtx).WorkflowParentCounts(ctx, id)
	if err != nil {
		return ParentCounts{}, fmt.Errorf("count parents of job %d: %w", id, migrated.Explain(err, dbtx))
	}
	return ParentCounts{Completed: r.Completed, Dead: r.Dead, Cancelled: r.Cancelled, Live: r.Live}, nil
}
