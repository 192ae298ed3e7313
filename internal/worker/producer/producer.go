// Package producer runs a queue's claim path: the claim loop, which waits
// for free slots and work, the scan cursor the plain claims start from
// (cursor.go), the claims the plain queues batch together
// (claim_batch.go), and, under flow control, the limited claim under the
// queue's claim lock (claim_lock.go) with the local rate (local_rate.go)
// and the global rate's claims (rate_claim.go). It hands each job it
// claims on to the worker (Config.Hand), which holds it and runs its
// handler; the jobs of a claim whose commit's outcome was unknown are
// found and handed on before the next claim (orphans.go).
package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/schemascope"
	"github.com/hopperq/hopper/internal/sqlbatch"
	"github.com/hopperq/hopper/internal/worker/loop"
)

// Metrics counts the claims.
type Metrics interface {
	// BatchClaimed observes how many jobs one claim of queue took.
	BatchClaimed(queue string, jobs int)
}

// Kinds are the kinds the worker runs, as the claim statements take them:
// parallel slices, sorted by name.
type Kinds struct {
	Names       []string
	MaxVersions []int32 // the newest payload version each kind reads
	KeyLimits   []int32 // a kind's own key limit; 0: the queue's
	SharedNames []string
	SharedMax   []int32 // the kind's shared limit (SharedNames: "" none)
}

// Claimed is a job the producer claimed, handed on with the queue's slot
// it takes.
type Claimed struct {
	Row      db.HopperJob
	Sent     time.Time // when its claim was sent: its lease runs from no earlier
	Answered time.Time // when the claim's answer arrived
	// Rate is the claim it came in, under a global rate limit with
	// ExactStarts; nil: none.
	Rate *RateClaim
}

// Hand takes a claimed job on: the worker holds it and runs its handler.
// It is called on the producer's goroutine, in claim order, once the
// job's slot is taken, and must not block; the job gives its slot back
// with FreeSlot, once, when it no longer runs.
type Hand func(p *Producer, job Claimed)

// Config is what a Producer works with.
type Config struct {
	Queries *db.Queries
	// Pool takes the claim lock's batches (claim_lock.go) when Scope is
	// nil.
	Pool sqlbatch.Sender
	// Scope is the worker's Config.Schema scope: the claim lock is then
	// taken in a transaction begun on it. nil: Pool's search_path.
	Scope *schemascope.DB
	// Claims batches the plain claims of the worker's queues: one for all
	// of them.
	Claims *ClaimBatch
	// Log is the worker's logger; a claim that fails warns on it with the
	// error as "error", which the worker's logger tells as an outage when
	// the connection was lost.
	Log     *slog.Logger
	Metrics Metrics

	Name  string // the queue
	Slots int    // the most of its jobs held at once
	Flow  *Flow  // the queue's flow control; nil: none
	Kinds Kinds
	Owner string        // the worker's ID, whom the claims lease to
	Lease time.Duration // the worker's LeaseDuration
	// PollInterval is how long an idle queue waits for a wake-up before
	// it claims again; FullScanInterval how often a claim scans from the
	// start whatever the cursor says (cursor.go).
	PollInterval     time.Duration
	FullScanInterval time.Duration

	// Listening reports whether wake-ups reach the cursor (the notifier
	// is subscribed): it is used only then.
	Listening func() bool
	// ReadOnly is told of every claim's error: a read-only server's
	// refusal has the pool's sessions replaced.
	ReadOnly func(err error) bool
	// Reached is called after each claim that succeeded: an outage, if
	// any, is over.
	Reached func()
	Hand    Hand
	// Held returns whether the worker holds a claim (id, attempt), as of
	// the call: a job handed on (Hand) and not yet retired. After a claim
	// whose commit's outcome is unknown, the queue's running jobs leased to
	// Owner that the worker did not hold are that claim's, and are run
	// (orphans.go).
	Held func() func(id int64, attempt int32) bool
}

