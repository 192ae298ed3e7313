package worker

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/worker/completer"
	"github.com/hopperq/hopper/internal/worker/producer"
	"github.com/hopperq/hopper/jobs"
)

// heldState is where one held job is in its life inside the worker. Every
// change goes through a method of heldJob below, which does the clean-up the
// new state needs, so no caller has to remember it.
type heldState int32

const (
	// claimRunning: the handler runs; the lease extension keeps its lease.
	claimRunning heldState = iota
	// claimFinished: the handler returned; its result waits to be recorded
	// and the lease extension still keeps its lease until it is.
	claimFinished
	// claimRecorded: the result's outcome is known (terminal).
	claimRecorded
	// claimLost: the database no longer holds the job for us (terminal):
	// the handler was cancelled and its result will be discarded.
	claimLost
	// claimReleased: given back at shutdown (terminal): the handler was
	// cancelled and its result will be discarded.
	claimReleased
	// claimAbandoned: the handler outlived its timeout plus the grace
	// (terminal): its lease is no longer extended, so the job runs again
	// elsewhere once the lease expires, and its slot is free again.
	claimAbandoned
	// claimCancelled: an operator cancelled the job while it ran
	// (terminal): the job is in the dead table already, the handler was
	// cancelled and its result will be discarded.
	claimCancelled
)

// heldJob is one job this worker holds, from its claim until its outcome is
// known.
type heldJob struct {
	id      int64
	attempt int32
	kind    string
	keyring *jobs.Keyring // the kind's (jobs.Encrypted): its steps' results are encrypted; nil: in the clear
	queue   *producer.Producer
	held    *heldJobs     // the set it is in while held
	keep    time.Duration // how long its completion stays in the history; 0: not kept
	keyed   bool          // a keyed job, or one under a shared limit, of a queue under flow control
	place   producer.Key  // where it stood in the ready order when claimed

	state    atomic.Int32    // a heldState
	txAck    completer.TxAck // what the handler's AckTx left on the claim
	slotFree atomic.Bool     // the queue's slot was given back

	// view is the job as middleware and hooks see it, nil when none is
	// registered; runErr is what its run returned, for the outcome hooks
	// (written by the run's goroutine before the result is handed on).
	view   *jobs.Row
	runErr error

	// durable is the job's durable records (Step, Sleep, AwaitEvent,
	// SetProgress), read at its handler's first call when it has any.
	durable durableCalls

	mu         sync.Mutex
	cancel     context.CancelCauseFunc
	started    time.Time // when the handler started
	hardStop   time.Time // abandon the handler after this; zero: never
	leaseFloor time.Time // the lease certainly holds until then (monotonic clock)
	// handlerDone: the handler returned; given up: the worker stopped
	// waiting for it (it is counted stuck until it returns). Both under mu,
	// so a handler returning just as it is given up is counted once or not
	// at all.
	handlerDone bool
	givenUp     bool
}

// ID, Attempt, Kind and TxAck are the claim as the completer records its
// result (completer.Job).
func (c *heldJob) ID() int64               { return c.id }
func (c *heldJob) Attempt() int32          { return c.attempt }
func (c *heldJob) Kind() string            { return c.kind }
func (c *heldJob) TxAck() *completer.TxAck { return &c.txAck }

func (c *heldJob) is(s heldState) bool { return heldState(c.state.Load()) == s }

func (c *heldJob) move(from, to heldState) bool {
	return c.state.CompareAndSwap(int32(from), int32(to))
}

// begin records the start of the handler and its context's cancel; the
// claim may have been lost or released before its handler got here, in
// which case the context is cancelled at once.
func (c *heldJob) begin(cancel context.CancelCauseFunc, started time.Time, timeout time.Duration) {
	c.mu.Lock()
	c.cancel = cancel
	c.started = started
	if timeout > 0 {
		c.hardStop = started.Add(timeout + c.held.abandonAfter)
	}
	c.mu.Unlock()
	switch heldState(c.state.Load()) {
	case claimLost:
		c.cancelWith(ErrLeaseLost)
	case claimReleased:
		c.cancelWith(ErrShutdown)
	case claimCancelled:
		c.cancelWith(ErrCancelled)
	}
}

// cancelWith cancels the handler's context. A handler that was told to
// stop gets AbandonAfter to do so, whatever its timeout: past that the
// heartbeat's stuck watch gives up on it and frees its slot, whether or
// not the worker still holds its job.
func (c *heldJob) cancelWith(cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel == nil {
		return // not started yet: begin cancels it
	}
	c.cancel(cause)
	if stop := time.Now().Add(c.held.abandonAfter); c.hardStop.IsZero() || stop.Before(c.hardStop) {
		c.hardStop = stop
	}
}

