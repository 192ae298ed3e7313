package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/schemascope"
)

// producer runs one queue's claim path, all of it in this file: fetchLoop
// waits for free slots and work, fetch claims and dispatches, dequeue
// takes jobs from the scan cursor on (Dequeue), or under flow control
// through dequeueLimited and claimLimited under the queue's claim lock
// (claim_lock.go), with the local rate (local_rate.go) and global rate
// claims (rate_start.go). What it works with, the same for every queue,
// is in producerDeps.
//
// Invariants: running never exceeds max (a job is claimed only for a free
// slot, and its slot is given back once, by its heldJob); only the
// producer's own goroutine claims, so budget needs no lock, and
// a claim's cursor move is undone by any rewind that arrived meanwhile
// (scanCursor).
type producer struct {
	producerDeps
	name      string
	max       int
	running   atomic.Int64  // slots taken: claimed jobs not yet finished or abandoned
	wake      chan struct{} // a wake-up arrived for this queue
	slotFreed chan struct{} // a slot came free
	// runners runs the queue's jobs on goroutines started as needed that
	// live until Run ends, so a burst of short jobs is served by a few
	// goroutines rather than one new goroutine per job.
	runners *handlerPool
	cursor  *scanCursor
	flow    *queueFlow    // nil: no flow control
	budget  time.Duration // flow control: the last claim was cut short by a rate limit until then
}

// producerDeps is what a worker's producers claim and dispatch with, the
// same for all of them.
type producerDeps struct {
	q         *db.Queries
	pool      *pgxpool.Pool   // the claim lock's batches go on it (claim_lock.go)
	scope     *schemascope.DB // Config.Schema's scope; nil: the pool's search_path
	cfg       *Config
	log       *slog.Logger
	metrics   *metrics
	handlers  *handlerTable
	held      *heldJobs
	executor  *executor
	listening *atomic.Bool // the notifier's: wake-ups reach the scan cursor
	claims    *claimBatch  // plain queues' claims, batched across queues
	guard     *readOnlyGuard
	reached   func() // a claim succeeded: the outage, if any, is over
	// hard is the shutdown's hard deadline (run.hard): a claim is cut off
	// by it only.
	hard context.Context
}

// newProducer claims for the queue name, n jobs at most at once, under
// flow control when flow is not nil.
func newProducer(deps producerDeps, name string, n int, flow *queueFlow) *producer {
	return &producer{producerDeps: deps, name: name, max: n, wake: make(chan struct{}, 1), slotFreed: make(chan struct{}, 1),
		runners: newHandlerPool(deps.executor.execute, &deps.executor.poolWG), cursor: newScanCursor(deps.cfg.FullScanInterval), flow: flow}
}

// dispatched is a claimed, decoded job on its way to a handler goroutine.
type dispatched struct {
	h       *handler
	row     db.HopperJob
	job     *heldJob
	call    func(context.Context) (json.RawMessage, error) // nil when decoding failed
	timeout time.Duration                                  // the run's timeout; 0: none
	keep    time.Duration                                  // how long its completion is kept; 0: not
	err     error                                          // why decoding failed
	rate    *rateClaim                                     // the claim it came in, under a global rate limit; nil: none
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// fetchLoop claims as many jobs as there are free slots. While work is
// waiting it claims again as soon as a quarter of the slots are free (or
// after a short pause, whatever is free then), so that claims come in
// batches rather than one job per freed slot; an idle queue waits for a
// wake-up or the poll interval.
func (p *producer) fetchLoop(ctx context.Context) {
	poll := time.NewTimer(p.cfg.PollInterval)
	defer poll.Stop()
	refill := max(1, p.max/4)
	failures := 0
	for {
		free := p.max - int(p.running.Load())
		if free > 0 {
			n, err := p.fetch(ctx, free)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				p.guard.check(err)
				failures++
				delay := retryDelay(failures)
				p.log.Warn("claim failed; retrying", "queue", p.name, "error", err, "in", delay)
				if !sleep(ctx, delay) {
					return
				}
				continue
			}
			failures = 0
			p.reached()
			if n < free {
				p.awaitWork(ctx, poll) // the queue is drained for now
				continue
			}
		}
		if !awaitSlots(ctx, p, refill) { // work is waiting
			return
		}
	}
}

