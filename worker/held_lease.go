package worker

import (
	"context"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/worker/completer"
)

// extend pushes the leases of claims forward (never back) and marks those
// the database no longer holds for us as lost. It returns how many it
// extended; a claim whose row another transaction has locked is skipped
// this time (see queries/lease.sql).
func (h *heldJobs) extend(ctx context.Context, claims []*heldJob, lease time.Duration) (int, error) {
	return h.extendOn(ctx, h.q, claims, lease)
}

// extendOn is extend on q.
func (h *heldJobs) extendOn(ctx context.Context, q *db.Queries, claims []*heldJob, lease time.Duration) (int, error) {
	p := db.ExtendParams{LeaseMs: lease.Milliseconds(), Ids: make([]int64, len(claims)), Attempts: make([]int32, len(claims))}
	for i, c := range claims {
		p.Ids[i], p.Attempts[i] = c.id, c.attempt
	}
	ectx, cancel := context.WithTimeout(ctx, h.lease/2)
	defer cancel()
	sent := time.Now()
	rows, err := q.Extend(ectx, p)
	if err != nil {
		return 0, err
	}
	held := make(map[heldKey]bool, len(rows))
	for _, r := range rows {
		held[heldKey{r.ID, r.Attempt}] = r.Extended
	}
	extended := 0
	var gone []*heldJob
	for _, c := range claims {
		ext, ok := held[heldKey{c.id, c.attempt}]
		switch {
		case ext:
			c.leaseHeldUntil(sent, lease)
			extended++
		case ok: // locked by another transaction right now: next beat
		case c.txAck.Made():
			// Gone after the handler's own AckTx: its transaction may
			// have committed, or an operator cancelled the job. The
			// handler is not cancelled; its result settles which, from
			// the transaction's status (the completer's settleAckedInTx).
		case c.is(claimRunning):
			// Only a running handler loses its job: a finished claim
			// missing from the answer was acked meanwhile, and its
			// completion settles which.
			gone = append(gone, c)
		}
	}
	h.settleGone(ctx, gone)
	return extended, nil
}

// settleGone cancels the handlers of running claims the database no longer
// holds for this worker: with ErrCancelled when an operator cancelled the
// job (a worker that missed the notification, or has none: PollOnly),
// with ErrLeaseLost otherwise (swept, claimed again).
func (h *heldJobs) settleGone(ctx context.Context, gone []*heldJob) {
	if len(gone) == 0 {
		return
	}
	cancelled := map[heldKey]bool{}
	p := db.ClaimFatesParams{Ids: make([]int64, len(gone)), Attempts: make([]int32, len(gone))}
	for i, c := range gone {
		p.Ids[i], p.Attempts[i] = c.id, c.attempt
	}
	fctx, cancel := context.WithTimeout(ctx, h.lease/2)
	fates, err := h.q.ClaimFates(fctx, p)
	cancel()
	if err != nil && ctx.Err() == nil {
		h.log.Warn("reading what became of lost jobs failed; taking them as lost leases", "jobs", len(gone), "error", err)
	}
	for _, f := range fates {
		// An operator's cancel moves the job to the dead table under the
		// same attempt, with no entry for it (a sweep would add one).
		if completer.CancelledByOperator(f) {
			cancelled[heldKey{f.ID, f.Attempt}] = true
		}
	}
	for _, c := range gone {
		switch {
		case cancelled[heldKey{c.id, c.attempt}]:
			if c.cancelled() {
				h.log.Info("job cancelled while it ran: cancelling the handler", "job_id", c.id, "kind", c.kind, "attempt", c.attempt)
			}
		case c.lose():
			h.log.Warn("lease lost: cancelling the handler", "job_id", c.id, "kind", c.kind, "attempt", c.attempt)
		}
	}
}

// cancelNotice handles an operator's cancel of a running job, announced
// by the Cancel statement: the claim it names, if this worker holds it,
// has its handler cancelled.
func (h *heldJobs) cancelNotice(id int64, attempt int32) {
	if c := h.get(id, attempt); c != nil && c.cancelled() {
		h.log.Info("job cancelled while it ran: cancelling the handler", "job_id", c.id, "kind", c.kind, "attempt", c.attempt)
	}
}
