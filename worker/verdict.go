package worker

import (
	"errors"
	"fmt"
	"time"

	"github.com/hopperq/hopper/internal/worker/completer"
)

// verdict is what a run's result asks the worker to record.
type verdict struct {
	act        completer.Action
	message    string    // the history entry (retry, dead, cancel)
	deadReason string    // completer.ActionDead's reason
	until      time.Time // a snooze's end, or RetryAt's time
	retryAt    bool      // RetryAt chose the time (a zero one: now)
	event      string    // a snooze that waits for this event (AwaitEvent)
}

// readableError returns err, or, when its Error method panics (a typed
// nil pointer that dereferences itself), err wrapped so that reading it
// gives a message saying so (errors.Is and As still see err). A handler's
// error is read by judge, the logs and the hooks, outside the handler's
// recover: one that panics there would take the whole worker down, not
// only its job.
func readableError(err error) error {
	if err == nil {
		return nil
	}
	if text, ok := errorText(err); !ok {
		return &unreadableError{err: err, text: text}
	}
	return err
}

// errorText is err's message, or, when reading it panics, one saying so
// (ok false).
func errorText(err error) (text string, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			text, ok = fmt.Sprintf("hopper: an error of type %T that panics when read: %v", err, r), false
		}
	}()
	return err.Error(), true
}

// unreadableError stands for an error whose Error method panics.
type unreadableError struct {
	err  error
	text string
}

func (e *unreadableError) Error() string { return e.text }
func (e *unreadableError) Unwrap() error { return e.err }

// judge reads a run's result: nil acks; Snooze, Cancel, Permanent and
// RetryAt ask for what they say; an undecodable payload is dead; any
// other error is retried. No reading of err may panic here (errorText):
// a Permanent or Cancel wrapping an error that panics when read keeps its
// verdict. An Unwrap or As method that panics makes a plain failure.
func judge(err error) (v verdict) {
	if err == nil {
		return verdict{act: completer.ActionAck}
	}
	text := func(e error) string { t, _ := errorText(e); return t }
	defer func() {
		if r := recover(); r != nil {
			v = verdict{act: completer.ActionRetry, message: fmt.Sprintf("hopper: an error of type %T that panics when unwrapped: %v", err, r)}
		}
		v.message, v.deadReason = storableText(v.message), storableText(v.deadReason)
	}()
	v = verdict{act: completer.ActionRetry, message: text(err)}
	if v.message == "" {
		v.message = fmt.Sprintf("%T with an empty message", err)
	}
	var undecodable *undecodableError
	var cancelled *cancelError
	var snoozed *snoozeError
	var permanent *permanentError
	var retryAt *retryAtError
	switch {
	case errors.As(err, &undecodable):
		v.act, v.deadReason = completer.ActionDead, "undecodable payload: "+text(undecodable)
	case errors.As(err, &cancelled):
		v.act, v.message = completer.ActionCancel, "cancelled: "+text(cancelled.err) // as its Error, read safely
	case errors.As(err, &snoozed):
		v.act, v.message, v.until, v.event = completer.ActionSnooze, "", snoozed.until, snoozed.event
	case errors.As(err, &permanent):
		v.act, v.deadReason = completer.ActionDead, "permanent failure: "+text(permanent.err) // as its Error, read safely
	case errors.As(err, &retryAt):
		v.until, v.retryAt = retryAt.at, true
	}
	return v
}

// Verdict is what a run's result asks the worker to record, as the worker
// reads it, before the database confirms anything.
type Verdict struct {
	// Outcome is OutcomeDone, OutcomeFailed (to be retried), OutcomeDead,
	// OutcomeCancelled or OutcomeSnoozed.
	Outcome Outcome
	// Until is when the job may run again: the end of a snooze, or the time
	// RetryAt asked for; zero otherwise (a plain failure waits its kind's
	// backoff).
	Until time.Time
	// Message is the entry the job's error history gets ("" for done and
	// snoozed); Reason says why a dead job died.
	Message, Reason string
}

// Judge reads err, what a run of a job on attempt out of maxAttempts
// returned, as the worker does: a plain failure on the last attempt is
// dead. Middleware can use it to name a run's outcome before it is
// recorded; hoppertest.Work reports it.
func Judge(err error, attempt, maxAttempts int) Verdict {
	v := judge(err)
	out := Verdict{Until: v.until, Message: v.message, Reason: v.deadReason}
	switch v.act {
	case completer.ActionAck:
		out.Outcome = OutcomeDone
	case completer.ActionSnooze:
		out.Outcome = OutcomeSnoozed
	case completer.ActionCancel:
		out.Outcome = OutcomeCancelled
	case completer.ActionDead:
		out.Outcome = OutcomeDead
	default:
		out.Outcome = OutcomeFailed
		if attempt >= maxAttempts {
			out.Outcome, out.Reason = OutcomeDead, "out of attempts"
		}
	}
	return out
}

// undecodableError marks a payload the handler never saw.
type undecodableError struct{ err error }

func (e *undecodableError) Error() string { return e.err.Error() }

func (e *undecodableError) Unwrap() error { return e.err }
