package worker

import (
	"errors"
	"fmt"
	"time"
)

// What a handler may return besides nil and a plain error (which is
// retried with backoff): RetryAt and Permanent (retry.go), Snooze and
// Cancel (here).

// MaxSnooze is the longest a job may be snoozed for: a year. A longer
// wait is almost certainly a unit mistake.
const MaxSnooze = 365 * 24 * time.Hour

// snoozeError asks for the job to wait, uncharged. A durable wait
// (Sleep, AwaitEvent) is one too: wait names it ("sleep" or "event"),
// and event is the awaited event's name, whose emit ends the wait early.
type snoozeError struct {
	until time.Time
	wait  string
	event string
}

func (e *snoozeError) Error() string {
	switch e.wait {
	case "sleep":
		return "hopper: suspended: sleeping until " + e.until.Format(time.RFC3339)
	case "event":
		return fmt.Sprintf("hopper: suspended: awaiting event %q until %s", e.event, e.until.Format(time.RFC3339))
	}
	return "snoozed until " + e.until.Format(time.RFC3339)
}

// Is makes a durable wait match ErrSuspended.
func (e *snoozeError) Is(target error) bool { return target == ErrSuspended && e.wait != "" }

// Snooze ends the run without success or failure: the job waits d and runs
// again, without being charged an attempt and without an entry in its
// error history (its Attempt grows, as at every claim, and MaxAttempts
// with it). Return it from the handler: "not now, try again later", for a
// resource that is not ready or a rate limit. d must be positive and at
// most MaxSnooze; otherwise the error wraps ErrInvalidSnooze and fails the
// attempt.
func Snooze(d time.Duration) error {
	if d <= 0 || d > MaxSnooze {
		return fmt.Errorf("%w: %v (want a positive duration of at most %v)", ErrInvalidSnooze, d, MaxSnooze)
	}
	return &snoozeError{until: time.Now().Add(d)}
}

// SnoozeUntil is Snooze until t, a time in the future (by this process's
// clock) at most MaxSnooze away.
func SnoozeUntil(t time.Time) error {
	switch d := time.Until(t); {
	case d <= 0:
		return fmt.Errorf("%w: %s is not in the future", ErrInvalidSnooze, t.Format(time.RFC3339Nano))
	case d > MaxSnooze:
		return fmt.Errorf("%w: %s is more than %v away", ErrInvalidSnooze, t.Format(time.RFC3339), MaxSnooze)
	}
	return &snoozeError{until: t}
}

// cancelError asks for the job to end as cancelled.
type cancelError struct{ err error }

func (e *cancelError) Error() string { return "cancelled: " + e.err.Error() }
func (e *cancelError) Unwrap() error { return e.err }

// Cancel ends the job for good as cancelled rather than failed: it is not
// retried, whatever attempts it has left, and not counted as a failure. It
// moves to the dead table as cancelled, with reason in its history (who
// cancelled it, and why). Return it from the handler when the work no
// longer makes sense (the account it was for was deleted).
func Cancel(reason error) error {
	if reason == nil {
		reason = errors.New("cancelled by its handler")
	}
	return &cancelError{err: reason}
}