// Overdue reports whether the handler should have returned by now
// (heartbeat.Handler).
func (c *heldJob) Overdue(now time.Time) (due bool, ranFor time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.handlerDone && !c.hardStop.IsZero() && now.After(c.hardStop), now.Sub(c.started)
}

// LogAttrs names the job in the log (heartbeat.Handler).
func (c *heldJob) LogAttrs() []any {
	return []any{"job_id", c.id, "kind", c.kind, "queue", c.queue.Name(), "attempt", c.attempt}
}

// GiveUp stops waiting for the handler: its slot goes back to the queue and
// it is counted stuck until it returns. It reports false when the handler
// returned already or was given up on before (heartbeat.Handler).
func (c *heldJob) GiveUp() bool {
	c.mu.Lock()
	if c.handlerDone || c.givenUp {
		c.mu.Unlock()
		return false
	}
	c.givenUp = true
	c.mu.Unlock()
	c.freeSlot()
	c.held.metrics.abandoned(c.queue.Name(), c.kind)
	return true
}

// returned marks the handler returned and reports whether it had been given
// up on (its stuck count is then taken back).
func (c *heldJob) returned() (wasGivenUp bool) {
	c.mu.Lock()
	c.handlerDone = true
	wasGivenUp = c.givenUp
	c.mu.Unlock()
	if wasGivenUp {
		c.held.metrics.stuckReturned(c.queue.Name(), c.kind)
	}
	return wasGivenUp
}

// leaseHeldUntil raises the time until which the lease certainly holds:
// the database set lease_until to at least its now() + lease, and its now()
// came after sent.
func (c *heldJob) leaseHeldUntil(sent time.Time, lease time.Duration) {
	c.mu.Lock()
	if t := sent.Add(lease); t.After(c.leaseFloor) {
		c.leaseFloor = t
	}
	c.mu.Unlock()
}

// LeaseHeldAt reports whether no one else could have taken the job before t
// (a moment on this process's monotonic clock).
func (c *heldJob) LeaseHeldAt(t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return t.Before(c.leaseFloor)
}

// freeSlot gives the claim's queue slot back, once.
func (c *heldJob) freeSlot() {
	if c.slotFree.CompareAndSwap(false, true) {
		c.queue.FreeSlot()
	}
}

// finish: running → finished, when the handler returned in time.
func (c *heldJob) finish() bool { return c.move(claimRunning, claimFinished) }

// recorded: finished → recorded; the claim leaves the set.
func (c *heldJob) recorded() {
	if c.move(claimFinished, claimRecorded) {
		c.held.remove(c)
		c.freeKey()
	}
}

// freeKey: the claim no longer takes its key's slot (its result is in, or
// the job was taken from it), so jobs of the key held back by its limit
// may be claimed. They stand after this one in the ready order, and the
// cursor may have passed them: it goes back to here. No wake-up announces
// them (nothing was inserted), so without this they would wait for the
// next full scan.
func (c *heldJob) freeKey() {
	if c.keyed {
		c.ReadyAgain()
	}
}

// ReadyAgain moves the queue's cursor back to the claim's place and wakes
// the claim loop: a job at or after that place became ready unannounced.
func (c *heldJob) ReadyAgain() {
	c.queue.Rewind(c.place)
	c.queue.Wake()
}

// lose: running → lost; the claim leaves the set (its lease is no longer
// extended) and its handler is cancelled.
func (c *heldJob) lose() bool {
	if !c.move(claimRunning, claimLost) {
		return false
	}
	c.held.remove(c)
	c.held.metrics.leaseLost(c.queue.Name(), c.kind)
	c.cancelWith(ErrLeaseLost)
	c.freeKey()
	return true
}

// cancelled: running → cancelled, when the worker learns that an operator
// cancelled the job; the claim leaves the set (there is no lease left to
// extend) and its handler is cancelled with ErrCancelled.
func (c *heldJob) cancelled() bool {
	if !c.move(claimRunning, claimCancelled) {
		return false
	}
	c.held.remove(c)
	c.held.metrics.outcome(c.queue.Name(), c.kind, OutcomeCancelled)
	c.cancelWith(ErrCancelled)
	c.freeKey()
	return true
}