// refillPause bounds how long a queue with waiting work holds free slots
// back to claim them in one batch.
const refillPause = 2 * time.Millisecond

// awaitSlots waits until want slots are free, or refillPause has passed and
// at least one is. It returns false when ctx ends.
func awaitSlots(ctx context.Context, p *producer, want int) bool {
	pause := time.NewTimer(refillPause)
	defer pause.Stop()
	paused := false
	for {
		free := p.max - int(p.running.Load())
		if free >= want || (paused && free > 0) {
			return true
		}
		var timeout <-chan time.Time
		if !paused {
			timeout = pause.C
		}
		select {
		case <-ctx.Done():
			return false
		case <-p.slotFreed:
		case <-timeout:
			paused = true
		}
	}
}

// awaitWork waits for a wake-up or the poll interval.
func (p *producer) awaitWork(ctx context.Context, poll *time.Timer) {
	if !poll.Stop() {
		select {
		case <-poll.C:
		default:
		}
	}
	next := p.cfg.PollInterval
	if p.budget > 0 && p.budget < next {
		next = p.budget // a rate limit gives budget back then
	}
	poll.Reset(next)
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
			return
		case <-poll.C:
			return
		case <-p.slotFreed: // irrelevant while the queue is drained
		}
	}
}

// dequeue claims up to n jobs of the queue: from the claim cursor on,
// batched with the other plain queues' claims (claimBatch), or, under flow
// control, by the limited claim.
func (p *producer) dequeue(ctx context.Context, n int, sent time.Time) ([]db.HopperJob, error) {
	if p.flow != nil {
		rows, wait, err := p.dequeueLimited(ctx, n)
		p.budget = wait
		return rows, err
	}
	after := p.cursor.begin(sent, p.listening.Load())
	rows, err := p.claims.dequeue(ctx, db.DequeueParams{
		Owner:         p.cfg.ID,
		LeaseMs:       p.cfg.LeaseDuration.Milliseconds(),
		Queue:         p.name,
		AfterPriority: after.priority,
		AfterRunAt:    after.runAt,
		AfterID:       after.id,
		Kinds:         p.handlers.kinds,
		MaxVersions:   p.handlers.versions,
		MaxJobs:       int32(n),
	})
	if err != nil {
		p.cursor.failed()
		return nil, err
	}
	p.cursor.claimed(rows)
	return rows, nil
}

// claimAnswerWait bounds how long a claim waits for its answer, however
// short the lease. A claim that was sent has most likely committed: given
// up on, its jobs stay leased to a worker that does not know them until the
// leases expire and a sweep takes them back, charged an attempt they never
// ran. A late answer is still this worker's to run: the lease extension
// keeps its leases from then on, and a job a sweep took back meanwhile is fenced
// (its handler is cancelled, its result refused). The bound only ends a
// wait on a connection that will never answer.
const claimAnswerWait = 30 * time.Second

// fetch dequeues up to n jobs and starts their handlers.
func (p *producer) fetch(ctx context.Context, n int) (int, error) {
	// The claim is not cut off by shutdown, only by the shutdown's hard
	// deadline, and it waits long for its answer (claimAnswerWait).
	qctx, cancel := context.WithTimeout(p.hard, claimAnswerWait)
	defer cancel()
	sent := time.Now()
	rows, err := p.dequeue(qctx, n, sent)
	if err != nil {
		return 0, err
	}
	p.metrics.fetched(p.name, len(rows))
	now := time.Now()
	rates := p.rateClaimsOf(rows)
	for i, row := range rows {
		h := p.handlers.of(row.Kind)
		keep := h.keepRow(p.cfg, row)
		c := p.held.add(row, p, sent, keep, h.keyring)
		p.metrics.claimed(row.Queue, row.Kind, now.Sub(row.RunAt))
		// Decoding here, in one busy goroutine, rather than in the handler
		// goroutine keeps the decoder's deep stack from being grown anew
		// for every job.
		call, timeout, err := h.prepare(row, keep)
		if p.executor.hooked(h) {
			c.view = view(row)
		}
		if timeout == 0 {
			timeout = p.cfg.Timeout
		}
		p.running.Add(1)
		p.executor.handlerWG.Add(1)
		d := dispatched{h: h, row: row, job: c, call: call, timeout: timeout, keep: keep, err: err}
		if rates != nil {
			d.rate = rates[i]
		}
		p.runners.dispatch(d)
	}
	return len(rows), nil
}

