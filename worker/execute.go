package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hopperq/hopper/db"
)

// timeoutError is the cause of a handler context whose run timed out. It
// is formatted only when read: every job carries one (JobTimeout has a
// default), and formatting it per job showed in the worker's CPU.
type timeoutError struct{ after time.Duration }

func (e *timeoutError) Error() string { return fmt.Sprintf("hopper: job timed out after %v", e.after) }

// errAbandoned is the cause of the context of a handler given up on.
var errAbandoned = errors.New("hopper: handler abandoned past its timeout")

// handlerLoop runs jobs of one queue until the queue's dispatch closes.
func (w *Worker) handlerLoop(qr *queueRunner) {
	defer w.poolWG.Done()
	for d := range qr.dispatch {
		w.execute(d)
	}
}

func (w *Worker) execute(d dispatched) {
	defer w.handlerWG.Done()
	c, row := d.claim, d.row
	err := d.err
	var elapsed time.Duration
	var result json.RawMessage
	if d.call != nil {
		elapsed, result, err = w.run(d)
	}
	// Built only when something is logged: this is the hot path.
	log := func() *slog.Logger {
		return w.log.With("job_id", row.ID, "kind", row.Kind, "queue", row.Queue, "attempt", row.Attempt)
	}
	if !c.finish() {
		switch claimState(c.state.Load()) {
		case claimLost:
			log().Warn("lease lost while the handler ran: its result is discarded; the job runs again elsewhere", "handler_error", err)
		case claimReleased:
			log().Info("job given back at shutdown: its result is discarded", "handler_error", err)
		case claimCancelled:
			log().Info("job cancelled while it ran: its result is discarded", "handler_error", err)
		case claimAbandoned:
			c.queue.stuck.Add(-1)
			w.metrics.stuckReturned(row.Queue, row.Kind)
			log().Warn("abandoned handler returned at last: its result is discarded", "ran_for", elapsed, "handler_error", err)
		}
		c.freeSlot()
		return
	}
	c.freeSlot()
	w.metrics.ran(row.Queue, row.Kind, elapsed)
	comp := w.completion(d.h, row, c, err)
	switch comp.act {
	case actAck:
		comp.keep, comp.result = d.keep, result
	case actRetry, actDead:
		log().Warn("job failed", "error", err, "retry_in", comp.backoff, "dead_reason", comp.deadReason)
	}
	if !w.results.push(comp) {
		w.report(comp, outcomeUnrecorded)
	}
}

// run calls the handler with its own context: cancelled when the lease is
// lost, the job is cancelled, at the shutdown deadline, or after the run's
// timeout.
func (w *Worker) run(d dispatched) (elapsed time.Duration, result json.RawMessage, err error) {
	ctx, cancel := context.WithCancelCause(w.handlerBase)
	defer cancel(nil)
	start := time.Now()
	d.claim.begin(cancel, start, d.timeout)
	ctx = context.WithValue(ctx, claimKeyCtx{}, d.claim)
	if d.timeout > 0 {
		var cancelTimeout context.CancelFunc
		ctx, cancelTimeout = context.WithTimeoutCause(ctx, d.timeout, &timeoutError{d.timeout})
		defer cancelTimeout()
	}
	result, err = d.call(ctx)
	if err != nil && d.timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("timed out after %v: %w", d.timeout, err)
	}
	return time.Since(start), result, err
}

// completion turns a handler's result into what the completer records.
func (w *Worker) completion(h *handler, row db.HopperJob, c *claim, err error) completion {
	comp := completion{claim: c, act: actAck}
	if err == nil {
		return comp
	}
	comp.act = actRetry
	comp.message = err.Error()
	if comp.message == "" {
		comp.message = fmt.Sprintf("%T with an empty message", err)
	}
	var undecodable *undecodableError
	var cancelled *cancelError
	var snoozed *snoozeError
	var permanent *permanentError
	var retryAt *retryAtError
	switch {
	case errors.As(err, &undecodable):
		comp.act, comp.deadReason = actDead, "undecodable payload: "+undecodable.Error()
	case errors.As(err, &cancelled):
		comp.act, comp.message = actCancel, cancelled.Error()
	case errors.As(err, &snoozed):
		comp.act, comp.message = actSnooze, ""
		comp.backoff = max(time.Until(snoozed.until), time.Millisecond) // a snoozed job waits, scheduled
	case errors.As(err, &permanent):
		comp.act, comp.deadReason = actDead, permanent.Error()
	case errors.As(err, &retryAt):
		comp.backoff = time.Until(retryAt.at)
	default:
		b := h.backoff
		if b == (Backoff{}) {
			b = w.cfg.Backoff
		}
		comp.backoff = b.Delay(int(row.Attempt))
	}
	comp.backoff = max(comp.backoff, 0)
	return comp
}
