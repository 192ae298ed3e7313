// Package executor runs handlers: each claimed job on a handler goroutine
// of its queue (queue.go), under a context of its own, cancelled with a
// cause at its timeout, and holds the set of handlers running now, which
// the stuck watch reads. What a handler is, how it is called (middleware,
// hooks) and what its return means are the worker's public handler API:
// the executor is given them as funcs of its Config, and hands what each
// run returned on through one, so that it knows nothing of how results
// are recorded.
package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Task is one claimed job handed to the executor; J names its claim,
// which is in the in-flight set while its handler runs.
type Task[J comparable] interface {
	// Claim is the job's claim.
	Claim() J
	// Timeout is the run's timeout; 0: none.
	Timeout() time.Duration
	// Runs is false for a job with nothing to run (its payload did not
	// decode): its Finish is told at once, Ran false.
	Runs() bool
}

// Result is what became of one task's run.
type Result struct {
	Ran     bool            // the handler was called
	Elapsed time.Duration   // how long it ran
	Value   json.RawMessage // what it returned
	Err     error           // its error, "timed out after" the timeout when its context's deadline passed
}

// Config is what an Executor works with. Every func but Start and Failed
// is required.
type Config[T Task[J], J comparable] struct {
	// Queues are the queues whose jobs it runs, each on goroutines of its
	// own (Queue).
	Queues []string
	// Base is the parent of every run's context. It should never be
	// cancelled, so that a run's context does not register with it (one
	// shared parent with thousands of children was a hot lock): the
	// worker cancels each running job's own context (Begin's cancel).
	Base context.Context
	// Begin is told, on the handler's goroutine before it is called, that
	// the claim's handler starts, with its context's cancel and its
	// timeout: the claim may have been taken from the worker already, and
	// then cancels it at once.
	Begin func(job J, cancel context.CancelCauseFunc, started time.Time, timeout time.Duration)
	// Start, if set, is told of each task as a handler goroutine takes it,
	// whether it runs or not.
	Start func(T)
	// Call runs the task's handler under ctx and returns what it
	// returned: the worker's handler API (the job's context value, its
	// middleware, its panics recovered, its error made readable).
	Call func(ctx context.Context, t T) (json.RawMessage, error)
	// Failed, if set, is told of a run that returned an error, under the
	// run's context, before its Finish (the error hooks).
	Failed func(ctx context.Context, t T, err error)
	// Finish is handed each task's result once its handler returned (or
	// at once when it had nothing to run), on the handler's goroutine.
	Finish func(t T, r Result)
}

// Executor runs the tasks dispatched to its queues.
//
// Invariants: runs counts dispatched tasks not yet executed to the end,
// goroutines every goroutine the executor started (handler goroutines and
// those of Go), so a run's end waits for both; inFlight holds exactly the
// claims whose handler runs now, for the stuck watch.
type Executor[T Task[J], J comparable] struct {
	cfg    Config[T, J]
	queues map[string]*Queue[T]

	inFlight   set[J]
	runs       sync.WaitGroup // tasks being executed
	goroutines sync.WaitGroup // handler goroutines, and Go's
}

// New validates cfg and builds the executor, with a Queue for each of
// cfg.Queues.
func New[T Task[J], J comparable](cfg Config[T, J]) (*Executor[T, J], error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	e := &Executor[T, J]{cfg: cfg, queues: make(map[string]*Queue[T], len(cfg.Queues))}
	for _, name := range cfg.Queues {
		e.queues[name] = newQueue(e.execute, &e.goroutines, &e.runs)
	}
	return e, nil
}

func (c *Config[T, J]) validate() error {
	if c.Base == nil || c.Begin == nil || c.Call == nil || c.Finish == nil {
		return errors.New("executor: Base, Begin, Call and Finish are required")
	}
	seen := make(map[string]bool, len(c.Queues))
	for _, name := range c.Queues {
		if seen[name] {
			return fmt.Errorf("executor: queue %q is listed twice in Queues", name)
		}
		seen[name] = true
	}
	return nil
}

// Queue is the named queue's handler goroutines; nil for a queue not in
// Config.Queues.
func (e *Executor[T, J]) Queue(name string) *Queue[T] { return e.queues[name] }

