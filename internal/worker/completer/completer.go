// Package completer records handlers' results exactly: in batches, each
// result settled with the outcome the database proves (see outcome.go),
// a batch the server refuses for what it carries split until the bad
// result stands alone (refused.go), a batch whose commit's outcome is
// unknown (commitfate.Unknown: a lost reply, a commit Citus could not see
// through) settled from what its claims became before anything is sent
// again (checkUnknown), and the fate of a handler's own ack in its
// transaction read before anything else is decided (tx_ack.go).
package completer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/worker/commitfate"
	"github.com/hopperq/hopper/internal/worker/loop"
)

// Job is a claim whose result the completer records: the worker's held
// job.
type Job interface {
	// ID and Attempt fence every statement: a result takes effect only
	// on the claim (id, attempt) it belongs to.
	ID() int64
	Attempt() int32
	Kind() string // for the logs
	// TxAck is what the handler's AckTx left on the claim.
	TxAck() *TxAck
	// LeaseHeldAt reports whether no one else could have taken the job
	// before t (a moment on this process's monotonic clock).
	LeaseHeldAt(t time.Time) bool
	// ReadyAgain tells the job's queue that the job became pending again
	// unannounced (a retry without backoff, a wait whose event came):
	// its claim loop must look back for it.
	ReadyAgain()
}

// claimKey is one claim: a job and the attempt it was claimed for.
type claimKey struct {
	id      int64
	attempt int32
}

func keyOf(j Job) claimKey { return claimKey{j.ID(), j.Attempt()} }

// Action is what recording a result does to its job.
type Action int

const (
	// ActionAck: the handler succeeded; the job is deleted (or kept in
	// the history).
	ActionAck Action = iota
	// ActionRetry: the attempt failed; the job waits for its backoff, or
	// is dead when out of attempts.
	ActionRetry
	// ActionDead: a permanent failure (Permanent, an undecodable payload).
	ActionDead
	// ActionCancel: the handler cancelled its own job (Cancel).
	ActionCancel
	// ActionSnooze: the handler asked to run later, uncharged (Snooze).
	ActionSnooze
)

// sqlName is the action as NackBatch takes it (queries/finish.sql).
func (a Action) sqlName() string {
	return [...]string{"ack", "retry", "dead", "cancel", "snooze"}[a]
}

// Completion is a handler's result, waiting to be recorded.
type Completion struct {
	Job        Job
	Action     Action
	Message    string        // the history entry (retry, dead, cancel)
	Backoff    time.Duration // how long the job waits (retry, snooze)
	DeadReason string        // why it is dead (dead)
	// Keep is how long the completed job stays in the history (0: it is
	// not kept), with the handler's Result (ack).
	Keep   time.Duration
	Result json.RawMessage
	// Event: a snooze that waits for this event (AwaitEvent), recorded by
	// SuspendForEvents rather than NackBatch.
	Event string

	// ambiguous: an earlier try of its statement may have committed (the
	// reply was lost), so "no row matched" no longer proves a refusal.
	ambiguous bool
	// unknown: the last try's outcome is unknown (commitfate.Unknown):
	// the next try first reads what took effect (checkUnknown) and sends
	// the statement again only for a claim still intact.
	unknown bool
	// degraded counts the steps taken to make a result the server refused
	// storable (see refused.go).
	degraded int
}

func (c Completion) ok() bool { return c.Action == ActionAck }

// resultQueue hands results from handler goroutines to the completer. A
// push never blocks a handler; once the queue is closed at shutdown, a late
// result is reported unrecorded instead of being queued where no one reads.
type resultQueue struct {
	mu     sync.Mutex
	items  []Completion
	spare  []Completion // a batch the completer is done with, for the next items
	closed bool
	ready  chan struct{} // something to flush
	full   chan struct{} // a whole batch is waiting
	batch  int
}

func newResultQueue(batch int) *resultQueue {
	return &resultQueue{ready: make(chan struct{}, 1), full: make(chan struct{}, 1), batch: batch}
}

