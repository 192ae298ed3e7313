package worker

import (
	"errors"
	"fmt"
	"time"
)

// verdict is what a run's result asks the worker to record.
type verdict struct {
	act        action
	message    string    // the history entry (retry, dead, cancel)
	deadReason string    // actDead's reason
	until      time.Time // a snooze's end, or RetryAt's time
	retryAt    bool      // RetryAt chose the time (a zero one: now)
}

// readableError returns err, or, when reading it panics (a typed nil
// pointer whose Error method dereferences it, an Unwrap or As that
// panics), a plain error saying so. A handler's error is read by judge,
// the logs and the hooks, outside the handler's recover: one that panics
// there would take the whole worker down, not only its job.
func readableError(err error) (out error) {
	if err == nil {
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			out = fmt.Errorf("hopper: the handler returned an error of type %T that panics when read: %v", err, r)
		}
	}()
	_ = err.Error()
	_ = judge(err)
	return err
}

// judge reads a run's result: nil acks; Snooze, Cancel, Permanent and
// RetryAt ask for what they say; an undecodable payload is dead; any
// other error is retried.
func judge(err error) verdict {
	if err == nil {
		return verdict{act: actAck}
	}
	v := verdict{act: actRetry, message: err.Error()}
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
		v.act, v.deadReason = actDead, "undecodable payload: "+undecodable.Error()
	case errors.As(err, &cancelled):
		v.act, v.message = actCancel, cancelled.Error()
	case errors.As(err, &snoozed):
		v.act, v.message, v.until = actSnooze, "", snoozed.until
	case errors.As(err, &permanent):
		v.act, v.deadReason = actDead, permanent.Error()
	case errors.As(err, &retryAt):
		v.until, v.retryAt = retryAt.at, true
	}
	v.message, v.deadReason = storableText(v.message), storableText(v.deadReason)
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
	case actAck:
		out.Outcome = OutcomeDone
	case actSnooze:
		out.Outcome = OutcomeSnoozed
	case actCancel:
		out.Outcome = OutcomeCancelled
	case actDead:
		out.Outcome = OutcomeDead
	default:
		out.Outcome = OutcomeFailed
		if attempt >= maxAttempts {
			out.Outcome, out.Reason = OutcomeDead, "out of attempts"
		}
	}
	return out
}
