package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/hopperq/hopper/db"
)

// action is what recording a result does to its job.
type action int

const (
	// actAck: the handler succeeded; the job is deleted (or kept in the
	// history).
	actAck action = iota
	// actRetry: the attempt failed; the job waits for its backoff, or is
	// dead when out of attempts.
	actRetry
	// actDead: a permanent failure (Permanent, an undecodable payload).
	actDead
	// actCancel: the handler cancelled its own job (Cancel).
	actCancel
	// actSnooze: the handler asked to run later, uncharged (Snooze).
	actSnooze
)

// sqlName is the action as NackBatch takes it (queries/finish.sql).
func (a action) sqlName() string {
	return [...]string{"ack", "retry", "dead", "cancel", "snooze"}[a]
}

// completion is a handler's result, waiting to be recorded.
type completion struct {
	job        *heldJob
	act        action
	message    string        // the history entry (retry, dead, cancel)
	backoff    time.Duration // how long the job waits (retry, snooze)
	deadReason string        // why it is dead (dead)
	// keep is how long the completed job stays in the history (0: it is
	// not kept), with the handler's result (ack).
	keep   time.Duration
	result json.RawMessage
	// ambiguous: an earlier try of its statement may have committed (the
	// reply was lost), so "no row matched" no longer proves a refusal.
	ambiguous bool
	// degraded counts the steps taken to make a result the server refused
	// storable (see refused.go).
	degraded int
	// event: a snooze that waits for this event (AwaitEvent), recorded by
	// SuspendForEvents rather than NackBatch.
	event string
}

func (c completion) ok() bool { return c.act == actAck }

// resultQueue hands results from handler goroutines to the completer. A
// push never blocks a handler; once the queue is closed at shutdown, a late
// result is reported unrecorded instead of being queued where no one reads.
type resultQueue struct {
	mu     sync.Mutex
	items  []completion
	spare  []completion // a batch the completer is done with, for the next items
	closed bool
	ready  chan struct{} // something to flush
	full   chan struct{} // a whole batch is waiting
	batch  int
}

func newResultQueue(batch int) *resultQueue {
	return &resultQueue{ready: make(chan struct{}, 1), full: make(chan struct{}, 1), batch: batch}
}

func (q *resultQueue) push(c completion) bool {
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
			q.items = make([]completion, 0, min(q.batch, 256))
		}
	}
	q.items = append(q.items, c)
	if len(q.items) == 1 {
		signal(q.ready)
	}
	if len(q.items) == q.batch {
		signal(q.full)
	}
	return true
}

// take removes up to one batch.
func (q *resultQueue) take() []completion {
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
func (q *resultQueue) recycle(batch []completion) {
	clear(batch[:cap(batch)]) // let go of the held jobs it points to
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.spare == nil || cap(batch) > cap(q.spare) {
		q.spare = batch[:0]
	}
}

// close refuses further pushes and returns what is left.
func (q *resultQueue) close() []completion {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	out := q.items
	q.items = nil
	return out
}

// completer records handlers' results exactly: in batches (one AckBatch
// and, when something failed, one NackBatch per flush), retrying while the
// database is unreachable, and settling every result with the outcome the
// database proves (see outcome.go). Handlers hand it results with push; run
// drains them until shutdown.
//
// Invariant: every pushed result is settled exactly once through report,
// as recorded, refused, unconfirmed or unrecorded; none is dropped.
type completer struct {
	q          *db.Queries
	log        *slog.Logger
	batchSize  int           // Config.AckBatchSize
	flushEvery time.Duration // Config.AckFlushInterval: the longest a result waits for its batch
	timeout    time.Duration // bound of one recording statement (statementTimeout)
	// report settles a result: counts it, logs it, tells the hooks and
	// retires its held job.
	report  func(completion, outcome)
	guard   *readOnlyGuard // a refusal as read-only resets the pool
	results *resultQueue
	// hard ends at the shutdown's hard deadline: past it nothing more is
	// sent and unsettled results are given up.
	hard context.Context
}

// newCompleter prepares a completer recording on q with cfg's batching,
// until the hard deadline ends hard.
func newCompleter(q *db.Queries, log *slog.Logger, cfg *Config, report func(completion, outcome), guard *readOnlyGuard, hard context.Context) *completer {
	return &completer{
		q: q, log: log, report: report, guard: guard,
		batchSize: cfg.AckBatchSize, flushEvery: cfg.AckFlushInterval,
		timeout: statementTimeout(cfg.LeaseDuration),
		results: newResultQueue(cfg.AckBatchSize),
		hard:    hard,
	}
}

// push hands a result over; false when the completer has stopped taking
// results (the shutdown closed its queue).
func (cp *completer) push(c completion) bool { return cp.results.push(c) }

// run records results in batches: a flush when a batch is full or
// flushEvery after its first result. When stop closes it records what is
// left and returns; the hard deadline ends the shutdown's last tries.
func (cp *completer) run(stop <-chan struct{}) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-cp.results.ready:
		case <-stop:
			cp.flushAll(cp.results.close())
			return
		}
		timer.Reset(cp.flushEvery)
		select {
		case <-timer.C:
		case <-cp.results.full:
			timer.Stop()
		case <-stop:
			timer.Stop()
		}
		for {
			batch := cp.results.take()
			if len(batch) == 0 {
				break
			}
			cp.flush(batch)
			// Every result of the batch is settled, and record and its
			// helpers keep none of its slices: the queue may reuse it.
			cp.results.recycle(batch)
		}
	}
}