func (q *resultQueue) push(res Completion) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	if q.items == nil {
		// The spare batch, or room for a new one: grown by append, or
		// made anew for every batch, a busy queue's results were a good
		// part of the worker's allocations.
		q.items, q.spare = q.spare, nil
		if q.items == nil {
			q.items = make([]Completion, 0, min(q.batch, 256))
		}
	}
	q.items = append(q.items, res)
	if len(q.items) == 1 {
		signal(q.ready)
	}
	if len(q.items) == q.batch {
		signal(q.full)
	}
	return true
}

// take removes up to one batch.
func (q *resultQueue) take() []Completion {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(len(q.items), q.batch)
	if n == len(q.items) {
		// The whole queue: it is handed over, not copied, and the next
		// push starts a new one.
		out := q.items
		q.items = nil
		return out
	}
	out := q.items[:n:n]
	q.items = q.items[n:]
	return out
}

// recycle takes back a batch that take returned once nothing refers to
// it any more: the next results are queued in it.
func (q *resultQueue) recycle(batch []Completion) {
	clear(batch[:cap(batch)]) // let go of the held jobs it points to
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.spare == nil || cap(batch) > cap(q.spare) {
		q.spare = batch[:0]
	}
}

// close refuses further pushes and returns what is left.
func (q *resultQueue) close() []Completion {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	out := q.items
	q.items = nil
	return out
}

// Config is what a Completer works with.
type Config struct {
	Queries *db.Queries
	// Log is the worker's logger; a statement that fails warns on it with
	// the error as "error", which the worker's logger tells as an outage
	// when the connection was lost.
	Log *slog.Logger
	// BatchSize is the worker's AckBatchSize: results per statement.
	// FlushEvery is its AckFlushInterval: the longest a result waits for
	// its batch.
	BatchSize  int
	FlushEvery time.Duration
	// StatementTimeout bounds one recording statement.
	StatementTimeout time.Duration
	// Report settles a result: counts it, logs it, tells the hooks and
	// retires its held job. It is called exactly once for every result
	// pushed, from the completer's goroutine.
	Report func(Completion, Outcome)
	// ReadOnly is told every error of a recording statement: when it is
	// a read-only server's refusal, it replaces the pool's sessions (the
	// worker's read-only guard), and the statement is tried again after
	// the usual pause.
	ReadOnly func(err error) bool
	// Hard ends at the shutdown's hard deadline: past it nothing more is
	// sent and unsettled results are given up.
	Hard context.Context
}

func (c *Config) validate() error {
	switch {
	case c.Queries == nil, c.Log == nil, c.Report == nil, c.ReadOnly == nil, c.Hard == nil:
		return errors.New("completer: Queries, Log, Report, ReadOnly and Hard are required")
	case c.BatchSize <= 0 || c.FlushEvery <= 0 || c.StatementTimeout <= 0:
		return fmt.Errorf("completer: BatchSize (%d), FlushEvery (%v) and StatementTimeout (%v) must be positive",
			c.BatchSize, c.FlushEvery, c.StatementTimeout)
	}
	return nil
}

// Completer records handlers' results exactly: in batches (one AckBatch
// and, when something failed, one NackBatch per flush), retrying while the
// database is unreachable, and settling every result with the outcome the
// database proves (see outcome.go). Handlers hand it results with Push;
// Run drains them until shutdown.
//
// A failed statement is refused (the server's error: no effect; tried
// again as it was, or split when it is refused for what it carries) or
// its commit's outcome is unknown: its results are then read first
// (ClaimFates) and only those whose claim is intact are sent again.
//
// Invariant: every pushed result is settled exactly once through
// cfg.Report, as recorded, refused, unconfirmed or unrecorded; none is
// dropped; a result is reported refused only when no try of it can have
// taken effect.
type Completer struct {
	cfg     Config
	results *resultQueue
}

// New returns a Completer working with cfg.
func New(cfg Config) (*Completer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Completer{cfg: cfg, results: newResultQueue(cfg.BatchSize)}, nil
}

// Push hands a result over; false when the completer has stopped taking
// results (the shutdown closed its queue).
func (c *Completer) Push(res Completion) bool { return c.results.push(res) }

