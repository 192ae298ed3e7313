package producer

import (
	"context"
	"fmt"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/worker/commitfate"
)

// A claim is one statement (or, under flow control, a batch or a
// transaction with the queue's claim lock) that commits as it ends. When
// the connection breaks after COMMIT reached the server and before its
// answer came back, or when Citus reports that a worker node's commit
// failed ("could not commit transaction for shard"), the claim's outcome
// is unknown: it may have taken jobs, leased to this worker for a whole
// lease, that no handler runs. Left alone, they would run only once their
// leases ran out and a sweep took them back, charged an attempt they never
// ran. So the producer notes the moment such a claim was sent (failed)
// and, before its next claim, finds the queue's running jobs leased to
// this worker since then that it does not hold, and runs them at once, as
// if the claim had answered (takeOrphans). Nothing is written: the claim
// that took them did all the writing, and a read goes through wherever
// the claim did (Citus's coordinator included).
//
// The search is exact because only this producer claims the queue's jobs
// for this worker, and it does not claim while it searches: a running job
// of the queue leased to this worker that the worker did not hold when the
// search began was taken by a claim whose answer never came, or was let go
// by the worker itself (an abandoned handler, a result refused in every
// form), whose lease is no longer extended and so ends before the bound
// (OrphanClaims) unless it was let go within orphanMargin of that claim.
// The worker's held claims are read before the rows, so a claim retired
// meanwhile (its ack committed) is never taken for an orphan.

// orphanMargin is taken off the time since the unknown claim was sent, so
// that the bound on the orphans' leases stays before the claim's own now()
// whatever the network's delays.
const orphanMargin = time.Second

// failed notes a claim that failed: one whose commit's outcome is unknown
// has its jobs looked for before the next claim. It returns err, wrapped
// with commitfate.ErrUnknown then.
func (p *Producer) failed(err error, sent time.Time) error {
	if !commitfate.Unknown(err) {
		return err
	}
	if p.unknownSince.IsZero() || sent.Before(p.unknownSince) {
		p.unknownSince = sent
	}
	return fmt.Errorf("claim jobs of queue %s: %w: %w", p.cfg.Name, commitfate.ErrUnknown, err)
}

// takeOrphans hands on (Config.Hand), each with a slot, up to n jobs that
// claims whose commit's outcome was unknown took for this worker, and
// reports how many. A search that failed for a reason that passes (the
// database out of reach) is tried again before the next claim, which waits
// for it; one the server refuses is given up: the jobs then run once their
// leases expire, as before.
func (p *Producer) takeOrphans(ctx context.Context, n int) (int, error) {
	held := p.cfg.Held() // before the rows: see above
	since := time.Since(p.unknownSince) + orphanMargin
	rows, err := p.cfg.Queries.OrphanClaims(ctx, db.OrphanClaimsParams{
		LeaseAfterMs: (p.cfg.Lease - since).Milliseconds(),
		Queue:        p.cfg.Name,
		Owner:        p.cfg.Owner,
	})
	if err != nil {
		err = fmt.Errorf("find the jobs of queue %s a claim with no answer took: %w", p.cfg.Name, err)
		if commitfate.Refused(err) && ctx.Err() == nil {
			p.cfg.Log.Error("the search for jobs a claim with no answer took was refused: they run once their leases expire",
				"queue", p.cfg.Name, "error", err)
			p.unknownSince = time.Time{}
			return 0, nil
		}
		return 0, err
	}
	sent := p.unknownSince
	p.unknownSince = time.Time{}
	orphans := rows[:0]
	for _, r := range rows {
		if !held(r.ID, r.Attempt) {
			orphans = append(orphans, r)
		}
	}
	if len(orphans) == 0 {
		return 0, nil
	}
	if len(orphans) > n {
		// More than the free slots: some were let go by the worker
		// (above); the rest wait for their leases.
		p.cfg.Log.Warn("more jobs found running for this worker than it has free slots: the rest run once their leases expire",
			"queue", p.cfg.Name, "found", len(orphans), "slots", n)
		orphans = orphans[:n]
	}
	p.cfg.Log.Warn("a claim's commit had an unknown outcome: running at once the jobs it took",
		"queue", p.cfg.Name, "jobs", len(orphans))
	p.hand(orphans, sent, time.Now())
	return len(orphans), nil
}