func (cp *completer) flushAll(rest []completion) {
	for len(rest) > 0 {
		n := min(len(rest), cp.batchSize)
		cp.flush(rest[:n])
		rest = rest[n:]
	}
}

// statementTimeout bounds one recording statement. It is never a fraction
// of a short lease: a statement cut off by the client may still commit,
// and then only a second look at the database can tell what happened.
func statementTimeout(lease time.Duration) time.Duration { return max(lease, 10*time.Second) }

// flush records a batch, retrying while the database is unreachable, until
// every result is settled. It gives up only when the shutdown's hard
// deadline passes (hard ends): unsettled results are then unconfirmed
// (a try may have committed) or unrecorded (none did).
func (cp *completer) flush(batch []completion) {
	pending := batch
	for failures := 0; len(pending) > 0; failures++ {
		if failures > 0 {
			delay := retryDelay(failures)
			cp.log.Warn("recording results failed; retrying", "jobs", len(pending), "in", delay)
			sleep(cp.hard, delay)
		}
		if cp.hard.Err() != nil {
			// Past the hard deadline nothing more is sent: a statement
			// started now would fail before leaving the process, which
			// proves nothing about earlier tries.
			cp.giveUp(pending)
			return
		}
		pending = cp.record(pending)
	}
}

// giveUp settles results that can no longer be recorded: unconfirmed when
// an earlier try may have committed, unrecorded when none did.
func (cp *completer) giveUp(pending []completion) {
	for _, c := range pending {
		switch {
		case c.ok() && c.job.ackCommitted.Load():
			cp.report(c, outcomeDone) // the handler's AckTx committed: proven already
		case c.ambiguous || c.job.ackedInTx.Load():
			cp.report(c, outcomeUnconfirmed)
		default:
			cp.report(c, outcomeUnrecorded)
		}
	}
}

// record runs the statements for the results given and settles what it
// can; it returns the results still to be tried again.
func (cp *completer) record(batch []completion) (again []completion) {
	batch, again = cp.settleAckedInTx(batch)
	if allAcks(batch) {
		// The common case, sorted without a copy.
		var unsure []completion
		if len(batch) > 0 {
			again, unsure = cp.recordAcks(batch, again, nil)
		}
		if len(unsure) > 0 {
			again = append(again, cp.resolve(unsure)...)
		}
		return again
	}
	var acks, nacks, waits []completion
	for _, c := range batch {
		switch {
		case c.ok():
			acks = append(acks, c)
		case c.act == actSnooze && c.event != "":
			waits = append(waits, c)
		default:
			nacks = append(nacks, c)
		}
	}
	var unsure []completion // no row matched, and that alone proves nothing
	if len(acks) > 0 {
		again, unsure = cp.recordAcks(acks, again, unsure)
	}
	if len(nacks) > 0 {
		again, unsure = cp.recordNacks(nacks, again, unsure)
	}
	if len(waits) > 0 {
		again, unsure = cp.recordWaits(waits, again, unsure)
	}
	if len(unsure) > 0 {
		again = append(again, cp.resolve(unsure)...)
	}
	return again
}

func allAcks(batch []completion) bool {
	for _, c := range batch {
		if !c.ok() {
			return false
		}
	}
	return true
}

func (cp *completer) statementContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(cp.hard, cp.timeout)
}

// settleFailed marks results whose statement failed: they are tried again,
// as ambiguous unless the failure proves nothing was committed.
func settleFailed(cs []completion, err error, again []completion) []completion {
	ambiguous := !notSent(err)
	for _, c := range cs {
		c.ambiguous = c.ambiguous || ambiguous
		again = append(again, c)
	}
	return again
}