// Run records results in batches: a flush when a batch is full or
// FlushEvery after its first result. When stop closes it records what is
// left and returns; the hard deadline ends the shutdown's last tries.
func (c *Completer) Run(stop <-chan struct{}) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-c.results.ready:
		case <-stop:
			c.flushAll(c.results.close())
			return
		}
		timer.Reset(c.cfg.FlushEvery)
		select {
		case <-timer.C:
		case <-c.results.full:
			timer.Stop()
		case <-stop:
			timer.Stop()
		}
		for {
			batch := c.results.take()
			if len(batch) == 0 {
				break
			}
			c.flush(batch)
			// Every result of the batch is settled, and record and its
			// helpers keep none of its slices: the queue may reuse it.
			c.results.recycle(batch)
		}
	}
}

func (c *Completer) flushAll(rest []Completion) {
	for len(rest) > 0 {
		n := min(len(rest), c.cfg.BatchSize)
		c.flush(rest[:n])
		rest = rest[n:]
	}
}

// report settles a result (Config.Report).
func (c *Completer) report(res Completion, o Outcome) { c.cfg.Report(res, o) }

// flush records a batch, retrying while the database is unreachable, until
// every result is settled. It gives up only when the shutdown's hard
// deadline passes (hard ends): unsettled results are then unconfirmed
// (a try may have committed) or unrecorded (none did).
func (c *Completer) flush(batch []Completion) {
	pending := batch
	for failures := 0; len(pending) > 0; failures++ {
		if failures > 0 {
			delay := loop.RetryDelay(failures)
			c.cfg.Log.Warn("recording results failed; retrying", "jobs", len(pending), "in", delay)
			loop.Sleep(c.cfg.Hard, delay)
		}
		if c.cfg.Hard.Err() != nil {
			// Past the hard deadline nothing more is sent: a statement
			// started now would fail before leaving the process, which
			// proves nothing about earlier tries.
			c.giveUp(pending)
			return
		}
		pending = c.record(pending)
	}
}

// giveUp settles results that can no longer be recorded: unconfirmed when
// an earlier try may have committed, unrecorded when none did.
func (c *Completer) giveUp(pending []Completion) {
	for _, res := range pending {
		switch {
		case res.ok() && res.Job.TxAck().Committed():
			c.report(res, OutcomeDone) // the handler's AckTx committed: proven already
		case res.ambiguous || res.Job.TxAck().Made():
			c.report(res, OutcomeUnconfirmed)
		default:
			c.report(res, OutcomeUnrecorded)
		}
	}
}

// record runs the statements for the results given and settles what it
// can; it returns the results still to be tried again.
func (c *Completer) record(batch []Completion) (again []Completion) {
	batch, again = c.checkUnknown(batch)
	batch, more := c.settleAckedInTx(batch)
	again = append(again, more...)
	if allAcks(batch) {
		// The common case, sorted without a copy.
		var unsure []Completion
		if len(batch) > 0 {
			again, unsure = c.recordAcks(batch, again, nil)
		}
		if len(unsure) > 0 {
			again = append(again, c.resolve(unsure)...)
		}
		return again
	}
	var acks, nacks, waits []Completion
	for _, res := range batch {
		switch {
		case res.ok():
			acks = append(acks, res)
		case res.Action == ActionSnooze && res.Event != "":
			waits = append(waits, res)
		default:
			nacks = append(nacks, res)
		}
	}
	var unsure []Completion // no row matched, and that alone proves nothing
	if len(acks) > 0 {
		again, unsure = c.recordAcks(acks, again, unsure)
	}
	if len(nacks) > 0 {
		again, unsure = c.recordNacks(nacks, again, unsure)
	}
	if len(waits) > 0 {
		again, unsure = c.recordWaits(waits, again, unsure)
	}
	if len(unsure) > 0 {
		again = append(again, c.resolve(unsure)...)
	}
	return again
}

func allAcks(batch []Completion) bool {
	for _, res := range batch {
		if !res.ok() {
			return false
		}
	}
	return true
}

func (c *Completer) statementContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.cfg.Hard, c.cfg.StatementTimeout)
}

