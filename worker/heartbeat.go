package worker

import (
	"context"
	"time"

	"github.com/hopperq/hopper/db"
)

// extendBatch bounds one Extend statement.
const extendBatch = 5000

// heartbeat refreshes this worker's row in hopper_workers, extends the
// leases of every claim it holds, and abandons handlers that outlived their
// hard deadline. A claim the database no longer has for us is lost: its
// handler is cancelled. With HeartbeatInterval negative (tests of lease
// expiry) it only refreshes the row, every beatInterval.
func (w *Worker) heartbeat(ctx context.Context) {
	t := time.NewTicker(w.beatInterval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// First, and bounded (beatTimeout): one row, so that the
		// worker's liveness does not wait on a large extension.
		w.beatWorker(ctx)
		if w.cfg.HeartbeatInterval <= 0 {
			continue
		}
		w.abandonStuck(time.Now())
		held := w.held.snapshot()
		for start := 0; start < len(held); start += extendBatch {
			chunk := held[start:min(start+extendBatch, len(held))]
			if _, err := w.extend(ctx, chunk, w.cfg.LeaseDuration); err != nil {
				if ctx.Err() == nil {
					w.log.Warn("heartbeat failed; retrying at the next beat", "error", err)
				}
				break
			}
		}
		w.beats.Add(1)
	}
}

// abandonStuck gives up on handlers still running past their deadline:
// their timeout plus AbandonAfter, or AbandonAfter after they were told to
// stop (lease lost, job cancelled). They ignore their cancelled context.
// A held job is no longer extended (it runs again elsewhere after the
// lease); every such handler's slot goes back to the queue.
func (w *Worker) abandonStuck(now time.Time) {
	for _, c := range w.executor.inFlight.snapshot() {
		due, ranFor := c.overdue(now)
		if !due {
			continue
		}
		attrs := []any{"job_id", c.id, "kind", c.kind, "queue", c.queue.name, "attempt", c.attempt, "running_for", ranFor.Round(time.Millisecond)}
		switch {
		case c.abandon():
			w.log.Error("handler ignores its cancelled context past its timeout: abandoned; its job runs again after the lease expires", attrs...)
		case c.giveUp():
			w.log.Error("handler ignores its cancelled context after its job was taken from it: abandoned, its slot freed", attrs...)
		}
	}
}

// extend pushes the leases of claims forward (never back) and marks those
// the database no longer holds for us as lost. It returns how many it
// extended; a claim whose row another transaction has locked is skipped
// this time (see queries/lease.sql).
func (w *Worker) extend(ctx context.Context, claims []*heldJob, lease time.Duration) (int, error) {
	p := db.ExtendParams{LeaseMs: lease.Milliseconds(), Ids: make([]int64, len(claims)), Attempts: make([]int32, len(claims))}
	for i, c := range claims {
		p.Ids[i], p.Attempts[i] = c.id, c.attempt
	}
	ectx, cancel := context.WithTimeout(ctx, w.cfg.LeaseDuration/2)
	defer cancel()
	sent := time.Now()
	rows, err := w.q.Extend(ectx, p)
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
		case c.ackedInTx.Load():
			// Gone after the handler's own AckTx: its transaction may
			// have committed, or an operator cancelled the job. The
			// handler is not cancelled; its result settles which, from
			// the transaction's status (settleAckedInTx).
		case c.is(claimRunning):
			// Only a running handler loses its job: a finished claim
			// missing from the answer was acked meanwhile, and its
			// completion settles which.
			gone = append(gone, c)
		}
	}
	w.settleGone(ctx, gone)
	return extended, nil
}

// settleGone cancels the handlers of running claims the database no longer
// holds for this worker: with ErrCancelled when an operator cancelled the
// job (a worker that missed the notification, or has none: PollOnly),
// with ErrLeaseLost otherwise (swept, claimed again).
func (w *Worker) settleGone(ctx context.Context, gone []*heldJob) {
	if len(gone) == 0 {
		return
	}
	cancelled := map[heldKey]bool{}
	p := db.ClaimFatesParams{Ids: make([]int64, len(gone)), Attempts: make([]int32, len(gone))}
	for i, c := range gone {
		p.Ids[i], p.Attempts[i] = c.id, c.attempt
	}
	fctx, cancel := context.WithTimeout(ctx, w.cfg.LeaseDuration/2)
	fates, err := w.q.ClaimFates(fctx, p)
	cancel()
	if err != nil && ctx.Err() == nil {
		w.log.Warn("reading what became of lost jobs failed; taking them as lost leases", "jobs", len(gone), "error", err)
	}
	for _, f := range fates {
		// An operator's cancel moves the job to the dead table under the
		// same attempt, with no entry for it (a sweep would add one).
		if cancelledByOperator(f) {
			cancelled[heldKey{f.ID, f.Attempt}] = true
		}
	}
	for _, c := range gone {
		switch {
		case cancelled[heldKey{c.id, c.attempt}]:
			if c.cancelled() {
				w.log.Info("job cancelled while it ran: cancelling the handler", "job_id", c.id, "kind", c.kind, "attempt", c.attempt)
			}
		case c.lose():
			w.log.Warn("lease lost: cancelling the handler", "job_id", c.id, "kind", c.kind, "attempt", c.attempt)
		}
	}
}

// cancelNotice handles an operator's cancel of a running job, announced
// by the Cancel statement: the claim it names, if this worker holds it,
// has its handler cancelled.
func (w *Worker) cancelNotice(id int64, attempt int32) {
	if c := w.held.get(id, attempt); c != nil && c.cancelled() {
		w.log.Info("job cancelled while it ran: cancelling the handler", "job_id", c.id, "kind", c.kind, "attempt", c.attempt)
	}
}