// ackBatch deletes the jobs of successful results, keeping in the history
// those whose kind or queue keeps it (AckBatchKeep: same statement, same
// round trip). A batch that keeps nothing runs plain AckBatch, so history
// costs nothing where it is off. It returns the claims it deleted.
func ackBatch(ctx context.Context, q *db.Queries, acks []completion) (map[heldKey]bool, error) {
	deleted := make(map[heldKey]bool, len(acks))
	ids, attempts := make([]int64, len(acks)), make([]int32, len(acks))
	keeps := false
	for i, c := range acks {
		ids[i], attempts[i] = c.job.id, c.job.attempt
		keeps = keeps || c.keep > 0
	}
	if !keeps {
		rows, err := q.AckBatch(ctx, db.AckBatchParams{Ids: ids, Attempts: attempts})
		for _, r := range rows {
			deleted[heldKey{r.ID, r.Attempt}] = true
		}
		return deleted, err
	}
	p := db.AckBatchKeepParams{Ids: ids, Attempts: attempts, KeepMs: make([]int64, len(acks)), Results: make([]json.RawMessage, len(acks))}
	for i, c := range acks {
		p.KeepMs[i], p.Results[i] = c.keep.Milliseconds(), c.result
	}
	rows, err := q.AckBatchKeep(ctx, p)
	for _, r := range rows {
		deleted[heldKey{r.ID, r.Attempt}] = true
	}
	return deleted, err
}

func (cp *completer) recordAcks(acks []completion, again, unsure []completion) ([]completion, []completion) {
	ctx, cancel := cp.statementContext()
	deleted, err := ackBatch(ctx, cp.q, acks)
	cancel()
	if code, ok := refusedForItsData(err); ok {
		return cp.splitAcks(acks, code, again, unsure)
	}
	if err != nil {
		cp.guard.check(err)
		cp.log.Warn("ack batch failed", "jobs", len(acks), "error", err)
		return settleFailed(acks, err, again), unsure
	}
	for _, c := range acks {
		switch {
		case deleted[heldKey{c.job.id, c.job.attempt}]:
			cp.report(c, outcomeDone)
		case c.job.ackCommitted.Load():
			cp.report(c, outcomeDone)
		default:
			// No row matched: the lease was lost, an operator cancelled
			// the job, or an earlier try of ours took effect. Only what
			// the row became tells which.
			unsure = append(unsure, c)
		}
	}
	return again, unsure
}

// settleAckedInTx reads what became of the rows the handlers deleted with
// AckTx (readAckTxFates). A row gone is the job's outcome, whatever the
// handler returned afterwards: done. A row still there after a rollback
// (whole, or to a savepoint before the ack) leaves the result to the
// normal path, as if AckTx had never run. A row still live on a new
// timeline was lost with the handler's transaction in a failover: the job
// runs again, uncharged (a snooze), whatever the handler returned. A row
// that could not be read is asked about again.
func (cp *completer) settleAckedInTx(batch []completion) (rest, again []completion) {
	var claims []*heldJob
	for _, c := range batch {
		if c.job.ackedInTx.Load() {
			claims = append(claims, c.job)
		}
	}
	if len(claims) == 0 {
		return batch, nil // the common case: nothing to ask, nothing copied
	}
	ctx, cancel := cp.statementContext()
	err := readAckTxFates(ctx, cp.q, claims)
	cancel()
	if err != nil {
		cp.log.Warn("reading what became of handlers' AckTx failed", "jobs", len(claims), "error", err)
	}
	for _, c := range batch {
		switch {
		case c.job.ackCommitted.Load():
			cp.report(c, outcomeDone)
		case c.job.ackedInTx.Load():
			again = append(again, c) // not read: ask again
		case c.job.ackLost.Load():
			cp.log.Warn("the handler's AckTx transaction was lost in a failover (its job is still live on the new timeline): the job runs again, uncharged",
				"job_id", c.job.id, "attempt", c.job.attempt)
			rest = append(rest, completion{job: c.job, act: actSnooze, backoff: time.Millisecond})
		default:
			rest = append(rest, c)
		}
	}
	return rest, again
}