// settleFailed marks results whose statement failed: they are tried again.
// A refusal (the server's error: the statement had no effect) leaves them
// as they were; a failure whose commit's outcome is unknown
// (commitfate.Unknown: a lost reply, a commit Citus could not see through)
// makes them ambiguous, and unknown: the next try reads first what took
// effect (checkUnknown).
func settleFailed(cs []Completion, err error, again []Completion) []Completion {
	unknown := commitfate.Unknown(err)
	for _, res := range cs {
		res.ambiguous = res.ambiguous || unknown
		res.unknown = unknown
		again = append(again, res)
	}
	return again
}

// checkUnknown settles, from what the database shows, the results whose
// last try's outcome is unknown: each is reported as what took effect
// (done, failed, dead, cancelled, snoozed; refused when another claim
// holds the job), and only those whose claim is intact (the job still
// running under it: nothing took effect) are returned in rest, to be sent
// again now. Those whose fate could not be read stay unknown, in again.
// A batch with no such result is returned as it is: the hot path reads
// nothing more.
func (c *Completer) checkUnknown(batch []Completion) (rest, again []Completion) {
	n := 0
	for _, res := range batch {
		if res.unknown {
			n++
		}
	}
	if n == 0 {
		return batch, nil
	}
	unknown := make([]Completion, 0, n)
	rest = make([]Completion, 0, len(batch))
	for _, res := range batch {
		if res.unknown {
			unknown = append(unknown, res)
		} else {
			rest = append(rest, res)
		}
	}
	intact, unread := c.settleFates(unknown)
	for _, res := range intact {
		res.unknown = false // still ambiguous: the earlier try may yet commit (its backend may still run it)
		rest = append(rest, res)
	}
	return rest, unread
}

// ackBatch deletes the jobs of successful results, keeping in the history
// those whose kind or queue keeps it (AckBatchKeep: same statement, same
// round trip). A batch that keeps nothing runs plain AckBatch, so history
// costs nothing where it is off. It returns the claims it deleted.
func ackBatch(ctx context.Context, q *db.Queries, acks []Completion) (map[claimKey]bool, error) {
	deleted := make(map[claimKey]bool, len(acks))
	ids, attempts := make([]int64, len(acks)), make([]int32, len(acks))
	keeps := false
	for i, res := range acks {
		ids[i], attempts[i] = res.Job.ID(), res.Job.Attempt()
		keeps = keeps || res.Keep > 0
	}
	if !keeps {
		rows, err := q.AckBatch(ctx, db.AckBatchParams{Ids: ids, Attempts: attempts})
		for _, r := range rows {
			deleted[claimKey{r.ID, r.Attempt}] = true
		}
		return deleted, err
	}
	p := db.AckBatchKeepParams{Ids: ids, Attempts: attempts, KeepMs: make([]int64, len(acks)), Results: make([]json.RawMessage, len(acks))}
	for i, res := range acks {
		p.KeepMs[i], p.Results[i] = res.Keep.Milliseconds(), res.Result
	}
	rows, err := q.AckBatchKeep(ctx, p)
	for _, r := range rows {
		deleted[claimKey{r.ID, r.Attempt}] = true
	}
	return deleted, err
}

// AckInTx deletes job's row on q, the handler's own transaction
// (worker.AckTx), keeping it in the history for keep when keep is
// positive, by the statement a batch of acks runs. It reports whether the
// claim matched: false when the job is no longer this claim's.
func AckInTx(ctx context.Context, q *db.Queries, job Job, keep time.Duration) (matched bool, err error) {
	deleted, err := ackBatch(ctx, q, []Completion{{Job: job, Keep: keep}})
	return len(deleted) > 0, err
}

func (c *Completer) recordAcks(acks []Completion, again, unsure []Completion) ([]Completion, []Completion) {
	ctx, cancel := c.statementContext()
	deleted, err := ackBatch(ctx, c.cfg.Queries, acks)
	cancel()
	if code, ok := refusedForItsData(err); ok {
		return c.splitAcks(acks, code, again, unsure)
	}
	if err != nil {
		c.cfg.ReadOnly(err)
		c.cfg.Log.Warn("ack batch failed", "jobs", len(acks), "error", err)
		return settleFailed(acks, err, again), unsure
	}
	for _, res := range acks {
		switch {
		case deleted[keyOf(res.Job)]:
			c.report(res, OutcomeDone)
		case res.Job.TxAck().Committed():
			c.report(res, OutcomeDone)
		default:
			// No row matched: the lease was lost, an operator cancelled
			// the job, or an earlier try of ours took effect. Only what
			// the row became tells which.
			unsure = append(unsure, res)
		}
	}
	return again, unsure
}