// release: running → released, at the shutdown deadline; the handler is
// cancelled. The claim stays in the set until Release gave it back.
func (c *heldJob) release() bool {
	if !c.move(claimRunning, claimReleased) {
		return false
	}
	c.cancelWith(ErrShutdown)
	return true
}

// Abandon: running → abandoned, for a handler past its hard deadline. The
// claim leaves the set (no more lease extension), its slot is freed so the
// worker keeps its capacity, and the stuck handler is counted until it
// returns (GiveUp); heartbeat.Handler.
func (c *heldJob) Abandon() bool {
	if !c.move(claimRunning, claimAbandoned) {
		return false
	}
	c.held.remove(c)
	c.cancelWith(errAbandoned)
	c.GiveUp()
	return true
}

// heldKey names one claim: a worker that lost a job may claim it again.
type heldKey struct {
	id      int64
	attempt int32
}

// heldJobs holds the jobs this worker has claimed, whose leases the
// heartbeat extends (internal/worker/heartbeat's lease extension, every
// ExtendInterval): running and finished ones, and released ones until they
// are given back. A lease extended (by the lease extension or a handler's
// ExtendLease) that the database no longer holds for this worker is lost:
// its handler is cancelled.
//
// Invariants: a job is in jobs from its claim until its outcome is
// recorded, it is lost or cancelled, or it is given back; only jobs in it
// have their leases extended; every state change of a job goes through
// heldJob's methods.
type heldJobs struct {
	mu   sync.Mutex
	jobs map[heldKey]*heldJob

	q            *db.Queries
	log          *slog.Logger
	metrics      *metrics
	lease        time.Duration         // Config.LeaseDuration
	abandonAfter time.Duration         // Config.AbandonAfter
	dbtx         func(db.DBTX) db.DBTX // Worker.dbtx, for a job's AckTx
	// begin starts a transaction on the worker's pool, for a job's StepTx.
	begin func(context.Context) (pgx.Tx, error)
}

func newHeldJobs(q *db.Queries, log *slog.Logger, m *metrics, cfg *Config, dbtx func(db.DBTX) db.DBTX,
	begin func(context.Context) (pgx.Tx, error)) *heldJobs {
	return &heldJobs{jobs: map[heldKey]*heldJob{}, q: q, log: log, metrics: m,
		lease: cfg.LeaseDuration, abandonAfter: cfg.AbandonAfter, dbtx: dbtx, begin: begin}
}

// add holds row, claimed by p at sent; keyed: it takes its key's slot (see
// heldJob.keyed).
func (s *heldJobs) add(row db.HopperJob, p *producer.Producer, keyed bool, sent time.Time, keep time.Duration, keyring *jobs.Keyring) *heldJob {
	c := &heldJob{id: row.ID, attempt: row.Attempt, kind: row.Kind, keyring: keyring, queue: p, held: s, keep: keep,
		keyed: keyed, place: producer.KeyOf(row)}
	// A job not marked durable has no records: its first durable call
	// need not read them (a record made meanwhile by another run of the
	// job is found when this run's record at its position is refused).
	c.durable.loaded = !markedDurable(row.Meta)
	c.leaseHeldUntil(sent, s.lease)
	s.mu.Lock()
	s.jobs[heldKey{row.ID, row.Attempt}] = c
	s.mu.Unlock()
	return c
}

// get returns the claim (id, attempt), or nil.
func (s *heldJobs) get(id int64, attempt int32) *heldJob {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jobs[heldKey{id, attempt}]
}

func (s *heldJobs) remove(c *heldJob) {
	s.mu.Lock()
	delete(s.jobs, heldKey{c.id, c.attempt})
	s.mu.Unlock()
}

func (s *heldJobs) snapshot() []*heldJob {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*heldJob, 0, len(s.jobs))
	for _, c := range s.jobs {
		out = append(out, c)
	}
	return out
}

// releaseRunning moves every running claim to released, so that a handler
// finishing later cannot queue a result, and returns the claims it moved.
func (s *heldJobs) releaseRunning() []*heldJob {
	var moved []*heldJob
	for _, c := range s.snapshot() {
		if c.release() {
			moved = append(moved, c)
		}
	}
	return moved
}

// takeReleased removes and returns the released claims.
func (s *heldJobs) takeReleased() []*heldJob {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*heldJob
	for key, c := range s.jobs {
		if c.is(claimReleased) {
			out = append(out, c)
			delete(s.jobs, key)
		}
	}
	return out
}

// len is the number of claims held.
func (s *heldJobs) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.jobs)
}