func (c *Config) validate() error {
	switch {
	case c.Queries == nil, c.Claims == nil, c.Log == nil, c.Metrics == nil,
		c.Listening == nil, c.ReadOnly == nil, c.Reached == nil, c.Hand == nil, c.Held == nil:
		return errors.New("producer: Queries, Claims, Log, Metrics, Listening, ReadOnly, Reached, Hand and Held are required")
	case c.Pool == nil && c.Scope == nil:
		return errors.New("producer: Pool or Scope is required: the claim lock runs on it")
	case c.Name == "" || c.Owner == "":
		return fmt.Errorf("producer: Name (%q) and Owner (%q) are required", c.Name, c.Owner)
	case c.Slots <= 0:
		return fmt.Errorf("producer: queue %s: Slots (%d) must be positive", c.Name, c.Slots)
	case c.Lease < time.Millisecond || c.PollInterval <= 0 || c.FullScanInterval <= 0:
		return fmt.Errorf("producer: queue %s: Lease (%v, at least 1ms), PollInterval (%v) and FullScanInterval (%v) must be positive",
			c.Name, c.Lease, c.PollInterval, c.FullScanInterval)
	}
	k := c.Kinds
	if n := len(k.Names); len(k.MaxVersions) != n || len(k.KeyLimits) != n || len(k.SharedNames) != n || len(k.SharedMax) != n {
		return fmt.Errorf("producer: queue %s: Kinds' slices differ in length (names %d, versions %d, key limits %d, shared names %d, shared max %d)",
			c.Name, n, len(k.MaxVersions), len(k.KeyLimits), len(k.SharedNames), len(k.SharedMax))
	}
	if c.Flow != nil {
		if err := c.Flow.validate(); err != nil {
			return fmt.Errorf("producer: queue %s: %w", c.Name, err)
		}
	}
	return nil
}

// Producer runs one queue's claim path: Run waits for free slots and
// work, Claim claims and hands the jobs on, dequeue takes jobs from the
// scan cursor on (Dequeue, batched with the other plain queues), or under
// flow control through dequeueLimited and claimLimited under the queue's
// claim lock (claim_lock.go), with the local rate (local_rate.go) and
// global rate claims (rate_claim.go).
//
// A claim whose commit's outcome is unknown (commitfate.Unknown: the
// connection broke during COMMIT, or Citus could not see a worker node's
// commit through) may have taken jobs for this worker without its
// knowing: before its next claim, the producer finds them and runs them
// at once (orphans.go), so that none waits for its lease.
//
// Invariants: running never exceeds Slots (a job is claimed only for a
// free slot, and its slot is given back once, by FreeSlot); only the
// producer's own goroutine claims, so budget and unknownSince need no
// lock, and no job of the queue is claimed for this worker but by it
// (what makes the orphans' search exact); a claim's cursor move is undone
// by any rewind that arrived meanwhile (scanCursor).
type Producer struct {
	cfg       Config
	running   atomic.Int64  // slots taken: claimed jobs not yet finished or abandoned
	wake      chan struct{} // a wake-up arrived for this queue
	slotFreed chan struct{} // a slot came free
	cursor    *scanCursor
	flow      *queueFlow    // nil: no flow control
	budget    time.Duration // flow control: the last claim was cut short by a rate limit until then
	// unknownSince is when the first claim whose commit's outcome is
	// unknown was sent, until its jobs are found and handed back
	// (orphans.go); zero: none. Only the producer's goroutine uses it.
	unknownSince time.Time
}

// New returns a Producer working with cfg.
func New(cfg Config) (*Producer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// The claims send the kinds as they are now; the caller's slices stay
	// its own.
	k := &cfg.Kinds
	k.Names, k.MaxVersions, k.KeyLimits = slices.Clone(k.Names), slices.Clone(k.MaxVersions), slices.Clone(k.KeyLimits)
	k.SharedNames, k.SharedMax = slices.Clone(k.SharedNames), slices.Clone(k.SharedMax)
	p := &Producer{cfg: cfg, wake: make(chan struct{}, 1), slotFreed: make(chan struct{}, 1),
		cursor: newScanCursor(cfg.FullScanInterval)}
	if cfg.Flow != nil {
		p.flow = newQueueFlow(*cfg.Flow)
	}
	return p, nil
}

// Name is the producer's queue.
func (p *Producer) Name() string { return p.cfg.Name }

// Limited reports whether the queue is claimed under flow control.
func (p *Producer) Limited() bool { return p.flow != nil }

// GlobalRate reports whether the queue's claims count against a rate kept
// in the database.
func (p *Producer) GlobalRate() bool { return p.flow != nil && p.flow.global() }

// Running is how many of the queue's slots are taken.
func (p *Producer) Running() int { return int(p.running.Load()) }