// settleAckedInTx reads what became of the rows the handlers deleted with
// AckTx (ReadTxAcks). A row gone is the job's outcome, whatever the
// handler returned afterwards: done. A row still there after a rollback
// (whole, or to a savepoint before the ack) leaves the result to the
// normal path, as if AckTx had never run. A row still live on a new
// timeline was lost with the handler's transaction in a failover: the job
// runs again, uncharged (a snooze), whatever the handler returned. A row
// that could not be read is asked about again.
func (c *Completer) settleAckedInTx(batch []Completion) (rest, again []Completion) {
	var claims []Job
	for _, res := range batch {
		if res.Job.TxAck().Made() {
			claims = append(claims, res.Job)
		}
	}
	if len(claims) == 0 {
		return batch, nil // the common case: nothing to ask, nothing copied
	}
	ctx, cancel := c.statementContext()
	err := ReadTxAcks(ctx, c.cfg.Queries, claims)
	cancel()
	if err != nil {
		c.cfg.Log.Warn("reading what became of handlers' AckTx failed", "jobs", len(claims), "error", err)
	}
	for _, res := range batch {
		switch {
		case res.Job.TxAck().Committed():
			c.report(res, OutcomeDone)
		case res.Job.TxAck().Made():
			again = append(again, res) // not read: ask again
		case res.Job.TxAck().Lost():
			c.cfg.Log.Warn("the handler's AckTx transaction was lost in a failover (its job is still live on the new timeline): the job runs again, uncharged",
				"job_id", res.Job.ID(), "attempt", res.Job.Attempt())
			rest = append(rest, Completion{Job: res.Job, Action: ActionSnooze, Backoff: time.Millisecond})
		default:
			rest = append(rest, res)
		}
	}
	return rest, again
}

func (c *Completer) recordNacks(nacks []Completion, again, unsure []Completion) ([]Completion, []Completion) {
	p := db.NackBatchParams{
		Ids: make([]int64, len(nacks)), Attempts: make([]int32, len(nacks)), Actions: make([]string, len(nacks)),
		Messages: make([]string, len(nacks)), BackoffsMs: make([]int64, len(nacks)), Reasons: make([]string, len(nacks)),
	}
	for i, res := range nacks {
		p.Ids[i], p.Attempts[i], p.Actions[i] = res.Job.ID(), res.Job.Attempt(), res.Action.sqlName()
		p.Messages[i], p.BackoffsMs[i], p.Reasons[i] = res.Message, res.Backoff.Milliseconds(), res.DeadReason
	}
	ctx, cancel := c.statementContext()
	rows, err := c.cfg.Queries.NackBatch(ctx, p)
	cancel()
	if code, ok := refusedForItsData(err); ok {
		return c.splitNacks(nacks, code, again, unsure)
	}
	if err != nil {
		c.cfg.ReadOnly(err)
		c.cfg.Log.Warn("nack batch failed", "jobs", len(nacks), "error", err)
		return settleFailed(nacks, err, again), unsure
	}
	taken := make(map[claimKey]bool, len(rows))
	for _, r := range rows {
		taken[claimKey{r.ID, r.Attempt}] = r.Dead
	}
	for _, res := range nacks {
		dead, ok := taken[keyOf(res.Job)]
		switch {
		case ok:
			if !dead && res.Action == ActionRetry && res.Backoff == 0 {
				// Pending again at once, at a place the cursor may have
				// passed (a higher priority than the jobs claimed since),
				// and no insert announces it.
				res.Job.ReadyAgain()
			}
			c.report(res, res.Action.outcome(dead))
		default:
			unsure = append(unsure, res) // refused, cancelled, or an earlier try took effect
		}
	}
	return again, unsure
}

