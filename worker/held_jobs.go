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
func (h *heldJob) ID() int64               { return h.id }
func (h *heldJob) Attempt() int32          { return h.attempt }
func (h *heldJob) Kind() string            { return h.kind }
func (h *heldJob) TxAck() *completer.TxAck { return &h.txAck }

func (h *heldJob) is(s heldState) bool { return heldState(h.state.Load()) == s }

func (h *heldJob) move(from, to heldState) bool {
	return h.state.CompareAndSwap(int32(from), int32(to))
}

// begin records the start of the handler and its context's cancel; the
// claim may have been lost or released before its handler got here, in
// which case the context is cancelled at once.
func (h *heldJob) begin(cancel context.CancelCauseFunc, started time.Time, timeout time.Duration) {
	h.mu.Lock()
	h.cancel = cancel
	h.started = started
	if timeout > 0 {
		h.hardStop = started.Add(timeout + h.held.abandonAfter)
	}
	h.mu.Unlock()
	switch heldState(h.state.Load()) {
	case claimLost:
		h.cancelWith(ErrLeaseLost)
	case claimReleased:
		h.cancelWith(ErrShutdown)
	case claimCancelled:
		h.cancelWith(ErrCancelled)
	}
}

// cancelWith cancels the handler's context. A handler that was told to
// stop gets AbandonAfter to do so, whatever its timeout: past that the
// heartbeat's stuck watch gives up on it and frees its slot, whether or
// not the worker still holds its job.
func (h *heldJob) cancelWith(cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancel == nil {
		return // not started yet: begin cancels it
	}
	h.cancel(cause)
	if stop := time.Now().Add(h.held.abandonAfter); h.hardStop.IsZero() || stop.Before(h.hardStop) {
		h.hardStop = stop
	}
}

// Overdue reports whether the handler should have returned by now
// (heartbeat.Handler).
func (h *heldJob) Overdue(now time.Time) (due bool, ranFor time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.handlerDone && !h.hardStop.IsZero() && now.After(h.hardStop), now.Sub(h.started)
}

// LogAttrs names the job in the log (heartbeat.Handler).
func (h *heldJob) LogAttrs() []any {
	return []any{"job_id", h.id, "kind", h.kind, "queue", h.queue.Name(), "attempt", h.attempt}
}

// GiveUp stops waiting for the handler: its slot goes back to the queue and
// it is counted stuck until it returns. It reports false when the handler
// returned already or was given up on before (heartbeat.Handler).
func (h *heldJob) GiveUp() bool {
	h.mu.Lock()
	if h.handlerDone || h.givenUp {
		h.mu.Unlock()
		return false
	}
	h.givenUp = true
	h.mu.Unlock()
	h.freeSlot()
	h.held.metrics.abandoned(h.queue.Name(), h.kind)
	return true
}

// returned marks the handler returned and reports whether it had been given
// up on (its stuck count is then taken back).
func (h *heldJob) returned() (wasGivenUp bool) {
	h.mu.Lock()
	h.handlerDone = true
	wasGivenUp = h.givenUp
	h.mu.Unlock()
	if wasGivenUp {
		h.held.metrics.stuckReturned(h.queue.Name(), h.kind)
	}
	return wasGivenUp
}

// leaseHeldUntil raises the time until which the lease certainly holds:
// the database set lease_until to at least its now() + lease, and its now()
// came after sent.
func (h *heldJob) leaseHeldUntil(sent time.Time, lease time.Duration) {
	h.mu.Lock()
	if t := sent.Add(lease); t.After(h.leaseFloor) {
		h.leaseFloor = t
	}
	h.mu.Unlock()
}

// LeaseHeldAt reports whether no one else could have taken the job before t
// (a moment on this process's monotonic clock).
func (h *heldJob) LeaseHeldAt(t time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return t.Before(h.leaseFloor)
}

// freeSlot gives the claim's queue slot back, once.
func (h *heldJob) freeSlot() {
	if h.slotFree.CompareAndSwap(false, true) {
		h.queue.FreeSlot()
	}
}

// finish: running → finished, when the handler returned in time.
func (h *heldJob) finish() bool { return h.move(claimRunning, claimFinished) }

// recorded: finished → recorded; the claim leaves the set.
func (h *heldJob) recorded() {
	if h.move(claimFinished, claimRecorded) {
		h.held.remove(h)
		h.freeKey()
	}
}

// freeKey: the claim no longer takes its key's slot (its result is in, or
// the job was taken from it), so jobs of the key held back by its limit
// may be claimed. They stand after this one in the ready order, and the
// cursor may have passed them: it goes back to here. No wake-up announces
// them (nothing was inserted), so without this they would wait for the
// next full scan.
func (h *heldJob) freeKey() {
	if h.keyed {
		h.ReadyAgain()
	}
}

