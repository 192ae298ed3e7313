package worker

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
)

// HandleOption configures how one kind is run.
type HandleOption func(*handleOptions)

type handleOptions struct {
	timeout    time.Duration
	jobTimeout func(job any) (time.Duration, bool)
	backoff    Backoff
}

// Timeout cancels the handler's context when a run of this kind takes
// longer than d, instead of after the worker's JobTimeout. A negative d
// means no timeout for this kind; 0 keeps the worker's.
func Timeout(d time.Duration) HandleOption {
	return func(o *handleOptions) { o.timeout = d }
}

// JobTimeout decides the timeout of each run from the job itself (for
// example from its payload); it overrides Timeout. 0 keeps the kind's (or
// the worker's) timeout; a negative duration means none for that run.
func JobTimeout[T any](fn func(*jobs.Job[T]) time.Duration) HandleOption {
	return func(o *handleOptions) {
		o.jobTimeout = func(job any) (time.Duration, bool) {
			j, ok := job.(*jobs.Job[T])
			if !ok {
				return 0, false
			}
			if j == nil { // Handle checking the payload type
				return 0, true
			}
			return fn(j), true
		}
	}
}

// WithBackoff overrides the worker's retry backoff for this kind.
func WithBackoff(b Backoff) HandleOption {
	return func(o *handleOptions) { o.backoff = b }
}

// handler is a registered kind with its type erased: prepare decodes a
// claimed row (in the claiming goroutine) and returns the call that runs
// the typed handler on it (in a handler goroutine) and the run's timeout
// (0: the worker's JobTimeout; negative: none).
type handler struct {
	kind       string
	maxVersion int32
	backoff    Backoff
	prepare    func(row db.HopperJob) (call func(ctx context.Context) error, timeout time.Duration, err error)
}

// undecodableError marks a payload the handler never saw.
type undecodableError struct{ err error }

func (e *undecodableError) Error() string { return e.err.Error() }
func (e *undecodableError) Unwrap() error { return e.err }

// Handle registers fn as the handler of kind. The worker then claims jobs
// of that kind up to the kind's payload version. Register every handler
// before Run; a kind name registered twice is an error (ErrDuplicateKind).
func Handle[T any](w *Worker, kind *jobs.Kind[T], fn func(context.Context, *jobs.Job[T]) error, opts ...HandleOption) error {
	if kind == nil || fn == nil {
		return fmt.Errorf("hopper: handle: %w: nil kind or handler", ErrInvalidConfig)
	}
	var o handleOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.jobTimeout != nil {
		if _, ok := o.jobTimeout((*jobs.Job[T])(nil)); !ok {
			return fmt.Errorf("hopper: handle %s: %w: JobTimeout is for another payload type", kind.Name(), ErrInvalidConfig)
		}
	}
	if o.backoff != (Backoff{}) {
		if err := o.backoff.validate(); err != nil {
			return fmt.Errorf("hopper: handle %s: %w", kind.Name(), err)
		}
	}
	h := &handler{
		kind:       kind.Name(),
		maxVersion: kind.Version(),
		backoff:    o.backoff,
		prepare: func(row db.HopperJob) (func(context.Context) error, time.Duration, error) {
			job, err := kind.Decode(row)
			if err != nil {
				return nil, 0, &undecodableError{err}
			}
			timeout := o.timeout
			if o.jobTimeout != nil {
				if d, _ := o.jobTimeout(job); d != 0 {
					timeout = d
				}
			}
			return func(ctx context.Context) (err error) {
				defer func() {
					if r := recover(); r != nil {
						err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
					}
				}()
				return fn(ctx, job)
			}, timeout, nil
		},
	}
	return w.register(h)
}
