package hopper

import (
	"context"
	"fmt"

	"github.com/hopperq/hopper/jobs"
)

// CancelResult tells what Cancel did with one job.
type CancelResult struct {
	ID int64
	// Was is the job's state when Cancel found it: pending, scheduled or
	// running for a job it cancelled; completed, dead or cancelled for one
	// that had finished; "" when there is no such job.
	Was jobs.State
	// Err is nil when the job was cancelled, or wraps ErrFinished or
	// ErrNotFound.
	Err error
}

// CancelJobs cancels jobs, whatever their live state. A cancelled job moves
// to the dead table as cancelled (never dropped: RetryDeadJobs brings it
// back). A running job's worker is told at once and cancels the handler's
// context with the cause worker.ErrCancelled (a worker without LISTEN
// learns it at its next lease extension); whatever the handler returns after
// that is refused, since the job is no longer its. One result per distinct
// id, in id order; the error is for the statement as a whole.
func (c *Client) CancelJobs(ctx context.Context, ids ...int64) ([]CancelResult, error) {
	return c.CancelJobsTx(ctx, c.db, ids...)
}

// CancelJobsTx is CancelJobs on the caller's transaction: the jobs are cancelled,
// and running ones' workers told, when it commits.
func (c *Client) CancelJobsTx(ctx context.Context, tx jobs.DBTX, ids ...int64) ([]CancelResult, error) {
	if len(ids) == 0 {
		return []CancelResult{}, nil
	}
	found, err := c.queries(tx).Cancel(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("cancel: %w", err)
	}
	out := make([]CancelResult, len(found))
	for i, r := range found {
		res := CancelResult{ID: r.ID, Was: jobs.State(r.State)}
		switch {
		case r.Cancelled:
		case r.State == "":
			res.Err = fmt.Errorf("cancel job %d: %w", r.ID, ErrNotFound)
		default:
			res.Err = fmt.Errorf("cancel job %d: %w: it is %s", r.ID, ErrFinished, r.State)
		}
		out[i] = res
	}
	return out, nil
}

// CancelJob cancels one job, as Cancel does. The error wraps ErrNotFound
// or ErrFinished when there was nothing to cancel.
func (c *Client) CancelJob(ctx context.Context, id int64) error {
	return c.CancelJobTx(ctx, c.db, id)
}

// CancelJobTx is CancelJob on the caller's transaction.
func (c *Client) CancelJobTx(ctx context.Context, tx jobs.DBTX, id int64) error {
	res, err := c.CancelJobsTx(ctx, tx, id)
	if err != nil {
		return err
	}
	return res[0].Err
}