// ReadyAgain moves the queue's cursor back to the claim's place and wakes
// the claim loop: a job at or after that place became ready unannounced.
func (h *heldJob) ReadyAgain() {
	h.queue.Rewind(h.place)
	h.queue.Wake()
}

// lose: running → lost; the claim leaves the set (its lease is no longer
// extended) and its handler is cancelled.
func (h *heldJob) lose() bool {
	if !h.move(claimRunning, claimLost) {
		return false
	}
	h.held.remove(h)
	h.held.metrics.leaseLost(h.queue.Name(), h.kind)
	h.cancelWith(ErrLeaseLost)
	h.freeKey()
	return true
}

// cancelled: running → cancelled, when the worker learns that an operator
// cancelled the job; the claim leaves the set (there is no lease left to
// extend) and its handler is cancelled with ErrCancelled.
func (h *heldJob) cancelled() bool {
	if !h.move(claimRunning, claimCancelled) {
		return false
	}
	h.held.remove(h)
	h.held.metrics.outcome(h.queue.Name(), h.kind, OutcomeCancelled)
	h.cancelWith(ErrCancelled)
	h.freeKey()
	return true
}

// release: running → released, at the shutdown deadline; the handler is
// cancelled. The claim stays in the set until Release gave it back.
func (h *heldJob) release() bool {
	if !h.move(claimRunning, claimReleased) {
		return false
	}
	h.cancelWith(ErrShutdown)
	return true
}

// Abandon: running → abandoned, for a handler past its hard deadline. The
// claim leaves the set (no more lease extension), its slot is freed so the
// worker keeps its capacity, and the stuck handler is counted until it
// returns (GiveUp); heartbeat.Handler.
func (h *heldJob) Abandon() bool {
	if !h.move(claimRunning, claimAbandoned) {
		return false
	}
	h.held.remove(h)
	h.cancelWith(errAbandoned)
	h.GiveUp()
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
func (h *heldJobs) add(row db.HopperJob, p *producer.Producer, keyed bool, sent time.Time, keep time.Duration, keyring *jobs.Keyring) *heldJob {
	c := &heldJob{id: row.ID, attempt: row.Attempt, kind: row.Kind, keyring: keyring, queue: p, held: h, keep: keep,
		keyed: keyed, place: producer.KeyOf(row)}
	// A job not marked durable has no records: its first durable call
	// need not read them (a record made meanwhile by another run of the
	// job is found when this run's record at its position is refused).
	c.durable.loaded = !markedDurable(row.Meta)
	c.leaseHeldUntil(sent, h.lease)
	h.mu.Lock()
	h.jobs[heldKey{row.ID, row.Attempt}] = c
	h.mu.Unlock()
	return c
}

// get returns the claim (id, attempt), or nil.
func (h *heldJobs) get(id int64, attempt int32) *heldJob {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.jobs[heldKey{id, attempt}]
}

// holding reports, of the claims held now, whether (id, attempt) is one
// (producer.Config.Held): read only after a claim's commit had an unknown
// outcome.
func (h *heldJobs) holding() func(id int64, attempt int32) bool {
	h.mu.Lock()
	now := make(map[heldKey]bool, len(h.jobs))
	for k := range h.jobs {
		now[k] = true
	}
	h.mu.Unlock()
	return func(id int64, attempt int32) bool { return now[heldKey{id, attempt}] }
}

func (h *heldJobs) remove(c *heldJob) {
	h.mu.Lock()
	delete(h.jobs, heldKey{c.id, c.attempt})
	h.mu.Unlock()
}

func (h *heldJobs) snapshot() []*heldJob {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*heldJob, 0, len(h.jobs))
	for _, c := range h.jobs {
		out = append(out, c)
	}
	return out
}

// releaseRunning moves every running claim to released, so that a handler
// finishing later cannot queue a result, and returns the claims it moved.
func (h *heldJobs) releaseRunning() []*heldJob {
	var moved []*heldJob
	for _, c := range h.snapshot() {
		if c.release() {
			moved = append(moved, c)
		}
	}
	return moved
}

// takeReleased removes and returns the released claims.
func (h *heldJobs) takeReleased() []*heldJob {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*heldJob
	for key, c := range h.jobs {
		if c.is(claimReleased) {
			out = append(out, c)
			delete(h.jobs, key)
		}
	}
	return out
}

// len is the number of claims held.
func (h *heldJobs) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.jobs)
}