// dequeueLimited claims up to n jobs of a queue under flow control:
// DequeueLimited under the queue's claim lock (underClaimLock), so that
// each claim sees what the previous ones took. A fair claim that started
// after a key and found too few jobs goes round once more from the first
// key. It also returns how long until a rate limit gives budget back,
// when one cut the claim short.
func (p *producer) dequeueLimited(ctx context.Context, n int) ([]db.HopperJob, time.Duration, error) {
	f := p.flow
	if f.PriorityAging > 0 && !time.Now().Before(f.nextAging) {
		p.agePriorities(ctx)
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
		after = p.cursor.begin(time.Now(), p.listening.Load())
	}
	params := db.DequeueLimitedParams{
		Owner:         p.cfg.ID,
		LeaseMs:       p.cfg.LeaseDuration.Milliseconds(),
		Queue:         p.name,
		Kinds:         p.handlers.kinds,
		MaxVersions:   p.handlers.versions,
		KeyLimits:     p.handlers.keyLimits,
		SharedNames:   p.handlers.sharedNames,
		SharedMax:     p.handlers.sharedMax,
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
		params.RateLimit = int32(f.Rate.Limit)
		params.ExactStarts = f.Rate.ExactStarts
	}
	rows, err := p.claimLimited(ctx, params)
	var headEnd readyKey // the last job the claim's head considered
	if len(rows) > 0 {
		headEnd = readyKey{priority: rows[0].HeadPriority, runAt: rows[0].HeadRunAt, id: rows[0].HeadID}
	}
	if err == nil && f.Fair && params.AfterKey != "" && len(rows) < n {
		// A fair claim that started after a key and found too few jobs
		// goes round once more from the first key, as a claim of its
		// own: the first one's jobs are claimed whatever becomes of it.
		params.AfterKey, params.MaxJobs = "", int32(n-len(rows))
		more, merr := p.claimLimited(ctx, params)
		if merr != nil && ctx.Err() == nil {
			p.log.Warn("claim failed", "queue", p.name, "error", merr)
		}
		rows = append(rows, more...)
	}
	claimed := jobsOf(rows)
	var wait time.Duration
	if err == nil && f.global() && len(claimed) < n {
		wait = p.rateWait(ctx)
	}
	if strict {
		if err != nil {
			p.cursor.failed()
		} else {
			p.cursor.claimedWithin(claimed, headEnd)
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
func (p *producer) claimLimited(ctx context.Context, params db.DequeueLimitedParams) ([]db.DequeueLimitedRow, error) {
	var rows []db.DequeueLimitedRow
	err := p.underClaimLock(ctx, params.Queue, func(q *db.Queries) error {
		var err error
		rows, err = q.DequeueLimited(ctx, params)
		return err
	})
	return rows, err
}

// rateWait is how long until the queue's rate window gives budget back,
// after a claim it cut short: read outside the claim lock. If it cannot
// be read, the window's length, after which all of it is back.
func (p *producer) rateWait(ctx context.Context) time.Duration {
	per := p.flow.Rate.Per
	ms, err := p.q.RateWait(ctx, db.RateWaitParams{Queue: p.name, RateWindowMs: per.Milliseconds()})
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("rate budget unknown", "queue", p.name, "error", err)
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
func (p *producer) agePriorities(ctx context.Context) {
	f := p.flow
	f.nextAging = time.Now().Add(f.PriorityAging / 4)
	n, err := p.q.AgePriorities(ctx, db.AgePrioritiesParams{
		Queue: p.name, AgingMs: f.PriorityAging.Milliseconds(), MaxJobs: agingBatch,
	})
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("priority aging failed", "queue", p.name, "error", err)
		}
		return
	}
	if n > 0 {
		p.log.Debug("priorities aged", "queue", p.name, "jobs", n)
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