// recordWaits gives back the claims of handlers that wait for an event
// (SuspendForEvents): until the deadline, or pending at once when the
// event came meanwhile.
func (c *Completer) recordWaits(waits []Completion, again, unsure []Completion) ([]Completion, []Completion) {
	p := db.SuspendForEventsParams{Ids: make([]int64, len(waits)), Attempts: make([]int32, len(waits)),
		Events: make([]string, len(waits)), WaitsMs: make([]int64, len(waits))}
	for i, res := range waits {
		p.Ids[i], p.Attempts[i], p.Events[i], p.WaitsMs[i] = res.Job.ID(), res.Job.Attempt(), res.Event, res.Backoff.Milliseconds()
	}
	ctx, cancel := c.statementContext()
	rows, err := c.cfg.Queries.SuspendForEvents(ctx, p)
	cancel()
	if err != nil {
		c.cfg.ReadOnly(err)
		c.cfg.Log.Warn("suspending jobs that await events failed", "jobs", len(waits), "error", err)
		return settleFailed(waits, err, again), unsure
	}
	taken := make(map[claimKey]bool, len(rows))
	for _, r := range rows {
		taken[claimKey{r.ID, r.Attempt}] = r.Woken
	}
	for _, res := range waits {
		woken, ok := taken[keyOf(res.Job)]
		switch {
		case !ok:
			unsure = append(unsure, res)
			continue
		case woken:
			res.Job.ReadyAgain() // the event came meanwhile: pending at once, unannounced
		}
		c.report(res, OutcomeSnoozed)
	}
	return again, unsure
}

// resolve reads what became of claims whose statement matched no row after
// an earlier try may have committed (or after the handler's AckTx), and
// settles each from that. Whatever it cannot read yet is tried again.
func (c *Completer) resolve(unsure []Completion) (again []Completion) {
	intact, unread := c.settleFates(unsure)
	return append(intact, unread...)
}

// settleFates reads what became of the claims of unsure and settles each
// result from that. It returns those whose claim is intact (nothing took
// effect yet) and, when the read failed, all of them as unread (made
// ambiguous and unknown: a retry's "no match" must be resolved again).
func (c *Completer) settleFates(unsure []Completion) (intact, unread []Completion) {
	p := db.ClaimFatesParams{Ids: make([]int64, len(unsure)), Attempts: make([]int32, len(unsure))}
	for i, res := range unsure {
		p.Ids[i], p.Attempts[i] = res.Job.ID(), res.Job.Attempt()
	}
	ctx, cancel := c.statementContext()
	fates, err := c.cfg.Queries.ClaimFates(ctx, p)
	cancel()
	if err != nil {
		c.cfg.Log.Warn("reading what became of unsure results failed", "jobs", len(unsure), "error", err)
		for _, res := range unsure {
			res.ambiguous = true // the retry's "no match" must be resolved again
			res.unknown = true
			unread = append(unread, res)
		}
		return nil, unread
	}
	read := time.Now()
	byClaim := make(map[claimKey]db.ClaimFatesRow, len(fates))
	for _, f := range fates {
		byClaim[claimKey{f.ID, f.Attempt}] = f
	}
	for _, res := range unsure {
		f := byClaim[keyOf(res.Job)]
		held := res.Job.LeaseHeldAt(read) || res.Job.TxAck().Committed()
		o := fateOfAck(f, held)
		if !res.ok() {
			o = fateOfNack(f, res.Action, res.Job.TxAck().Made(), held)
		}
		if !res.ambiguous && !res.Job.TxAck().Made() && o != outcomeUnsettled && o != OutcomeCancelled {
			// Only this try was ever sent, and it matched nothing: it had
			// no effect. The row was read only to tell an operator's
			// cancel from a lost lease.
			o = OutcomeRefused
		}
		if o == outcomeUnsettled {
			intact = append(intact, res)
			continue
		}
		if (o == OutcomeFailed || o == OutcomeSnoozed) && (res.Backoff == 0 || res.Event != "") {
			// Pending again at once, perhaps: unannounced, as in
			// recordNacks and recordWaits.
			res.Job.ReadyAgain()
		}
		c.report(res, o)
	}
	return intact, nil
}

// signal wakes the channel's reader without ever blocking: a wake-up
// already waiting stands for this one.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
