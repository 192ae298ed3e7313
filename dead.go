package hopper

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
)

// DeadFilter chooses dead and cancelled jobs for RetryDeadJobs and PurgeDeadJobs.
// Set filters combine (all must match).
type DeadFilter struct {
	// IDs keeps these jobs only.
	IDs []int64
	// Kind and Queue keep the jobs of that kind or queue.
	Kind  string
	Queue string
	// DiedBefore keeps the jobs that died (or were cancelled) before it.
	DiedBefore time.Time
	// States says which: jobs.StateDead, jobs.StateCancelled or both.
	// Default: dead ones only.
	States []jobs.State
	// All must be set for a filter with none of the above: a guard against
	// retrying or purging every dead job by accident.
	All bool
}

// deadBatch bounds one RetryDeadJobs or PurgeDeadJobs statement.
const deadBatch = 1000

func (f DeadFilter) params() (db.RetryDeadParams, error) {
	p := db.RetryDeadParams{Ids: f.IDs, MaxJobs: deadBatch}
	if p.Ids == nil {
		p.Ids = []int64{}
	}
	for _, s := range f.States {
		if s != jobs.StateDead && s != jobs.StateCancelled {
			return p, fmt.Errorf("%w: state %q: dead-job operations take dead and cancelled jobs", ErrInvalidFilter, s)
		}
		p.States = append(p.States, string(s))
	}
	if len(p.States) == 0 {
		p.States = []string{string(jobs.StateDead)}
	}
	if len(f.IDs) == 0 && f.Kind == "" && f.Queue == "" && f.DiedBefore.IsZero() && !f.All {
		return p, fmt.Errorf("%w: no ids, kind, queue or time given: set All to mean every one", ErrInvalidFilter)
	}
	p.Kind, p.Queue, p.DiedBefore = optional(f.Kind), optional(f.Queue), optionalTime(f.DiedBefore)
	return p, nil
}

// RetryResult tells what RetryDeadJobs did.
type RetryResult struct {
	// Retried holds the ids of the jobs now live again, ready to run.
	Retried []int64
	// Kept holds the ids of matching jobs left dead because a live job
	// holds their unique key again.
	Kept []int64
}

// RetryDeadJobs makes dead (and, when the filter says so, cancelled) jobs
// live again under their own ids, ready now, with their error history and
// as many attempts again as they had. It works in batches of 1000; on the
// pool each batch commits on its own, so an error leaves the earlier
// batches retried (the result says which).
func (c *Client) RetryDeadJobs(ctx context.Context, f DeadFilter) (RetryResult, error) {
	return c.RetryDeadJobsTx(ctx, c.db, f)
}

// RetryDeadJobsTx is RetryDeadJobs on the caller's transaction: all or nothing.
func (c *Client) RetryDeadJobsTx(ctx context.Context, tx jobs.DBTX, f DeadFilter) (RetryResult, error) {
	res := RetryResult{Retried: []int64{}, Kept: []int64{}}
	p, err := f.params()
	if err != nil {
		return res, fmt.Errorf("retry dead jobs: %w", err)
	}
	for {
		picked, err := c.queries(tx).RetryDead(ctx, p)
		if err != nil {
			return res, fmt.Errorf("retry dead jobs: %w", err)
		}
		for _, r := range picked {
			if r.Retried {
				res.Retried = append(res.Retried, r.ID)
			} else {
				res.Kept = append(res.Kept, r.ID)
			}
		}
		// A page may pick fewer than MaxJobs (rows another transaction
		// holds are left to it): only an empty one ends the walk.
		if len(picked) == 0 {
			return res, nil
		}
		p.AfterID = picked[len(picked)-1].ID
	}
}

// PurgeDeadJobs deletes dead (and, when the filter says so, cancelled) jobs
// for good and returns how many. It works in batches of 1000, each
// committing on its own on the pool.
func (c *Client) PurgeDeadJobs(ctx context.Context, f DeadFilter) (int64, error) {
	return c.PurgeDeadJobsTx(ctx, c.db, f)
}

// PurgeDeadJobsTx is PurgeDeadJobs on the caller's transaction.
func (c *Client) PurgeDeadJobsTx(ctx context.Context, tx jobs.DBTX, f DeadFilter) (int64, error) {
	p, err := f.params()
	if err != nil {
		return 0, fmt.Errorf("purge dead jobs: %w", err)
	}
	var n int64
	for {
		ids, err := c.queries(tx).PurgeDead(ctx, db.PurgeDeadParams(p))
		n += int64(len(ids))
		if err != nil {
			return n, fmt.Errorf("purge dead jobs: %w", err)
		}
		if len(ids) < int(p.MaxJobs) {
			return n, nil
		}
		p.AfterID = slices.Max(ids) // RETURNING keeps no order
	}
}
