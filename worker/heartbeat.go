package worker

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/db"
)

// extendBatch bounds one Extend statement.
const extendBatch = 5000

// heartbeat says on every beat that this worker is alive (its row in
// hopper_workers), hands back the jobs of workers gone meanwhile, and on
// every ExtendInterval extends the leases of every claim it holds and
// abandons handlers that outlived their hard deadline. A claim the
// database no longer has for us is lost: its handler is cancelled. With
// ExtendInterval negative (tests of lease expiry) it only beats.
func (s *heldJobs) heartbeat(ctx context.Context) {
	tick := s.beatEvery
	if s.extendEvery > 0 {
		tick = min(tick, s.extendEvery)
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	var own ownConn
	defer own.release()
	// A duty is due when less than half a tick is left before its time.
	lastBeat, lastExtend := time.Now(), time.Now()
	due := func(last time.Time, every time.Duration) bool { return time.Since(last) >= every-tick/2 }
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		q := own.queries(ctx, s)
		var beat beatResult
		if due(lastBeat, s.beatEvery) {
			lastBeat = time.Now()
			// First, and bounded (beatTimeout): one row, so that the
			// worker's liveness does not wait on a large extension.
			beat = s.beatWorker(ctx, q)
			if beat.goneWaiting {
				s.releaseGone(ctx, beat.liveFor)
			}
		}
		// A worker taken to be gone checks its claims at once: their
		// handlers are cancelled, their results would be refused.
		if beat.released || s.extendEvery > 0 && due(lastExtend, s.extendEvery) {
			lastExtend = time.Now()
			s.abandonStuck(lastExtend)
			// With extension off, a released worker's check moves no lease
			// (an extension to now() leaves every live lease as it is).
			lease := s.lease
			if s.extendEvery <= 0 {
				lease = 0
			}
			s.extendAll(ctx, q, lease)
			s.beats.Add(1)
		}
		own.check()
	}
}

// ownConn is the heartbeat's own pool connection, held for the worker's
// life: a beat that waited for a connection behind busy handlers would
// make a live worker look gone, and its jobs run twice. Should it not be
// had or break, the heartbeat uses the pool until the next tick tries
// again.
type ownConn struct {
	conn *pgxpool.Conn
}

// queries runs on the heartbeat's connection, acquiring it if needed.
func (o *ownConn) queries(ctx context.Context, s *heldJobs) *db.Queries {
	if o.conn == nil && s.pool != nil {
		actx, cancel := context.WithTimeout(ctx, s.beatEvery)
		o.conn, _ = s.pool.Acquire(actx)
		cancel()
	}
	if o.conn == nil {
		return s.q
	}
	return db.New(s.dbtx(o.conn))
}

// check drops a connection that broke, for the next tick to replace.
func (o *ownConn) check() {
	if o.conn != nil && o.conn.Conn().IsClosed() {
		o.release()
	}
}

func (o *ownConn) release() {
	if o.conn != nil {
		o.conn.Release()
		o.conn = nil
	}
}

// extendAll extends the lease of every claim held to at least lease from
// now, in bounded batches, and settles the claims found lost.
func (s *heldJobs) extendAll(ctx context.Context, q *db.Queries, lease time.Duration) {
	held := s.snapshot()
	for start := 0; start < len(held); start += extendBatch {
		chunk := held[start:min(start+extendBatch, len(held))]
		if _, err := s.extendOn(ctx, q, chunk, lease); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("heartbeat failed; retrying at the next beat", "error", err)
			}
			return
		}
	}
}

// abandonStuck gives up on handlers still running past their deadline:
// their timeout plus AbandonAfter, or AbandonAfter after they were told to
// stop (lease lost, job cancelled). They ignore their cancelled context.
// A held job is no longer extended (it runs again elsewhere after the
// lease); every such handler's slot goes back to the queue.
func (s *heldJobs) abandonStuck(now time.Time) {
	for _, c := range s.inFlight.snapshot() {
		due, ranFor := c.overdue(now)
		if !due {
			continue
		}
		attrs := []any{"job_id", c.id, "kind", c.kind, "queue", c.queue.name, "attempt", c.attempt, "running_for", ranFor.Round(time.Millisecond)}
		switch {
		case c.abandon():
			s.log.Error("handler ignores its cancelled context past its timeout: abandoned; its job runs again after the lease expires", attrs...)
		case c.giveUp():
			s.log.Error("handler ignores its cancelled context after its job was taken from it: abandoned, its slot freed", attrs...)
		}
	}
}

// extend pushes the leases of claims forward (never back) and marks those
// the database no longer holds for us as lost. It returns how many it
// extended; a claim whose row another transaction has locked is skipped
// this time (see queries/lease.sql).
func (s *heldJobs) extend(ctx context.Context, claims []*heldJob, lease time.Duration) (int, error) {
	return s.extendOn(ctx, s.q, claims, lease)
}

// extendOn is extend on q.
func (s *heldJobs) extendOn(ctx context.Context, q *db.Queries, claims []*heldJob, lease time.Duration) (int, error) {
	p := db.ExtendParams{LeaseMs: lease.Milliseconds(), Ids: make([]int64, len(claims)), Attempts: make([]int32, len(claims))}
	for i, c := range claims {
		p.Ids[i], p.Attempts[i] = c.id, c.attempt
	}
	ectx, cancel := context.WithTimeout(ctx, s.lease/2)
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
	s.settleGone(ctx, gone)
	return extended, nil
}

// settleGone cancels the handlers of running claims the database no longer
// holds for this worker: with ErrCancelled when an operator cancelled the
// job (a worker that missed the notification, or has none: PollOnly),
// with ErrLeaseLost otherwise (swept, claimed again).
func (s *heldJobs) settleGone(ctx context.Context, gone []*heldJob) {
	if len(gone) == 0 {
		return
	}
	cancelled := map[heldKey]bool{}
	p := db.ClaimFatesParams{Ids: make([]int64, len(gone)), Attempts: make([]int32, len(gone))}
	for i, c := range gone {
		p.Ids[i], p.Attempts[i] = c.id, c.attempt
	}
	fctx, cancel := context.WithTimeout(ctx, s.lease/2)
	fates, err := s.q.ClaimFates(fctx, p)
	cancel()
	if err != nil && ctx.Err() == nil {
		s.log.Warn("reading what became of lost jobs failed; taking them as lost leases", "jobs", len(gone), "error", err)
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
				s.log.Info("job cancelled while it ran: cancelling the handler", "job_id", c.id, "kind", c.kind, "attempt", c.attempt)
			}
		case c.lose():
			s.log.Warn("lease lost: cancelling the handler", "job_id", c.id, "kind", c.kind, "attempt", c.attempt)
		}
	}
}

// cancelNotice handles an operator's cancel of a running job, announced
// by the Cancel statement: the claim it names, if this worker holds it,
// has its handler cancelled.
func (s *heldJobs) cancelNotice(id int64, attempt int32) {
	if c := s.get(id, attempt); c != nil && c.cancelled() {
		s.log.Info("job cancelled while it ran: cancelling the handler", "job_id", c.id, "kind", c.kind, "attempt", c.attempt)
	}
}
