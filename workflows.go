package hopper

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
)

// WorkflowStep is one step of a workflow as it stands (jobs.Workflow
// enqueues them).
type WorkflowStep struct {
	ID    int64
	Step  string
	Queue string
	Kind  string
	// State is the step's: waiting (for its parents), pending, scheduled,
	// running, completed (kept in the history: see the worker's
	// KeepWorkflowSteps), dead or cancelled.
	State jobs.State
	// Policy is what the step does when a parent fails.
	Policy jobs.WorkflowPolicy
	// Parents are the ids of the steps it runs after, in id order.
	Parents     []int64
	Attempt     int
	MaxAttempts int
	RunAt       time.Time
	CreatedAt   time.Time
	// FinishedAt is when it completed or died (zero while it is live);
	// Reason why it died or was cancelled.
	FinishedAt time.Time
	Reason     string
}

// maxWorkflowPage is how many steps one statement of ListWorkflow reads.
const maxWorkflowPage = 1000

// ListWorkflow lists a workflow's steps in id order (parents before their
// children), live, dead and kept. ErrNotFound when no step of it is known.
func (c *Client) ListWorkflow(ctx context.Context, id string) ([]WorkflowStep, error) {
	return c.ListWorkflowTx(ctx, c.db, id)
}

// ListWorkflowTx is ListWorkflow on the caller's transaction.
func (c *Client) ListWorkflowTx(ctx context.Context, tx jobs.DBTX, id string) ([]WorkflowStep, error) {
	var out []WorkflowStep
	after := int64(0)
	for {
		rows, err := c.queries(tx).ListWorkflowSteps(ctx, db.ListWorkflowStepsParams{Workflow: id, AfterID: after, MaxSteps: maxWorkflowPage})
		if err != nil {
			return nil, fmt.Errorf("list workflow %q: %w", id, err)
		}
		for _, r := range rows {
			s := WorkflowStep{
				ID: r.ID, Step: r.Step, Queue: r.Queue, Kind: r.Kind, State: jobs.State(r.State),
				Policy: jobs.WorkflowPolicy(r.Policy), Parents: r.Parents,
				Attempt: int(r.Attempt), MaxAttempts: int(r.MaxAttempts), RunAt: r.RunAt, CreatedAt: r.CreatedAt,
			}
			if r.FinishedAt != nil {
				s.FinishedAt = *r.FinishedAt
			}
			if r.Reason != nil {
				s.Reason = *r.Reason
			}
			if s.Parents == nil {
				s.Parents = []int64{}
			}
			out = append(out, s)
			after = r.ID
		}
		if len(rows) < maxWorkflowPage {
			break
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("list workflow %q: %w", id, ErrNotFound)
	}
	return out, nil
}

// CancelWorkflow cancels every live step of a workflow (waiting, pending,
// scheduled or running: a running step's worker is told, as CancelJobs
// does) and returns their ids. Finished steps stay as they are.
func (c *Client) CancelWorkflow(ctx context.Context, id string) ([]int64, error) {
	return c.CancelWorkflowTx(ctx, c.db, id)
}

// CancelWorkflowTx is CancelWorkflow on the caller's transaction.
//
// A handler may add steps to the workflow while it is being cancelled
// (AfterJobs, in its own transaction): a step committed between the list
// of live steps and their cancel would survive it. So the list is read
// again after each cancel, and the new steps in it are cancelled too,
// until a list brings none (each statement sees what committed before
// it, under READ COMMITTED).
func (c *Client) CancelWorkflowTx(ctx context.Context, tx jobs.DBTX, id string) ([]int64, error) {
	out := []int64{}
	tried := map[int64]bool{}
	for round := 0; ; round++ {
		live, err := c.queries(tx).LiveWorkflowSteps(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("cancel workflow %q: %w", id, err)
		}
		var ids []int64
		for _, step := range live {
			if !tried[step] {
				tried[step] = true
				ids = append(ids, step)
			}
		}
		if len(ids) == 0 {
			slices.Sort(out)
			return out, nil
		}
		if round == maxCancelRounds {
			return nil, fmt.Errorf("cancel workflow %q: steps were still being added after %d rounds", id, round)
		}
		res, err := c.CancelJobsTx(ctx, tx, ids...)
		if err != nil {
			return nil, fmt.Errorf("cancel workflow %q: %w", id, err)
		}
		for _, r := range res {
			if r.Err == nil {
				out = append(out, r.ID)
			}
		}
	}
}

// maxCancelRounds bounds CancelWorkflow's rounds: a workflow whose
// handlers add steps faster than they are cancelled is an error, not a
// loop without end.
const maxCancelRounds = 100

// RetryWorkflow brings every dead or cancelled step of a workflow back,
// under its own id and with as many attempts again as it had: each runs
// once its parents still live have succeeded, at once when none is left.
// It returns their ids (none when nothing had failed).
func (c *Client) RetryWorkflow(ctx context.Context, id string) ([]int64, error) {
	return c.RetryWorkflowTx(ctx, c.db, id)
}

// RetryWorkflowTx is RetryWorkflow on the caller's transaction.
func (c *Client) RetryWorkflowTx(ctx context.Context, tx jobs.DBTX, id string) ([]int64, error) {
	ids, err := c.queries(tx).RetryWorkflow(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("retry workflow %q: %w", id, err)
	}
	if ids == nil {
		ids = []int64{}
	}
	return ids, nil
}

// WorkflowSummary is a workflow with live steps, as ListWorkflows shows
// it.
type WorkflowSummary struct {
	ID string
	// Waiting, Ready (pending or scheduled) and Running count its live
	// steps.
	Waiting, Ready, Running int64
	// Oldest is when its oldest live step was enqueued.
	Oldest time.Time
}

// WorkflowPage asks ListWorkflows for a page.
type WorkflowPage struct {
	// After is the last id of the previous page ("" for the first).
	After string
	// Limit is the page's size: 1 to 1000, default 100.
	Limit int
}

// ListWorkflows lists the workflows that have live steps, in id order
// (bytewise), with how many of their steps wait, are ready and run. A
// workflow whose steps have all ended is no longer listed; ListWorkflow
// still shows it while its steps are kept.
func (c *Client) ListWorkflows(ctx context.Context, page WorkflowPage) ([]WorkflowSummary, error) {
	return c.ListWorkflowsTx(ctx, c.db, page)
}

// ListWorkflowsTx is ListWorkflows on the caller's transaction.
func (c *Client) ListWorkflowsTx(ctx context.Context, tx jobs.DBTX, page WorkflowPage) ([]WorkflowSummary, error) {
	limit, err := pageLimit(page.Limit)
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	rows, err := c.queries(tx).ListLiveWorkflows(ctx, db.ListLiveWorkflowsParams{AfterID: page.After, MaxWorkflows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	out := make([]WorkflowSummary, len(rows))
	for i, r := range rows {
		out[i] = WorkflowSummary{ID: r.Workflow, Waiting: r.Waiting, Ready: r.Ready, Running: r.Running, Oldest: r.Oldest}
	}
	return out, nil
}

// pageLimit is the size of a page of keys (blocked sequences, workflows):
// 1 to 1000, 0 meaning the default of 100.
func pageLimit(limit int) (int, error) {
	switch {
	case limit == 0:
		return 100, nil
	case limit < 1 || limit > 1000:
		return 0, fmt.Errorf("%w: limit %d is outside 1 to 1000", ErrInvalidFilter, limit)
	}
	return limit, nil
}
