package worker

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Backoff is an exponential retry delay with jitter: after attempt n fails,
// the job waits Base·2^(n-1), capped at Max, then shortened by a random
// share of up to Jitter (0 to 1), so that jobs that failed together do not
// come back together.
type Backoff struct {
	Base   time.Duration
	Max    time.Duration
	Jitter float64
}

// DefaultBackoff waits about 1s, 2s, 4s … up to 1h, with 20% jitter.
var DefaultBackoff = Backoff{Base: time.Second, Max: time.Hour, Jitter: 0.2}

func (b Backoff) validate() error {
	if b.Base <= 0 || b.Max < b.Base || b.Jitter < 0 || b.Jitter > 1 || math.IsNaN(b.Jitter) {
		return fmt.Errorf("%w: backoff %+v (need 0 < Base <= Max, 0 <= Jitter <= 1)", ErrInvalidConfig, b)
	}
	return nil
}

// Delay is the wait after the given failed attempt (1 for the first).
func (b Backoff) Delay(attempt int) time.Duration {
	d := b.Max
	if attempt < 1 {
		attempt = 1
	}
	if attempt <= 62 {
		if exp := b.Base << (attempt - 1); exp > 0 && exp < b.Max && exp>>(attempt-1) == b.Base {
			d = exp
		}
	}
	if b.Jitter > 0 {
		d -= time.Duration(rand.Float64() * b.Jitter * float64(d))
	}
	return d
}

// retryAtError asks for the next attempt at a given time.
type retryAtError struct {
	at  time.Time
	err error
}

func (e *retryAtError) Error() string {
	return fmt.Sprintf("retry at %s: %v", e.at.Format(time.RFC3339), e.err)
}
func (e *retryAtError) Unwrap() error { return e.err }

// RetryAt fails this attempt and asks for the next one no earlier than at,
// instead of the backoff's delay. The attempt still counts: a job out of
// attempts is dead all the same.
func RetryAt(at time.Time, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &retryAtError{at: at, err: err}
}

// RetryAfter is RetryAt(time.Now().Add(d), err).
func RetryAfter(d time.Duration, err error) error { return RetryAt(time.Now().Add(d), err) }

// permanentError asks for no more attempts.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent failure: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent fails the job for good: it moves to the dead table now, with
// err as the reason, whatever attempts it had left.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure requested")
	}
	return &permanentError{err: err}
}
