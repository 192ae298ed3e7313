package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/worker/completer"
)

// executor runs handlers: each job on a handler goroutine of
// its queue, under its own context, through the middleware and hooks
// (middleware.go), then turns what the handler returned into a verdict
// (verdict.go) and hands the result to the completer.
//
// Invariants: handlerWG counts dispatched jobs not yet executed to the end,
// poolWG every goroutine the executor started (handler goroutines and the
// rate claims' statements), so Run waits for both; inFlight holds exactly
// the jobs whose handler runs now, held or not, for the stuck watch.
type executor struct {
	q       *db.Queries
	log     *slog.Logger
	metrics *metrics
	cfg     *Config // middleware, hooks, the default backoff and timeout
	// results records results; report settles one at once (a result the
	// completer no longer takes, a job acked in the handler's transaction).
	results *completer.Completer
	report  func(completer.Completion, completer.Outcome)

	// handlerBase is the parent of every handler's context. It is never
	// cancelled, so a job's context does not register with it (one shared
	// parent with thousands of children was a hot lock); shutdown cancels
	// each running job's context instead. hard ends at the shutdown's hard
	// deadline.
	handlerBase context.Context
	hard        context.Context

	inFlight  handlerSet     // running handlers, held jobs or not
	handlerWG sync.WaitGroup // jobs being handled
	poolWG    sync.WaitGroup // handler goroutines
}

// newExecutor runs handlers under handlerBase, and the statements of the
// shutdown path under hard (Run's contexts).
func newExecutor(q *db.Queries, log *slog.Logger, m *metrics, cfg *Config, results *completer.Completer,
	report func(completer.Completion, completer.Outcome), handlerBase, hard context.Context) *executor {
	return &executor{q: q, log: log, metrics: m, cfg: cfg, results: results, report: report,
		handlerBase: handlerBase, hard: hard}
}

// timeoutError is the cause of a handler context whose run timed out. It
// is formatted only when read: every job carries one (TimeoutBy has a
// default), and formatting it per job showed in the worker's CPU.
type timeoutError struct{ after time.Duration }

func (e *timeoutError) Error() string { return fmt.Sprintf("hopper: job timed out after %v", e.after) }

func (e *executor) execute(d dispatched) {
	defer e.handlerWG.Done()
	c, row := d.job, d.row
	e.handlerStarting(d.rate)
	err := d.err
	var elapsed time.Duration
	var result json.RawMessage
	if d.call != nil {
		elapsed, result, err = e.run(d)
	}
	// Built only when something is logged: this is the hot path.
	log := func() *slog.Logger {
		return e.log.With("job_id", row.ID, "kind", row.Kind, "queue", row.Queue, "attempt", row.Attempt)
	}
	c.runErr = err
	wasGivenUp := d.call != nil && c.returned()
	if !c.finish() {
		switch committed, known := e.ackedInCommittedTx(c); {
		case committed:
			// The handler's AckTx committed before its job was taken from
			// it (abandoned as stuck, given back at shutdown): the job is
			// done, whatever happened to the claim since.
			e.report(completer.Completion{Job: c, Action: completer.ActionAck}, completer.OutcomeDone)
			c.freeSlot()
			return
		case !known:
			// The handler acked with AckTx, and whether that committed
			// could not be read: the job may be done, or run again once
			// its claim is gone. Not abandoned, released or lost: those
			// say it runs again.
			log().Warn("whether the handler's AckTx committed could not be read: its outcome is unconfirmed", "handler_error", err)
			e.report(completer.Completion{Job: c, Action: completer.ActionAck}, completer.OutcomeUnconfirmed)
			c.freeSlot()
			return
		}
		switch heldState(c.state.Load()) {
		case claimLost:
			log().Warn("lease lost while the handler ran: its result is discarded; the job runs again elsewhere", "handler_error", err)
			e.told(c, OutcomeRefused)
		case claimReleased:
			log().Info("job given back at shutdown: its result is discarded", "handler_error", err)
			e.metrics.outcome(c.queue.Name(), c.kind, OutcomeReleased)
			e.told(c, OutcomeReleased)
		case claimCancelled:
			log().Info("job cancelled while it ran: its result is discarded", "handler_error", err)
			e.told(c, OutcomeCancelled)
		case claimAbandoned:
			e.told(c, OutcomeAbandoned)
		}
		if wasGivenUp {
			log().Warn("abandoned handler returned at last: its result is discarded", "ran_for", elapsed, "handler_error", err)
		}
		c.freeSlot()
		return
	}
	c.freeSlot()
	e.metrics.ran(row.Queue, row.Kind, elapsed)
	comp := e.completion(d.h, row, c, err)
	switch comp.Action {
	case completer.ActionAck:
		comp.Keep = d.keep
		if d.keep > 0 {
			comp.Result = storableJSON(result)
		}
	case completer.ActionRetry, completer.ActionDead:
		log().Warn("job failed", failureAttrs(err, comp, row)...)
	}
	if !e.results.Push(comp) {
		e.report(comp, completer.OutcomeUnrecorded)
	}
}

