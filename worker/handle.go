package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/rows"
	"github.com/hopperq/hopper/jobs"
)

// Timeout cancels the handler's context when a run of this kind takes
// longer than d, instead of after the worker's Config.Timeout. A negative d
// means no timeout for this kind; 0 keeps the worker's.
func Timeout(d time.Duration) HandleOption {
	return func(o *handleOptions) { o.timeout = d }
}

// TimeoutBy decides the timeout of each run from the job itself (for
// example from its payload); it overrides Timeout. 0 keeps the kind's (or
// the worker's) timeout; a negative duration means none for that run.
func TimeoutBy[T any](fn func(*jobs.Job[T]) time.Duration) HandleOption {
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

// RetryBackoff overrides the worker's retry backoff for this kind.
func RetryBackoff(b Backoff) HandleOption {
	return func(o *handleOptions) { o.backoff = b }
}

// KeepHistory keeps this kind's completed jobs, with the handler's result
// (HandleWithResult), in the history table for d after they complete,
// whatever Config.KeepHistoryByQueue says of their queue. They are written by the
// statement that acknowledges them, and every worker deletes them once d
// has passed. A negative d keeps none of them, even where their queue
// keeps history.
func KeepHistory(d time.Duration) HandleOption {
	return func(o *handleOptions) { o.keep = d }
}

// Handle registers fn as the handler of kind. The worker then claims jobs
// of that kind up to the kind's payload version. Register every handler
// before Run; a kind name registered twice is an error (ErrDuplicateKind).
func Handle[T any](w *Worker, kind *jobs.Kind[T], fn func(context.Context, *jobs.Job[T]) error, opts ...HandleOption) error {
	if fn == nil {
		return fmt.Errorf("handle: %w: nil handler", ErrInvalidConfig)
	}
	return HandleWithResult(w, kind, func(ctx context.Context, job *jobs.Job[T]) (struct{}, error) {
		return struct{}{}, fn(ctx, job)
	}, opts...)
}

// HandleWithResult registers fn as the handler of kind, like Handle, for a
// handler that returns a result. Where the kind's completed jobs are kept
// (KeepHistory, Config.KeepHistoryByQueue) the result is stored with them, as
// JSON, and read back with the operations API (hopper.Client.GetJob, the
// Result of the row); elsewhere it is dropped. A result that does not
// marshal to JSON, or is over 1 MiB encoded, fails the attempt.
func HandleWithResult[T, R any](w *Worker, kind *jobs.Kind[T], fn func(context.Context, *jobs.Job[T]) (R, error), opts ...HandleOption) error {
	if kind == nil || fn == nil {
		return fmt.Errorf("handle: %w: nil kind or handler", ErrInvalidConfig)
	}
	var o handleOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.jobTimeout != nil {
		if _, ok := o.jobTimeout((*jobs.Job[T])(nil)); !ok {
			return fmt.Errorf("handle %s: %w: TimeoutBy is for another payload type", kind.Name(), ErrInvalidConfig)
		}
	}
	if err := validateKeyLimit(o.keyLimit); err != nil {
		return fmt.Errorf("handle %s: %w: %w", kind.Name(), ErrInvalidConfig, err)
	}
	if err := o.shared.validate(); err != nil {
		return fmt.Errorf("handle %s: %w: %w", kind.Name(), ErrInvalidConfig, err)
	}
	if o.backoff != (Backoff{}) {
		if err := o.backoff.validate(); err != nil {
			return fmt.Errorf("handle %s: %w", kind.Name(), err)
		}
	}
	h := &handler{
		kind:       kind.Name(),
		maxVersion: kind.Version(),
		backoff:    o.backoff,
		keep:       o.keep,
		middleware: o.middleware,
		keyLimit:   o.keyLimit,
		shared:     o.shared,
		keyring:    kind.Keyring(),
		prepare: func(r db.HopperJob, keep time.Duration) (func(context.Context) (json.RawMessage, error), time.Duration, error) {
			row, err := rows.Live(r)
			if err != nil {
				return nil, 0, &undecodableError{fmt.Errorf("decode job %d: %w: %v", r.ID, jobs.ErrUndecodable, err)}
			}
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
			return func(ctx context.Context) (result json.RawMessage, err error) {
				defer func() {
					if r := recover(); r != nil {
						result, err = nil, recovered(r)
					}
				}()
				out, err := fn(ctx, job)
				if err != nil || keep <= 0 {
					return nil, err
				}
				return encodeResult(out)
			}, timeout, nil
		},
	}
	return w.register(h)
}

// maxResultBytes bounds a handler's encoded result, as payloads are.
const maxResultBytes = jobs.DefaultMaxPayloadBytes

// encodeResult marshals a handler's result for the history; a handler
// without one (Handle) stores none.
func encodeResult[R any](out R) (json.RawMessage, error) {
	if _, none := any(out).(struct{}); none {
		return nil, nil
	}
	raw, err := json.Marshal(out)
	switch {
	case err != nil:
		return nil, fmt.Errorf("the handler's result does not marshal to JSON: %w", err)
	case len(raw) > maxResultBytes:
		return nil, fmt.Errorf("the handler's result is %d bytes encoded, over the limit of %d", len(raw), maxResultBytes)
	}
	return raw, nil
}

// KeyLimit caps how many jobs of this kind with one concurrency key run at
// once, across all workers, overriding the queue's FlowControl.KeyLimit.
// The count is of the key's running jobs in the queue, of any kind. A
// worker with a kind under a KeyLimit claims all its queues under flow
// control.
func KeyLimit(n int) HandleOption {
	return func(o *handleOptions) { o.keyLimit = n }
}
