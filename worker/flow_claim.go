package worker

import (
	"context"
	"time"

	"github.com/hopperq/hopper/db"
)

// dequeueLimited claims up to n jobs of a queue under flow control:
// DequeueLimited under the queue's claim lock (underClaimLock), so that
// each claim sees what the previous ones took. A fair claim that started
// after a key and found too few jobs goes round once more from the first
// key. It also returns how long until a rate limit gives budget back,
// when one cut the claim short.
func (w *Worker) dequeueLimited(ctx context.Context, qr *producer, n int) ([]db.HopperJob, time.Duration, error) {
	f := qr.flow
	if f.PriorityAging > 0 && !time.Now().Before(f.nextAging) {
		w.agePriorities(ctx, qr)
	}
	if f.local != nil {
		got, wait := f.local.take(time.Now(), n)
		if got == 0 {
			return nil, wait, nil
		}
		n = got
	}
	// A strict claim starts from the queue's cursor, as Dequeue does: just
	// past the last job claimed, jobs held back by their keys' limits
	// included (recording a keyed job's result moves the cursor back to
	// it, before the rest of its key). A fair one goes round the keys, its
	// head (the keyless jobs) from the start; so does one under a rate per
	// kind or key, which may pass over jobs of a spent budget that nothing
	// would announce when it returns, and one whose queue ages priorities
	// (an aged job moves ahead, perhaps behind the cursor, unannounced).
	strict := !f.Fair && (!f.global() || f.rateBy() == string(RateByQueue)) && f.PriorityAging == 0
	after := fromStart
	if strict {
		after = qr.cursor.begin(time.Now(), w.notifier.listening.Load())
	}
	p := db.DequeueLimitedParams{
		Owner:         w.cfg.ID,
		LeaseMs:       w.cfg.LeaseDuration.Milliseconds(),
		Queue:         qr.name,
		Kinds:         w.kinds,
		MaxVersions:   w.versions,
		KeyLimits:     w.keyLimits,
		KeyLimit:      int32(f.KeyLimit),
		Fair:          f.Fair,
		AfterKey:      f.afterKey,
		AfterPriority: after.priority,
		AfterRunAt:    after.runAt,
		AfterID:       after.id,
		MaxJobs:       int32(n),
		Scan:          int32(scanFor(n)),
		RateBy:        f.rateBy(),
		RateLimit:     0,
		RateWindowMs:  f.Rate.Per.Milliseconds(),
	}
	if f.global() {
		p.RateLimit = int32(f.Rate.Limit)
		p.ExactStarts = f.Rate.ExactStarts
	}
	rows, err := w.claimLimited(ctx, p)
	var headEnd readyKey // the last job the claim's head considered
	if len(rows) > 0 {
		headEnd = readyKey{priority: rows[0].HeadPriority, runAt: rows[0].HeadRunAt, id: rows[0].HeadID}
	}
	if err == nil && f.Fair && p.AfterKey != "" && len(rows) < n {
		// A fair claim that started after a key and found too few jobs
		// goes round once more from the first key, as a claim of its
		// own: the first one's jobs are claimed whatever becomes of it.
		p.AfterKey, p.MaxJobs = "", int32(n-len(rows))
		more, merr := w.claimLimited(ctx, p)
		if merr != nil && ctx.Err() == nil {
			w.log.Warn("claim failed", "queue", qr.name, "error", merr)
		}
		rows = append(rows, more...)
	}
	claimed := jobsOf(rows)
	var wait time.Duration
	if err == nil && f.global() && len(claimed) < n {
		wait = w.rateWait(ctx, qr)
	}
	if strict {
		if err != nil {
			qr.cursor.failed()
		} else {
			qr.cursor.claimedWithin(claimed, headEnd)
		}
	}
	if f.local != nil {
		f.local.giveBack(n - len(claimed))
	}
	if err != nil {
		return nil, 0, err
	}
	switch {
	case f.Fair:
		f.afterKey = lastKey(claimed)
	case len(claimed) == n:
		// A full strict claim: if it went round the keys (its head was
		// crowded by keys at their limit), the next round starts after
		// the keys it served, so that every key gets its turn.
		f.afterKey = lastKey(claimed)
	default:
		f.afterKey = "" // a partial one found every open key it could
	}
	return claimed, wait, nil
}

// claimLimited runs one DequeueLimited under the queue's claim lock.
func (w *Worker) claimLimited(ctx context.Context, p db.DequeueLimitedParams) ([]db.DequeueLimitedRow, error) {
	var rows []db.DequeueLimitedRow
	err := w.underClaimLock(ctx, p.Queue, func(q *db.Queries) error {
		var err error
		rows, err = q.DequeueLimited(ctx, p)
		return err
	})
	return rows, err
}

// rateWait is how long until the queue's rate window gives budget back,
// after a claim it cut short: read outside the claim lock. If it cannot
// be read, the window's length, after which all of it is back.
func (w *Worker) rateWait(ctx context.Context, qr *producer) time.Duration {
	per := qr.flow.Rate.Per
	ms, err := w.q.RateWait(ctx, db.RateWaitParams{Queue: qr.name, RateWindowMs: per.Milliseconds()})
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("rate budget unknown", "queue", qr.name, "error", err)
		}
		return per
	}
	return time.Duration(max(ms, 1)) * time.Millisecond
}

// agingBatch bounds one aging statement.
const agingBatch = 10000

// agePriorities ages the queue's waiting jobs if no worker has in the last
// interval. It tries four times per interval, so that the interval between
// two agings stays close to PriorityAging whichever worker does it.
func (w *Worker) agePriorities(ctx context.Context, qr *producer) {
	f := qr.flow
	f.nextAging = time.Now().Add(f.PriorityAging / 4)
	n, err := w.q.AgePriorities(ctx, db.AgePrioritiesParams{
		Queue: qr.name, AgingMs: f.PriorityAging.Milliseconds(), MaxJobs: agingBatch,
	})
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("priority aging failed", "queue", qr.name, "error", err)
		}
		return
	}
	if n > 0 {
		w.log.Debug("priorities aged", "queue", qr.name, "jobs", n)
	}
}

// scanFor is how many ready jobs a strict limited claim of n looks at: a
// quarter more, so that a few keys at their limit near the head do not cut
// it short (a head crowded by keys at their limit goes round the keys).
// Every job looked at is ranked within its key: twice n cost a third more.
func scanFor(n int) int { return max(n+n/4, 64) }

// lastKey is the greatest concurrency key among claimed jobs: a fair
// queue's next claim starts after it. "" starts from the first key.
func lastKey(claimed []db.HopperJob) string {
	last := ""
	for _, r := range claimed {
		if r.ConcurrencyKey != nil && *r.ConcurrencyKey > last {
			last = *r.ConcurrencyKey
		}
	}
	return last
}

// jobsOf is the claimed jobs of DequeueLimited's rows.
func jobsOf(rows []db.DequeueLimitedRow) []db.HopperJob {
	jobs := make([]db.HopperJob, len(rows))
	for i, r := range rows {
		jobs[i] = r.HopperJob
	}
	return jobs
}
