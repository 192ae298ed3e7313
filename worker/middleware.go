package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/rows"
	"github.com/hopperq/hopper/jobs"
)

// Middleware wraps each run of a handler: it sees the job as stored (its
// payload still JSON, its metadata, its attempt) and calls next to run the
// handler, or the next middleware. What it returns is the run's result and
// is read like a handler's: nil acknowledges; Snooze, Cancel, Permanent,
// RetryAt or any error take their usual paths. A middleware that does not
// call next does not run the handler. A panic in a middleware is a failed
// run, like a handler's.
//
// Config.Middleware wraps every kind's handler, the first outermost; a
// kind's own (the Use option of Handle) run inside those. With none, a run
// takes no extra step.
type Middleware func(ctx context.Context, job *jobs.Row, next func(context.Context) error) error

// Use adds middleware of this kind's own, inside the worker's
// (Config.Middleware), the first outermost.
func Use(mw ...Middleware) HandleOption {
	return func(o *handleOptions) { o.middleware = append(o.middleware, mw...) }
}

// Outcome is what became of a run, as the database recorded it.
type Outcome string

const (
	// OutcomeDone: the ack took effect (or the handler's AckTx committed).
	OutcomeDone Outcome = "done"
	// OutcomeFailed: the failure was recorded; the job will run again.
	OutcomeFailed Outcome = "failed"
	// OutcomeDead: the job moved to the dead table (out of attempts, a
	// permanent failure, an undecodable payload).
	OutcomeDead Outcome = "dead"
	// OutcomeCancelled: the job ended as cancelled, by its handler or by
	// an operator while it ran.
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeSnoozed: the job waits, uncharged (Snooze).
	OutcomeSnoozed Outcome = "snoozed"
	// OutcomeRefused: the job was no longer this worker's (its lease was
	// lost): the result had no effect; the job runs again elsewhere.
	OutcomeRefused Outcome = "refused"
	// OutcomeReleased: given back at shutdown before its result counted;
	// it runs again.
	OutcomeReleased Outcome = "released"
	// OutcomeAbandoned: the handler ran so far past its timeout that it
	// was given up on; the job runs again after its lease.
	OutcomeAbandoned Outcome = "abandoned"
	// OutcomeUnconfirmed: the statement carrying the result may have
	// committed, but its reply was lost and the database no longer shows it.
	OutcomeUnconfirmed Outcome = "unconfirmed"
	// OutcomeUnrecorded: the result could not be sent before the shutdown
	// deadline, or the server refused it in every form Hopper could give
	// it; the job runs again after its lease.
	OutcomeUnrecorded Outcome = "unrecorded"
)

// OutcomeHook is told, once per run, what became of it: after the
// database confirmed the result, or once it is known that it never will.
// err is what the run returned (nil for a success). Hooks are called from
// the worker's own goroutines: keep them quick.
type OutcomeHook func(job *jobs.Row, o Outcome, err error)

// ErrorHook is told of every run that returned an error or panicked (err
// then wraps a *PanicError), in the run's context, before the result is
// recorded: for error reporting.
type ErrorHook func(ctx context.Context, job *jobs.Row, err error)

// PanicError is a run that panicked: the value given to panic and the
// stack where it happened. The job's error history stores its text.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v\n%s", e.Value, e.Stack) }

// recovered turns a panic into a *PanicError.
func recovered(r any) error { return &PanicError{Value: r, Stack: debug.Stack()} }

// hooked reports whether runs of h need the job's view: a middleware or a
// hook would see it.
func (r *run) hooked(h *handler) bool {
	cfg := &r.w.cfg
	return len(cfg.Middleware) > 0 || len(h.middleware) > 0 || len(cfg.OnOutcome) > 0 || len(cfg.OnError) > 0
}

// view is the job as middleware and hooks see it.
func view(row db.HopperJob) *jobs.Row {
	r, _ := rows.Live(row) // a malformed history or metadata leaves those empty
	return &r
}

// wrap puts the worker's and the kind's middleware around call.
func (r *run) wrap(h *handler, job *jobs.Row, call func(context.Context) error) func(context.Context) error {
	mws := h.middleware
	if all := r.w.cfg.Middleware; len(all) > 0 {
		mws = append(append(make([]Middleware, 0, len(all)+len(h.middleware)), all...), h.middleware...)
	}
	for i := len(mws) - 1; i >= 0; i-- {
		mw, next := mws[i], call
		call = func(ctx context.Context) (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = recovered(p)
				}
			}()
			return mw(ctx, job, next)
		}
	}
	return call
}

// callHooked runs a job whose runs middleware or hooks see: through the
// middleware, when there is any. Kept out of call, so that a worker without
// hooks pays nothing for them.
func (r *run) callHooked(ctx context.Context, d dispatched) (json.RawMessage, error) {
	if len(r.w.cfg.Middleware) == 0 && len(d.h.middleware) == 0 {
		return d.call(ctx)
	}
	var out json.RawMessage
	err := r.wrap(d.h, d.job.view, func(ctx context.Context) error {
		res, err := d.call(ctx)
		out = res
		return err
	})(ctx)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// tellError calls the error hooks.
func (r *run) tellError(ctx context.Context, job *jobs.Row, err error) {
	for _, h := range r.w.cfg.OnError {
		r.safely("error", job, func() { h(ctx, job, err) })
	}
}

// safely runs a hook; a panic in it is logged, never the worker's end.
func (r *run) safely(what string, job *jobs.Row, hook func()) {
	defer func() {
		if p := recover(); p != nil {
			r.w.log.Error("a "+what+" hook panicked", "job_id", job.ID, "kind", job.Kind, "panic", p)
		}
	}()
	hook()
}

// told calls the outcome hooks for a run that had a view.
func (r *run) told(c *heldJob, o Outcome) {
	if c.view == nil {
		return
	}
	for _, h := range r.w.cfg.OnOutcome {
		r.safely("outcome", c.view, func() { h(c.view, o, c.runErr) })
	}
}
