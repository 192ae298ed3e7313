package worker

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/hopperq/hopper/jobs"
)

// The public types of middleware and hooks, and the outcomes they are
// told: below the configuration that lists them (Config.Middleware,
// OnOutcome, OnError) and the run that calls them (middleware.go).

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
