package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/worker/completer"
	"github.com/hopperq/hopper/internal/worker/executor"
)

// The executor (internal/worker/executor) runs each job's handler on a
// goroutine of its queue, under its own context; what runs the handler
// (call: the job's context value, the middleware and hooks, middleware.go)
// and what becomes of its return (finish: a verdict, verdict.go, handed
// to the completer) are the worker's, given to the executor as funcs.

// newExecutor builds the run's executor: a queue of handler goroutines
// for each queue served, every handler's context under handlerBase.
func (r *run) newExecutor(handlerBase context.Context) (*runExecutor, error) {
	return executor.New(executor.Config[dispatched, *heldJob]{
		Queues: slices.Collect(maps.Keys(r.w.cfg.Queues)), Base: handlerBase,
		Begin: (*heldJob).begin, Start: r.handlerStarting, Call: r.call, Failed: r.failed, Finish: r.finish,
	})
}

// call runs a job's handler under ctx, which carries the job for its own
// calls (ExtendLease, AckTx): through the middleware and hooks when any
// would see it.
func (r *run) call(ctx context.Context, d dispatched) (result json.RawMessage, err error) {
	ctx = context.WithValue(ctx, heldJobKey{}, d.job)
	if d.job.view != nil {
		result, err = r.callHooked(ctx, d)
	} else {
		result, err = d.call(ctx)
	}
	return result, readableError(err)
}

// failed tells the error hooks of a run that returned an error, under
// its context.
func (r *run) failed(ctx context.Context, d dispatched, err error) {
	if d.job.view != nil {
		r.tellError(context.WithValue(ctx, heldJobKey{}, d.job), d.job.view, err)
	}
}

// finish settles what a job's run returned (res; nothing ran when its
// payload did not decode): a result discarded when the job was taken
// from the handler, else its verdict handed to the completer.
func (r *run) finish(d dispatched, res executor.Result) {
	c, row := d.job, d.row
	err, elapsed, result := d.err, res.Elapsed, res.Value
	if res.Ran {
		err = res.Err
	}
	// Built only when something is logged: this is the hot path.
	log := func() *slog.Logger {
		return r.w.log.With("job_id", row.ID, "kind", row.Kind, "queue", row.Queue, "attempt", row.Attempt)
	}
	c.runErr = err
	wasGivenUp := d.call != nil && c.returned()
	if !c.finish() {
		switch committed, known := r.ackedInCommittedTx(c); {
		case committed:
			// The handler's AckTx committed before its job was taken from
			// it (abandoned as stuck, given back at shutdown): the job is
			// done, whatever happened to the claim since.
			r.report(completer.Completion{Job: c, Action: completer.ActionAck}, completer.OutcomeDone)
			c.freeSlot()
			return
		case !known:
			// The handler acked with AckTx, and whether that committed
			// could not be read: the job may be done, or run again once
			// its claim is gone. Not abandoned, released or lost: those
			// say it runs again.
			log().Warn("whether the handler's AckTx committed could not be read: its outcome is unconfirmed", "handler_error", err)
			r.report(completer.Completion{Job: c, Action: completer.ActionAck}, completer.OutcomeUnconfirmed)
			c.freeSlot()
			return
		}
		switch heldState(c.state.Load()) {
		case claimLost:
			log().Warn("lease lost while the handler ran: its result is discarded; the job runs again elsewhere", "handler_error", err)
			r.told(c, OutcomeRefused)
		case claimReleased:
			log().Info("job given back at shutdown: its result is discarded", "handler_error", err)
			r.w.metrics.outcome(c.queue.Name(), c.kind, OutcomeReleased)
			r.told(c, OutcomeReleased)
		case claimCancelled:
			log().Info("job cancelled while it ran: its result is discarded", "handler_error", err)
			r.told(c, OutcomeCancelled)
		case claimAbandoned:
			r.told(c, OutcomeAbandoned)
		}
		if wasGivenUp {
			log().Warn("abandoned handler returned at last: its result is discarded", "ran_for", elapsed, "handler_error", err)
		}
		c.freeSlot()
		return
	}
	c.freeSlot()
	r.w.metrics.ran(row.Queue, row.Kind, elapsed)
	comp := r.completion(d.h, row, c, err)
	switch comp.Action {
	case completer.ActionAck:
		comp.Keep = d.keep
		if d.keep > 0 {
			comp.Result = storableJSON(result)
		}
	case completer.ActionRetry, completer.ActionDead:
		log().Warn("job failed", failureAttrs(err, comp, row)...)
	}
	if !r.completer.Push(comp) {
		r.report(comp, completer.OutcomeUnrecorded)
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

// completion turns a handler's result into what the completer records.
func (r *run) completion(h *handler, row db.HopperJob, c *heldJob, err error) completer.Completion {
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
			b = r.w.cfg.RetryBackoff
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
func (r *run) ackedInCommittedTx(c *heldJob) (committed, known bool) {
	if !c.txAck.Made() {
		return c.txAck.Committed(), true
	}
	ctx, cancel := context.WithTimeout(r.hard, statementTimeout(r.w.cfg.LeaseDuration))
	defer cancel()
	if err := completer.ReadTxAcks(ctx, r.w.q, []completer.Job{c}); err != nil {
		r.w.log.Warn("reading whether a handler's AckTx committed failed", "job_id", c.id, "error", err)
		return false, false
	}
	return c.txAck.Committed(), true
}
