package worker

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper/db"
)

// dequeueLimited claims up to n jobs of a queue under flow control, in a
// transaction of its own: LockClaims serializes the queue's limited claims
// (each then sees what the previous one took), DequeueLimited claims. A
// fair claim that started after a key and found too few jobs goes round
// once more from the first key, in the same transaction. It also returns
// how long until a rate limit gives budget back, when one cut the claim
// short.
func (w *Worker) dequeueLimited(ctx context.Context, qr *queueRunner, n int) ([]db.HopperJob, time.Duration, error) {
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
		after = qr.cursor.begin(time.Now(), w.listening.Load())
	}
	var claimed []db.HopperJob
	var headEnd readyKey // the last job the claim's head considered
	var wait time.Duration
	err := pgx.BeginFunc(ctx, w.beginner(), func(tx pgx.Tx) error {
		q := db.New(tx)
		if err := q.LockClaims(ctx, qr.name); err != nil {
			return err
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
		}
		rows, err := q.DequeueLimited(ctx, p)
		if err != nil {
			return err
		}
		if f.Fair && p.AfterKey != "" && len(rows) < n {
			p.AfterKey, p.MaxJobs = "", int32(n-len(rows))
			more, err := q.DequeueLimited(ctx, p)
			if err != nil {
				return err
			}
			rows = append(rows, more...)
		}
		if len(rows) > 0 {
			headEnd = readyKey{priority: rows[0].HeadPriority, runAt: rows[0].HeadRunAt, id: rows[0].HeadID}
		}
		if f.global() && len(rows) < n {
			ms, err := q.RateWait(ctx, db.RateWaitParams{Queue: qr.name, RateWindowMs: p.RateWindowMs})
			if err != nil {
				return err
			}
			wait = time.Duration(max(ms, 1)) * time.Millisecond
		}
		claimed = make([]db.HopperJob, len(rows))
		for i, r := range rows {
			claimed[i] = r.HopperJob
		}
		return nil
	})
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

// agingBatch bounds one aging statement.
const agingBatch = 10000

// agePriorities ages the queue's waiting jobs if no worker has in the last
// interval. It tries four times per interval, so that the interval between
// two agings stays close to PriorityAging whichever worker does it.
func (w *Worker) agePriorities(ctx context.Context, qr *queueRunner) {
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

// scanFor is how many ready jobs a strict limited claim of n looks at:
// enough that a few keys at their limit near the head do not starve it.
func scanFor(n int) int { return max(2*n, 64) }

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

// beginner starts the worker's own transactions, in Config.Schema when
// one is set.
func (w *Worker) beginner() interface {
	Begin(context.Context) (pgx.Tx, error)
} {
	if w.scope != nil {
		return w.scope
	}
	return w.pool
}
