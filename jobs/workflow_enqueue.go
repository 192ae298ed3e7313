package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/migrated"
)

// WorkflowResult tells what EnqueueWorkflow did.
type WorkflowResult struct {
	// ID is the workflow's id.
	ID string
	// Steps maps each step's name to its job's id.
	Steps map[string]int64
	// Waiting counts the steps enqueued waiting for parents.
	Waiting int
}

// EnqueueWorkflow checks a workflow and inserts its steps, all or none:
// the steps without parents ready (or scheduled), the others waiting for
// their parents, with the edges between them, in one transaction (a
// savepoint inside the caller's when dbtx is one). Enqueued from a
// handler's transaction with AfterJobs, the new steps join a running
// workflow. A mistake in the workflow (ErrInvalidWorkflow: an unknown
// parent, a cycle, an empty or repeated name, too many steps) or in a
// step's entry is reported before anything is written, and names the
// step. A step cannot have a unique key or a sequence key: the step's turn
// comes from its parents.
func EnqueueWorkflow(ctx context.Context, dbtx DBTX, w *Workflow) (WorkflowResult, error) {
	// Before prepare, whose hooks may write: nothing is written on a
	// schema older than this build.
	err := migrated.Ensure(ctx, dbtx)
	var p preparedWorkflow
	if err == nil {
		p, err = w.prepare(ctx, dbtx)
	}
	if err == nil {
		var res []WorkflowResult
		if res, err = writeWorkflows(ctx, dbtx, []preparedWorkflow{p}); err == nil {
			return res[0], nil
		}
	}
	return WorkflowResult{}, fmt.Errorf("enqueue workflow %q: %w", w.id, err)
}

// EnqueueWorkflows enqueues many workflows at once, all or none: what
// EnqueueWorkflow does for one, in two statements for all of them (one
// insert of every step, one call that records every edge), so that many
// small workflows (an order's three steps, a diamond) cost a fraction of
// a call each. Every workflow is checked as EnqueueWorkflow checks it
// before anything is written; the first mistake is reported with the
// workflow's id and position. Two workflows of one call cannot share an
// id, and one call adds at most MaxWorkflowSteps steps in all. The
// results are in the order of ws.
func EnqueueWorkflows(ctx context.Context, dbtx DBTX, ws []*Workflow) ([]WorkflowResult, error) {
	if err := migrated.Ensure(ctx, dbtx); err != nil {
		return nil, fmt.Errorf("enqueue workflows: %w", err)
	}
	prepared := make([]preparedWorkflow, len(ws))
	ids := make(map[string]int, len(ws))
	steps := 0
	for i, w := range ws {
		if w == nil {
			return nil, fmt.Errorf("enqueue workflows: workflow %d of %d: %w: nil", i+1, len(ws), ErrInvalidWorkflow)
		}
		if j, dup := ids[w.id]; dup {
			return nil, fmt.Errorf("enqueue workflows: workflows %d and %d of %d: %w: both have the id %q",
				j+1, i+1, len(ws), ErrInvalidWorkflow, w.id)
		}
		ids[w.id] = i
		if steps += len(w.steps); steps > MaxWorkflowSteps {
			return nil, fmt.Errorf("enqueue workflows: %w: more than %d steps in one call (split the workflows over several)",
				ErrInvalidWorkflow, MaxWorkflowSteps)
		}
		p, err := w.prepare(ctx, dbtx)
		if err != nil {
			return nil, fmt.Errorf("enqueue workflows: workflow %q (%d of %d): %w", w.id, i+1, len(ws), err)
		}
		prepared[i] = p
	}
	if len(prepared) == 0 {
		return nil, nil
	}
	res, err := writeWorkflows(ctx, dbtx, prepared)
	if err != nil {
		return nil, fmt.Errorf("enqueue %d workflows: %w", len(ws), err)
	}
	return res, nil
}

// preparedWorkflow is a workflow checked whole, its hooks run and its
// steps stamped: entries holds its steps' entries with parents before
// children (order gives each one's index in w.steps).
type preparedWorkflow struct {
	w       *Workflow
	order   []int
	entries []Entry
}

// prepare checks w and makes its steps' entries, without writing.
func (w *Workflow) prepare(ctx context.Context, dbtx DBTX) (preparedWorkflow, error) {
	order, err := w.order()
	if err != nil {
		return preparedWorkflow{}, err
	}
	entries := make([]Entry, len(order))
	for k, i := range order {
		s := w.steps[i]
		e := s.entry
		if err := runHooks(ctx, dbtx, e.kind, e.version, e.plain, e.hooks, &e.o); err != nil {
			return preparedWorkflow{}, fmt.Errorf("step %q (%s): %w", s.name, e.kind, err)
		}
		if err := w.stamp(s, &e.o); err != nil {
			return preparedWorkflow{}, fmt.Errorf("step %q (%s): %w", s.name, e.kind, err)
		}
		entries[k] = e
	}
	return preparedWorkflow{w: w, order: order, entries: entries}, nil
}

// writeWorkflows inserts the steps of every workflow in one statement
// and records all their edges in one more, in one transaction.
func writeWorkflows(ctx context.Context, dbtx DBTX, ps []preparedWorkflow) ([]WorkflowResult, error) {
	var entries []Entry
	if len(ps) == 1 {
		entries = ps[0].entries
	} else {
		n := 0
		for _, p := range ps {
			n += len(p.entries)
		}
		entries = make([]Entry, 0, n)
		for _, p := range ps {
			entries = append(entries, p.entries...)
		}
	}
	results := make([]WorkflowResult, len(ps))
	err := inTxOn(ctx, dbtx, func(tx DBTX) error {
		inserted, err := insertPlain(ctx, tx, entries)
		if err != nil {
			return err
		}
		var parents, children []int64
		at := 0 // the first result of p
		for k, p := range ps {
			w := p.w
			ids := make([]int64, len(w.steps)) // by step
			res := WorkflowResult{ID: w.id, Steps: make(map[string]int64, len(w.steps))}
			for j, i := range p.order {
				ids[i] = inserted.Results[at+j].ID
				res.Steps[w.steps[i].name] = ids[i]
			}
			at += len(p.order)
			for i, s := range w.steps {
				for _, name := range s.after {
					parents, children = append(parents, ids[w.names[name]]), append(children, ids[i])
				}
				for _, id := range s.afterJobs {
					parents, children = append(parents, id), append(children, ids[i])
				}
				if len(s.after)+len(s.afterJobs) > 0 {
					res.Waiting++
				}
			}
			results[k] = res
		}
		if len(children) == 0 {
			return nil
		}
		_, err = db.New(tx).LinkWorkflow(ctx, db.LinkWorkflowParams{Parents: parents, Children: children})
		return err
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InvalidParameterValue && strings.HasPrefix(pgErr.Message, "hopper: unknown step") {
		// A parent given by id that is no step of this workflow, or is
		// gone (completed and not kept).
		return nil, fmt.Errorf("%w: %w", ErrInvalidWorkflow, err)
	}
	if err != nil {
		return nil, migrated.Explain(err, dbtx)
	}
	return results, nil
}
