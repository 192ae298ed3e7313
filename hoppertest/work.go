package hoppertest

import (
	"context"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/hopperq/hopper/internal/worker/detached"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// Result is what one run of Work did.
type Result struct {
	// Verdict is what the worker would record: its Outcome (done, failed,
	// dead, cancelled or snoozed), when the job may run again (Until, for a
	// snooze or RetryAt), and the history entry (Message, Reason).
	worker.Verdict
	// Err is what the handler returned (a *worker.PanicError if it
	// panicked).
	Err error
	// Extensions are the durations the handler passed to
	// worker.ExtendLease, in order.
	Extensions []time.Duration
	// AckedInTx is the transaction the handler passed to worker.AckTx (nil:
	// none). In a worker the job counts done only once that transaction
	// commits; Work cannot know, so Outcome is what the return value says.
	AckedInTx jobs.DBTX
}

// WorkOption sets how Work presents the job to the handler.
type WorkOption func(*jobs.Row)

// Attempt runs the job as its nth attempt (default 1); a plain failure on
// the last attempt (MaxAttempts, default the kind's) is dead.
func Attempt(n int) WorkOption { return func(r *jobs.Row) { r.Attempt = n } }

// MaxAttempts sets the job's attempt budget.
func MaxAttempts(n int) WorkOption { return func(r *jobs.Row) { r.MaxAttempts = n } }

// Metadata gives the job metadata, as jobs.Metadata would at enqueue.
func Metadata(m jobs.Meta) WorkOption { return func(r *jobs.Row) { r.Meta = maps.Clone(m) } }

// ID gives the job an id (default 1).
func ID(id int64) WorkOption { return func(r *jobs.Row) { r.ID = id } }

// Work runs handler once on payload as a worker would, without a worker or
// a database: the payload goes through JSON and the kind's decoding, as
// it does between enqueue and claim (encrypted and decrypted, for a kind
// with jobs.Encrypted); worker.ExtendLease and worker.AckTx
// are recorded instead of run; a panic is recovered; and the result is
// read with worker.Judge, so Snooze, Cancel, Permanent and RetryAt come
// back as the outcomes a worker would record. A payload the kind would
// refuse at enqueue comes back as Err, with no Outcome.
func Work[T any](ctx context.Context, kind *jobs.Kind[T], handler func(context.Context, *jobs.Job[T]) error, payload T, opts ...WorkOption) Result {
	entry := kind.Entry(payload)
	if err := entry.Err(); err != nil {
		return Result{Err: err} // enqueue would refuse it: no outcome
	}
	// Stored as a worker would read it: encrypted, for an encrypted kind.
	raw, err := kind.EncodePayload(payload)
	if err != nil {
		return Result{Err: err}
	}
	now := time.Now()
	row := jobs.Row{
		ID: 1, Queue: entry.Queue(), Kind: kind.Name(), Version: kind.Version(), Payload: raw,
		State: jobs.StateRunning, Priority: entry.Priority(), RunAt: now, Attempt: 1,
		MaxAttempts: entry.MaxAttempts(), CreatedAt: now, Meta: entry.Meta(),
	}
	for _, opt := range opts {
		opt(&row)
	}
	job, err := kind.Decode(row)
	if err != nil { // as a worker records an undecodable payload
		return Result{Err: err, Verdict: worker.Verdict{Outcome: worker.OutcomeDead, Message: err.Error(), Reason: "undecodable payload: " + err.Error()}}
	}
	run := &detachedRun{}
	err = call(detached.With(ctx, run), handler, job)
	res := judged(err, row.Attempt, row.MaxAttempts, run)
	return res
}

func call[T any](ctx context.Context, handler func(context.Context, *jobs.Job[T]) error, job *jobs.Job[T]) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &worker.PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	if handler == nil {
		return fmt.Errorf("hoppertest: nil handler")
	}
	return handler(ctx, job)
}

func judged(err error, attempt, maxAttempts int, run *detachedRun) Result {
	res := Result{Verdict: worker.Judge(err, attempt, maxAttempts), Err: err}
	if run != nil {
		res.Extensions, res.AckedInTx = run.recorded()
	}
	return res
}

// detachedRun records the calls a handler made during one run of Work:
// the runtime tells it of them (detached.Run) instead of running
// statements.
type detachedRun struct {
	mu         sync.Mutex
	extensions []time.Duration
	ackedInTx  jobs.DBTX // the transaction given to AckTx; nil: none
}

func (r *detachedRun) ExtendLease(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.extensions = append(r.extensions, d)
}

func (r *detachedRun) AckTx(tx jobs.DBTX) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ackedInTx = tx
}

// recorded are the durations ExtendLease was called with, in order, and
// the transaction AckTx was given (nil: not called).
func (r *detachedRun) recorded() ([]time.Duration, jobs.DBTX) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.extensions), r.ackedInTx
}
