package hopper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
)

// WorkerInfo is one worker in the registry: a running worker.Worker, or
// one gone without a clean stop (killed, cut off from the database,
// stalled) whose row is kept for a day.
type WorkerInfo struct {
	// ID is the worker's worker.Config.ID.
	ID   string
	Host string
	PID  int
	// Version is the Hopper module version it was built with ("v1.2.0"),
	// "devel" and a commit for a build of Hopper's own tree, "devel
	// unstamped" when that build recorded no commit; "" when unknown.
	Version string
	// Queues are the queues it claims from; none for a worker that only
	// fires schedules.
	Queues    []string
	StartedAt time.Time
	// LastBeat is its last beat, by the database's clock.
	LastBeat time.Time
	// StaleAfter is how long after LastBeat it is taken to be gone: three
	// of its beats (worker.Config.BeatInterval).
	StaleAfter time.Duration
	// Gone reports that it missed its beats: any live worker hands its
	// jobs back (ReleasedAt says when one did).
	Gone bool
	// ReleasedAt is when its jobs were last handed back while it was gone;
	// nil if never.
	ReleasedAt *time.Time
	// JobsHeld is how many jobs it holds now.
	JobsHeld int
	// SinceBeat is how long ago LastBeat was, when the list was read.
	SinceBeat time.Duration
}

// ListWorkers lists the workers in the registry, live and gone, by ID, with
// the jobs each holds. It reads the registry and the running jobs, not the
// waiting ones: cheap whatever the backlog.
func (c *Client) ListWorkers(ctx context.Context) ([]WorkerInfo, error) {
	return c.ListWorkersTx(ctx, c.db)
}

// ListWorkersTx is ListWorkers on the caller's transaction.
func (c *Client) ListWorkersTx(ctx context.Context, tx jobs.DBTX) ([]WorkerInfo, error) {
	rows, err := c.queries(tx).ListWorkers(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	out := make([]WorkerInfo, len(rows))
	for i, r := range rows {
		out[i] = workerInfo(r)
	}
	return out, nil
}

func workerInfo(r db.ListWorkersRow) WorkerInfo {
	return WorkerInfo{
		ID: r.ID, Host: r.Host, PID: int(r.Pid), Version: r.HopperVersion, Queues: r.Queues,
		StartedAt: r.StartedAt, LastBeat: r.LastSeenAt, StaleAfter: time.Duration(r.StaleAfterMs) * time.Millisecond,
		Gone: r.Gone, ReleasedAt: r.ReleasedAt, JobsHeld: int(r.JobsHeld), SinceBeat: r.ReadAt.Sub(r.LastSeenAt),
	}
}

// ReleaseOptions says how ReleaseWorkerJobs treats a worker that still
// beats.
type ReleaseOptions struct {
	// Force hands back the jobs of a worker that still beats. Its handlers
	// keep running until its next lease check cancels them, and their
	// results are refused: the jobs run again elsewhere, so each may run
	// twice at once. For a worker known to be dead (its node lost) whose
	// row has not yet gone stale.
	Force bool
}

// ReleaseResult tells what ReleaseWorkerJobs did.
type ReleaseResult struct {
	// Requeued are the jobs made ready again, Dead those that were on their
	// last attempt.
	Requeued, Dead []int64
}

// releaseBatch bounds one ReleaseWorkerJobs statement.
const releaseBatch = 1000

// releaseReason is what a released job's history records.
const releaseReason = "released by an operator"

// ReleaseWorkerJobs hands back every job the worker id holds: the operator's
// side of a crash (live workers do it by themselves once a worker misses
// three beats). Each job's attempt is charged, as for an expired lease, and
// fenced: the worker can no longer acknowledge it. Jobs with attempts left
// are ready at once and their queues' workers woken; the others go dead.
// It returns ErrUnknownWorker for an id not in the registry, and
// ErrWorkerAlive for a worker that still beats unless opts.Force is set.
// It works in batches of 1000, each committing on its own on the pool.
func (c *Client) ReleaseWorkerJobs(ctx context.Context, id string, opts ReleaseOptions) (ReleaseResult, error) {
	return c.ReleaseWorkerJobsTx(ctx, c.db, id, opts)
}

// ReleaseWorkerJobsTx is ReleaseWorkerJobs on the caller's transaction: all
// or nothing, and workers are woken when it commits.
func (c *Client) ReleaseWorkerJobsTx(ctx context.Context, tx jobs.DBTX, id string, opts ReleaseOptions) (ReleaseResult, error) {
	res := ReleaseResult{Requeued: []int64{}, Dead: []int64{}}
	if id == "" {
		return res, errors.New("release worker jobs: empty worker id")
	}
	q := c.queries(tx)
	rows, err := q.ListWorkers(ctx, &id)
	if err != nil {
		return res, fmt.Errorf("release jobs of worker %s: %w", id, err)
	}
	if len(rows) == 0 {
		return res, fmt.Errorf("release jobs of worker %s: %w", id, ErrUnknownWorker)
	}
	if w := workerInfo(rows[0]); !w.Gone && !opts.Force {
		return res, fmt.Errorf("release jobs of worker %s: %w (last beat %v ago on host %s, pid %d; force to release anyway)",
			id, ErrWorkerAlive, w.SinceBeat.Round(time.Millisecond), w.Host, w.PID)
	}
	for {
		// Force as asked: a worker that beat again since the check above
		// keeps its jobs unless forced.
		batch, err := q.ReleaseWorkerJobs(ctx, db.ReleaseWorkerJobsParams{
			WorkerID: &id, Force: opts.Force, Reason: releaseReason, MaxJobs: releaseBatch})
		if err != nil {
			return res, fmt.Errorf("release jobs of worker %s: %w", id, err)
		}
		var wake db.NotifyParams
		for _, r := range batch {
			if r.Dead {
				res.Dead = append(res.Dead, r.ID)
				continue
			}
			res.Requeued = append(res.Requeued, r.ID)
			wake.Queues, wake.Priorities = append(wake.Queues, r.Queue), append(wake.Priorities, r.Priority)
			wake.RunAts, wake.Ids = append(wake.RunAts, r.RunAt), append(wake.Ids, r.ID)
		}
		if len(wake.Ids) > 0 {
			if err := q.Notify(ctx, wake); err != nil {
				return res, fmt.Errorf("release jobs of worker %s: wake its queues: %w", id, err)
			}
		}
		if len(batch) < releaseBatch {
			return res, nil
		}
	}
}
