package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hopperq/hopper/db"
)

// The reasons recorded in a job's errors when its worker's jobs are handed
// back before its lease expired: the attempt counts, as for an expired
// lease (the handler ran, and may have crashed its worker).
const (
	reasonWorkerGone      = "worker gone"
	reasonWorkerRestarted = "worker restarted"
)

// releaser hands back the jobs of workers gone without a clean stop: on
// the heartbeat's word that such a worker exists (releaseGone), and at
// start, the jobs of an earlier run of this worker's own ID.
type releaser struct {
	q        *db.Queries
	log      *slog.Logger
	metrics  *metrics
	batch    int // Config.SweepBatch
	announce announceFunc
}

func newReleaser(q *db.Queries, log *slog.Logger, m *metrics, cfg *Config, announce announceFunc) *releaser {
	return &releaser{q: q, log: log, metrics: m, batch: cfg.SweepBatch, announce: announce}
}

// releaseGone hands back the jobs of every worker gone (no beat within its
// stale window) and not yet released, whose stale window this worker has
// been live for (liveFor): the heartbeat runs it when its beat says such a
// worker exists. Any live worker may; the workers' rows are locked SKIP
// LOCKED, so each gone worker is released by one of them.
func (m *releaser) releaseGone(ctx context.Context, liveFor time.Duration) {
	ms := liveFor.Milliseconds()
	gone, err := m.releaseJobsOf(ctx, db.ReleaseWorkerJobsParams{LiveForMs: &ms, Reason: reasonWorkerGone})
	if err != nil && ctx.Err() == nil {
		m.log.Warn("handing back the jobs of gone workers failed; retrying at the next beat", "error", err)
	}
	for _, g := range gone {
		m.log.Warn("handed back the jobs of a gone worker", "gone_worker", g.id, "gone_host", g.host, "gone_pid", g.pid,
			"jobs", g.requeued+g.dead, "requeued", g.requeued, "dead", g.dead)
	}
}

// goneWorker tallies the jobs handed back of one gone worker.
type goneWorker struct {
	id, host       string
	pid            int32
	requeued, dead int
}

// releaseJobsOf hands back, in bounded batches, the running jobs of the
// worker p.WorkerID (nil: of every gone worker not yet released whose
// stale window p.LiveForMs covers), whatever its state when p.Force is
// set, recording p.Reason; it wakes their queues. p.HolderStartedAt names
// this worker's own row, which is not marked released. It returns, for
// each worker whose jobs it handed back, in the order met, how many.
func (m *releaser) releaseJobsOf(ctx context.Context, p db.ReleaseWorkerJobsParams) ([]*goneWorker, error) {
	p.MaxJobs = int32(m.batch)
	var gone []*goneWorker
	byID := map[string]*goneWorker{}
	for {
		rows, err := m.q.ReleaseWorkerJobs(ctx, p)
		if err != nil {
			return gone, fmt.Errorf("worker: hand back the jobs of gone workers: %w", err)
		}
		var wk wakeups
		for _, r := range rows {
			g := byID[r.Owner]
			if g == nil {
				g = &goneWorker{id: r.Owner, host: r.OwnerHost, pid: r.OwnerPid}
				byID[r.Owner] = g
				gone = append(gone, g)
			}
			if r.Dead {
				g.dead++
				m.metrics.outcome(r.Queue, "", OutcomeDead)
			} else {
				g.requeued++
			}
			m.metrics.released(r.Queue, p.Reason)
			wk.add(r.Queue, r.Priority, r.RunAt, r.ID)
		}
		m.announce(ctx, &wk, "release")
		if len(rows) < m.batch {
			return gone, nil
		}
	}
}