// FreeSlot gives back the slot a claimed job took: once per job handed
// on, when it no longer runs.
func (p *Producer) FreeSlot() {
	p.running.Add(-1)
	signal(p.slotFreed)
}

// Rewind moves the scan cursor back so that the job at k is claimed again
// (FromStart: the next claim scans from the start). A wake-up, or a job's
// key coming free, calls it before Wake.
func (p *Producer) Rewind(k Key) { p.cursor.rewind(k) }

// Wake has an idle claim loop look for work now.
func (p *Producer) Wake() { signal(p.wake) }

// Cursor is where the next claim starts scanning: the place of the last
// job claimed, or FromStart.
func (p *Producer) Cursor() Key { return p.cursor.at() }

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Run claims as many jobs as there are free slots, until ctx ends; each
// claim is cut off only by hard, the shutdown's hard deadline. While work is
// waiting it claims again as soon as a quarter of the slots are free (or
// after a short pause, whatever is free then), so that claims come in
// batches rather than one job per freed slot; an idle queue waits for a
// wake-up or the poll interval.
func (p *Producer) Run(ctx, hard context.Context) {
	poll := time.NewTimer(p.cfg.PollInterval)
	defer poll.Stop()
	refill := max(1, p.cfg.Slots/4)
	failures := 0
	for {
		free := p.cfg.Slots - int(p.running.Load())
		if free > 0 {
			n, err := p.Claim(hard, free)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				p.cfg.ReadOnly(err)
				failures++
				delay := loop.RetryDelay(failures)
				p.cfg.Log.Warn("claim failed; retrying", "queue", p.cfg.Name, "error", err, "in", delay)
				if !loop.Sleep(ctx, delay) {
					return
				}
				continue
			}
			failures = 0
			p.cfg.Reached()
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
func awaitSlots(ctx context.Context, p *Producer, want int) bool {
	pause := time.NewTimer(refillPause)
	defer pause.Stop()
	paused := false
	for {
		free := p.cfg.Slots - int(p.running.Load())
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
func (p *Producer) awaitWork(ctx context.Context, poll *time.Timer) {
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
// batched with the other plain queues' claims (ClaimBatch), or, under flow
// control, by the limited claim.
func (p *Producer) dequeue(ctx context.Context, n int, sent time.Time) ([]db.HopperJob, error) {
	if p.flow != nil {
		rows, wait, err := p.dequeueLimited(ctx, n)
		p.budget = wait
		return rows, err
	}
	after := p.cursor.begin(sent, p.cfg.Listening())
	rows, err := p.cfg.Claims.dequeue(ctx, db.DequeueParams{
		Owner:         p.cfg.Owner,
		LeaseMs:       p.cfg.Lease.Milliseconds(),
		Queue:         p.cfg.Name,
		AfterPriority: after.Priority,
		AfterRunAt:    after.RunAt,
		AfterID:       after.ID,
		Kinds:         p.cfg.Kinds.Names,
		MaxVersions:   p.cfg.Kinds.MaxVersions,
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
// up on, its outcome is unknown, and its jobs are looked for before the
// next claim (orphans.go); but one still running on the server then
// commits after the search, and its jobs stay leased to a worker that does
// not know them until the leases expire and a sweep takes them back,
// charged an attempt they never ran. A late answer is still this worker's to run: the lease extension
// keeps its leases from then on, and a job a sweep took back meanwhile is fenced
// (its handler is cancelled, its result refused). The bound only ends a
// wait on a connection that will never answer.
const claimAnswerWait = 30 * time.Second

// Claim claims up to n jobs and hands them on (Config.Hand), each with
// the slot it takes, and reports how many it claimed. The claim is cut
// off only by ctx, the shutdown's hard deadline, and waits long for its
// answer (claimAnswerWait).
//
// When an earlier claim's commit's outcome was unknown, it first runs the
// jobs that claim took (takeOrphans), which count in what it reports;
// until it could look for them, it claims nothing and returns that error.
// A claim whose own outcome is unknown returns an error that wraps
// commitfate.ErrUnknown.
func (p *Producer) Claim(ctx context.Context, n int) (int, error) {
	qctx, cancel := context.WithTimeout(ctx, claimAnswerWait)
	defer cancel()
	orphans := 0
	if !p.unknownSince.IsZero() {
		var err error
		if orphans, err = p.takeOrphans(qctx, n); err != nil || orphans == n {
			return orphans, err
		}
		n -= orphans
	}
	sent := time.Now()
	rows, err := p.dequeue(qctx, n, sent)
	if err != nil {
		return orphans, p.failed(err, sent)
	}
	p.cfg.Metrics.BatchClaimed(p.cfg.Name, len(rows))
	p.hand(rows, sent, time.Now())
	return orphans + len(rows), nil
}

// hand hands claimed jobs on, each with a slot, in claim order.
func (p *Producer) hand(rows []db.HopperJob, sent, answered time.Time) {
	rates := p.rateClaimsOf(rows)
	for i, row := range rows {
		job := Claimed{Row: row, Sent: sent, Answered: answered}
		if rates != nil {
			job.Rate = rates[i]
		}
		p.running.Add(1)
		p.cfg.Hand(p, job)
	}
}

// dequeueLimited claims up to n jobs of a queue under flow control:
// DequeueLimited under the queue's claim lock (underClaimLock), so that
// each claim sees what the previous ones took. A fair claim that started
// after a key and found too few jobs goes round once more from the first
// key. It also returns how long until a rate limit gives budget back,
// when one cut the claim short.
func (p *Producer) dequeueLimited(ctx context.Context, n int) ([]db.HopperJob, time.Duration, error) {
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
	strict := !f.Fair && (!f.global() || f.rateBy() == RateByQueue) && f.PriorityAging == 0
	after := FromStart
	if strict {
		after = p.cursor.begin(time.Now(), p.cfg.Listening())
	}
	params := db.DequeueLimitedParams{
		Owner:         p.cfg.Owner,
		LeaseMs:       p.cfg.Lease.Milliseconds(),
		Queue:         p.cfg.Name,
		Kinds:         p.cfg.Kinds.Names,
		MaxVersions:   p.cfg.Kinds.MaxVersions,
		KeyLimits:     p.cfg.Kinds.KeyLimits,
		SharedNames:   p.cfg.Kinds.SharedNames,
		SharedMax:     p.cfg.Kinds.SharedMax,
		KeyLimit:      int32(f.KeyLimit),
		Fair:          f.Fair,
		AfterKey:      f.afterKey,
		AfterPriority: after.Priority,
		AfterRunAt:    after.RunAt,
		AfterID:       after.ID,
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
	var headEnd Key // the last job the claim's head considered
	if len(rows) > 0 {
		headEnd = Key{Priority: rows[0].HeadPriority, RunAt: rows[0].HeadRunAt, ID: rows[0].HeadID}
	}
	if err == nil && f.Fair && params.AfterKey != "" && len(rows) < n {
		// A fair claim that started after a key and found too few jobs
		// goes round once more from the first key, as a claim of its
		// own: the first one's jobs are claimed whatever becomes of it.
		params.AfterKey, params.MaxJobs = "", int32(n-len(rows))
		sent := time.Now()
		more, merr := p.claimLimited(ctx, params)
		if merr != nil {
			merr = p.failed(merr, sent) // its jobs are found before the next claim, if it may have taken any
			if ctx.Err() == nil {
				p.cfg.Log.Warn("claim failed", "queue", p.cfg.Name, "error", merr)
			}
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
func (p *Producer) claimLimited(ctx context.Context, params db.DequeueLimitedParams) ([]db.DequeueLimitedRow, error) {
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
func (p *Producer) rateWait(ctx context.Context) time.Duration {
	per := p.flow.Rate.Per
	ms, err := p.cfg.Queries.RateWait(ctx, db.RateWaitParams{Queue: p.cfg.Name, RateWindowMs: per.Milliseconds()})
	if err != nil {
		if ctx.Err() == nil {
			p.cfg.Log.Warn("rate budget unknown", "queue", p.cfg.Name, "error", err)
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
func (p *Producer) agePriorities(ctx context.Context) {
	f := p.flow
	f.nextAging = time.Now().Add(f.PriorityAging / 4)
	n, err := p.cfg.Queries.AgePriorities(ctx, db.AgePrioritiesParams{
		Queue: p.cfg.Name, AgingMs: f.PriorityAging.Milliseconds(), MaxJobs: agingBatch,
	})
	if err != nil {
		if ctx.Err() == nil {
			p.cfg.Log.Warn("priority aging failed", "queue", p.cfg.Name, "error", err)
		}
		return
	}
	if n > 0 {
		p.cfg.Log.Debug("priorities aged", "queue", p.cfg.Name, "jobs", n)
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