func (cp *completer) recordNacks(nacks []completion, again, unsure []completion) ([]completion, []completion) {
	p := db.NackBatchParams{
		Ids: make([]int64, len(nacks)), Attempts: make([]int32, len(nacks)), Actions: make([]string, len(nacks)),
		Messages: make([]string, len(nacks)), BackoffsMs: make([]int64, len(nacks)), Reasons: make([]string, len(nacks)),
	}
	for i, c := range nacks {
		p.Ids[i], p.Attempts[i], p.Actions[i] = c.job.id, c.job.attempt, c.act.sqlName()
		p.Messages[i], p.BackoffsMs[i], p.Reasons[i] = c.message, c.backoff.Milliseconds(), c.deadReason
	}
	ctx, cancel := cp.statementContext()
	rows, err := cp.q.NackBatch(ctx, p)
	cancel()
	if code, ok := refusedForItsData(err); ok {
		return cp.splitNacks(nacks, code, again, unsure)
	}
	if err != nil {
		cp.guard.check(err)
		cp.log.Warn("nack batch failed", "jobs", len(nacks), "error", err)
		return settleFailed(nacks, err, again), unsure
	}
	taken := make(map[heldKey]bool, len(rows))
	for _, r := range rows {
		taken[heldKey{r.ID, r.Attempt}] = r.Dead
	}
	for _, c := range nacks {
		dead, ok := taken[heldKey{c.job.id, c.job.attempt}]
		switch {
		case ok:
			if !dead && c.act == actRetry && c.backoff == 0 {
				// Pending again at once, at a place the cursor may have
				// passed (a higher priority than the jobs claimed since),
				// and no insert announces it.
				c.job.readyAgain()
			}
			cp.report(c, c.act.outcome(dead))
		default:
			unsure = append(unsure, c) // refused, cancelled, or an earlier try took effect
		}
	}
	return again, unsure
}

// recordWaits gives back the claims of handlers that wait for an event
// (SuspendForEvents): until the deadline, or pending at once when the
// event came meanwhile.
func (cp *completer) recordWaits(waits []completion, again, unsure []completion) ([]completion, []completion) {
	p := db.SuspendForEventsParams{Ids: make([]int64, len(waits)), Attempts: make([]int32, len(waits)),
		Events: make([]string, len(waits)), WaitsMs: make([]int64, len(waits))}
	for i, c := range waits {
		p.Ids[i], p.Attempts[i], p.Events[i], p.WaitsMs[i] = c.job.id, c.job.attempt, c.event, c.backoff.Milliseconds()
	}
	ctx, cancel := cp.statementContext()
	rows, err := cp.q.SuspendForEvents(ctx, p)
	cancel()
	if err != nil {
		cp.guard.check(err)
		cp.log.Warn("suspending jobs that await events failed", "jobs", len(waits), "error", err)
		return settleFailed(waits, err, again), unsure
	}
	taken := make(map[heldKey]bool, len(rows))
	for _, r := range rows {
		taken[heldKey{r.ID, r.Attempt}] = r.Woken
	}
	for _, c := range waits {
		woken, ok := taken[heldKey{c.job.id, c.job.attempt}]
		switch {
		case !ok:
			unsure = append(unsure, c)
			continue
		case woken:
			c.job.readyAgain() // the event came meanwhile: pending at once, unannounced
		}
		cp.report(c, outcomeSnoozed)
	}
	return again, unsure
}

// resolve reads what became of claims whose statement matched no row after
// an earlier try may have committed (or after the handler's AckTx), and
// settles each from that. Whatever it cannot read yet is tried again.
func (cp *completer) resolve(unsure []completion) (again []completion) {
	p := db.ClaimFatesParams{Ids: make([]int64, len(unsure)), Attempts: make([]int32, len(unsure))}
	for i, c := range unsure {
		p.Ids[i], p.Attempts[i] = c.job.id, c.job.attempt
	}
	ctx, cancel := cp.statementContext()
	fates, err := cp.q.ClaimFates(ctx, p)
	cancel()
	if err != nil {
		cp.log.Warn("reading what became of unsure results failed", "jobs", len(unsure), "error", err)
		for _, c := range unsure {
			c.ambiguous = true // the retry's "no match" must be resolved again
			again = append(again, c)
		}
		return again
	}
	read := time.Now()
	byClaim := make(map[heldKey]db.ClaimFatesRow, len(fates))
	for _, f := range fates {
		byClaim[heldKey{f.ID, f.Attempt}] = f
	}
	for _, c := range unsure {
		f := byClaim[heldKey{c.job.id, c.job.attempt}]
		held := c.job.leaseHeldAt(read) || c.job.ackCommitted.Load()
		o := fateOfAck(f, held)
		if !c.ok() {
			o = fateOfNack(f, c.act, c.job.ackedInTx.Load(), held)
		}
		if !c.ambiguous && !c.job.ackedInTx.Load() && o != outcomeRetry && o != outcomeCancelled {
			// Only this try was ever sent, and it matched nothing: it had
			// no effect. The row was read only to tell an operator's
			// cancel from a lost lease.
			o = outcomeRefused
		}
		if o == outcomeRetry {
			again = append(again, c)
			continue
		}
		cp.report(c, o)
	}
	return again
}