// Close ends the handler goroutines once the jobs already dispatched have
// been taken: nothing is dispatched after it.
func (e *Executor[T, J]) Close() {
	for _, q := range e.queues {
		q.close()
	}
}

// Go runs f on a goroutine of its own that WaitGoroutines waits for, as it
// does for the handler goroutines (a statement a handler's start sends,
// which the handler does not wait for). Called from a handler goroutine,
// it can never race WaitGoroutines at zero.
func (e *Executor[T, J]) Go(f func()) {
	e.goroutines.Add(1)
	go func() {
		defer e.goroutines.Done()
		f()
	}()
}

// WaitRuns waits until every task dispatched has been executed to the
// end, or deadline, and reports whether they were.
func (e *Executor[T, J]) WaitRuns(deadline time.Time) bool { return waitUntil(&e.runs, deadline) }

// WaitGoroutines waits until the handler goroutines (after Close) and
// Go's have ended, or deadline, and reports whether they had.
func (e *Executor[T, J]) WaitGoroutines(deadline time.Time) bool {
	return waitUntil(&e.goroutines, deadline)
}

// Running lists the claims whose handlers run now, whatever became of
// the claims themselves: a handler may go on ignoring its cancelled
// context, and the stuck watch must still see it to give up on it.
func (e *Executor[T, J]) Running() []J { return e.inFlight.snapshot() }

// timeoutError is the cause of a handler context whose run timed out. It
// is formatted only when read: every job carries one (the worker's
// Timeout has a default), and formatting it per job showed in the
// worker's CPU.
type timeoutError struct{ after time.Duration }

func (e *timeoutError) Error() string { return fmt.Sprintf("hopper: job timed out after %v", e.after) }

// execute takes one task through its run to its Finish.
func (e *Executor[T, J]) execute(t T) {
	defer e.runs.Done()
	if e.cfg.Start != nil {
		e.cfg.Start(t)
	}
	var r Result
	if t.Runs() {
		r = e.run(t)
	}
	e.cfg.Finish(t, r)
}

// run calls the handler with its own context: cancelled through Begin's
// cancel (the lease lost, the job cancelled, the shutdown deadline), or
// after the run's timeout.
func (e *Executor[T, J]) run(t T) Result {
	ctx, cancel := context.WithCancelCause(e.cfg.Base)
	defer cancel(nil)
	start := time.Now()
	job, timeout := t.Claim(), t.Timeout()
	e.cfg.Begin(job, cancel, start, timeout)
	e.inFlight.add(job)
	defer e.inFlight.remove(job)
	if timeout > 0 {
		var cancelTimeout context.CancelFunc
		ctx, cancelTimeout = context.WithTimeoutCause(ctx, timeout, &timeoutError{timeout})
		defer cancelTimeout()
	}
	value, err := e.cfg.Call(ctx, t)
	if err != nil && timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("timed out after %v: %w", timeout, err)
	}
	if err != nil && e.cfg.Failed != nil {
		e.cfg.Failed(ctx, t, err)
	}
	return Result{Ran: true, Elapsed: time.Since(start), Value: value, Err: err}
}

// set holds the claims whose handlers are running.
type set[J comparable] struct {
	mu sync.Mutex
	m  map[J]struct{}
}

func (s *set[J]) add(job J) {
	s.mu.Lock()
	if s.m == nil {
		s.m = map[J]struct{}{}
	}
	s.m[job] = struct{}{}
	s.mu.Unlock()
}

func (s *set[J]) remove(job J) {
	s.mu.Lock()
	delete(s.m, job)
	s.mu.Unlock()
}

func (s *set[J]) snapshot() []J {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]J, 0, len(s.m))
	for job := range s.m {
		out = append(out, job)
	}
	return out
}

// waitUntil waits for wg until deadline and reports whether it finished.
// A group already done says so even when the deadline has passed.
func waitUntil(wg *sync.WaitGroup, deadline time.Time) bool {
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	t := time.NewTimer(max(time.Until(deadline), 10*time.Millisecond))
	defer t.Stop()
	select {
	case <-finished:
		return true
	case <-t.C:
		return false
	}
}