// failureAttrs are the attributes of a failed run's log line: retry_in
// only when the job is retried, dead_reason only when it goes dead. A
// retry on the last attempt goes dead, as the finish statement records
// it ('out of attempts') and Judge says.
func failureAttrs(err error, comp completer.Completion, row db.HopperJob) []any {
	attrs := []any{"error", err}
	reason := comp.DeadReason
	switch {
	case comp.Action == completer.ActionRetry && row.Attempt >= row.MaxAttempts:
		reason = "out of attempts"
	case comp.Action == completer.ActionRetry:
		attrs = append(attrs, "retry_in", comp.Backoff)
	}
	if reason != "" {
		attrs = append(attrs, "dead_reason", reason)
	}
	return attrs
}

// run calls the handler with its own context: cancelled when the lease is
// lost, the job is cancelled, at the shutdown deadline, or after the run's
// timeout.
func (e *executor) run(d dispatched) (elapsed time.Duration, result json.RawMessage, err error) {
	ctx, cancel := context.WithCancelCause(e.handlerBase)
	defer cancel(nil)
	start := time.Now()
	d.job.begin(cancel, start, d.timeout)
	e.inFlight.add(d.job)
	defer e.inFlight.remove(d.job)
	ctx = context.WithValue(ctx, heldJobKey{}, d.job)
	if d.timeout > 0 {
		var cancelTimeout context.CancelFunc
		ctx, cancelTimeout = context.WithTimeoutCause(ctx, d.timeout, &timeoutError{d.timeout})
		defer cancelTimeout()
	}
	if d.job.view != nil {
		result, err = e.callHooked(ctx, d)
	} else {
		result, err = d.call(ctx)
	}
	err = readableError(err)
	if err != nil && d.timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("timed out after %v: %w", d.timeout, err)
	}
	if err != nil && d.job.view != nil {
		e.tellError(ctx, d.job.view, err)
	}
	return time.Since(start), result, err
}

// completion turns a handler's result into what the completer records.
func (e *executor) completion(h *handler, row db.HopperJob, c *heldJob, err error) completer.Completion {
	if err == nil {
		// A durable wait the handler did not return still suspends it:
		// its record is written, and acking the job would end it.
		if s := c.durable.pendingSuspension(); s != nil {
			err = s
		}
	}
	v := judge(err)
	comp := completer.Completion{Job: c, Action: v.act, Message: v.message, DeadReason: v.deadReason, Event: v.event}
	switch {
	case v.act == completer.ActionSnooze:
		comp.Backoff = max(time.Until(v.until), time.Millisecond) // a snoozed job waits, scheduled
	case v.act == completer.ActionRetry && v.retryAt:
		comp.Backoff = time.Until(v.until)
	case v.act == completer.ActionRetry:
		b := h.backoff
		if b == (Backoff{}) {
			b = e.cfg.RetryBackoff
		}
		comp.Backoff = b.Delay(int(row.Attempt))
	}
	comp.Backoff = max(comp.Backoff, 0)
	return comp
}

// ackedInCommittedTx reports whether the claim's handler acked its job
// with AckTx in a transaction that committed (its row is gone), and
// whether that is known: false when the handler's AckTx could not be
// read.
func (e *executor) ackedInCommittedTx(c *heldJob) (committed, known bool) {
	if !c.txAck.Made() {
		return c.txAck.Committed(), true
	}
	ctx, cancel := context.WithTimeout(e.hard, statementTimeout(e.cfg.LeaseDuration))
	defer cancel()
	if err := completer.ReadTxAcks(ctx, e.q, []completer.Job{c}); err != nil {
		e.log.Warn("reading whether a handler's AckTx committed failed", "job_id", c.id, "error", err)
		return false, false
	}
	return c.txAck.Committed(), true
}
