package executor

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// claim is a claim of the tests: what Begin told it.
type claim struct {
	id      int64
	cancel  context.CancelCauseFunc
	timeout time.Duration
	began   chan struct{}
}

// task is a task of the tests.
type task struct {
	claim   *claim
	timeout time.Duration
	runs    bool
}

func (t task) Claim() *claim          { return t.claim }
func (t task) Timeout() time.Duration { return t.timeout }
func (t task) Runs() bool             { return t.runs }
func newClaim(id int64) *claim        { return &claim{id: id, began: make(chan struct{})} }
func (c *claim) begin(cancel context.CancelCauseFunc, _ time.Time, timeout time.Duration) {
	c.cancel, c.timeout = cancel, timeout
	close(c.began)
}

type baseKey struct{}

// failure is what Failed was told: the run's error, and its context's
// cause then.
type failure struct{ err, cause error }

// bed is an executor of one queue, "q", whose Finish and Failed report
// on channels; call is the handler each task runs.
type bed struct {
	e       *Executor[task, *claim]
	started chan task
	failed  chan failure
	done    chan Result
}

func newBed(t *testing.T, call func(context.Context, task) (json.RawMessage, error)) *bed {
	t.Helper()
	b := &bed{started: make(chan task, 10), failed: make(chan failure, 10), done: make(chan Result, 10)}
	var err error
	b.e, err = New(Config[task, *claim]{Queues: []string{"q"},
		Base:   context.WithValue(context.Background(), baseKey{}, "base"),
		Begin:  (*claim).begin,
		Start:  func(t task) { b.started <- t },
		Call:   call,
		Failed: func(ctx context.Context, _ task, err error) { b.failed <- failure{err, context.Cause(ctx)} },
		Finish: func(_ task, r Result) { b.done <- r },
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		b.e.Close()
		require.True(t, b.e.WaitGoroutines(time.Now().Add(time.Minute)))
	})
	return b
}

func TestNewRefusesAnIncompleteConfig(t *testing.T) {
	t.Parallel()
	whole := Config[task, *claim]{Queues: []string{"a", "b"}, Base: context.Background(), Begin: (*claim).begin,
		Call:   func(context.Context, task) (json.RawMessage, error) { return nil, nil },
		Finish: func(task, Result) {}}
	for name, broken := range map[string]func(*Config[task, *claim]){
		"Base":   func(c *Config[task, *claim]) { c.Base = nil },
		"Begin":  func(c *Config[task, *claim]) { c.Begin = nil },
		"Call":   func(c *Config[task, *claim]) { c.Call = nil },
		"Finish": func(c *Config[task, *claim]) { c.Finish = nil },
	} {
		cfg := whole
		broken(&cfg)
		_, err := New(cfg)
		require.EqualError(t, err, "executor: Base, Begin, Call and Finish are required", name)
	}
	twice := whole
	twice.Queues = []string{"a", "b", "a"}
	_, err := New(twice)
	require.EqualError(t, err, `executor: queue "a" is listed twice in Queues`)

	e, err := New(whole)
	require.NoError(t, err)
	require.NotNil(t, e.Queue("a"))
	require.NotNil(t, e.Queue("b"))
	require.Nil(t, e.Queue("c"), "a queue not configured has no goroutines")
	e.Close()
	require.True(t, e.WaitGoroutines(time.Now().Add(time.Minute)))
}

// A run's context descends from Base and is cancelled by the cancel
// Begin was given, with its cause; its claim is in flight while the
// handler runs; the error goes to Failed, under the run's context, then
// with the value to Finish.
func TestRunIsInFlightAndCancelledThroughItsClaim(t *testing.T) {
	t.Parallel()
	stop := errors.New("stop")
	entered := make(chan any, 1)
	b := newBed(t, func(ctx context.Context, _ task) (json.RawMessage, error) {
		entered <- ctx.Value(baseKey{})
		<-ctx.Done()
		return json.RawMessage(`1`), context.Cause(ctx)
	})
	c := newClaim(1)
	b.e.Queue("q").Dispatch(task{claim: c, timeout: time.Hour, runs: true})
	require.Equal(t, "base", <-entered, "the run's context descends from Base")
	require.Equal(t, time.Hour, c.timeout)
	require.Equal(t, []*claim{c}, b.e.Running())
	require.False(t, b.e.WaitRuns(time.Now()), "the run is under way")

	c.cancel(stop)
	r := <-b.done
	require.True(t, r.Ran)
	require.ErrorIs(t, r.Err, stop)
	require.NotContains(t, r.Err.Error(), "timed out", "cancelled, not timed out")
	require.JSONEq(t, `1`, string(r.Value))
	f := <-b.failed
	require.ErrorIs(t, f.err, stop)
	require.ErrorIs(t, f.cause, stop, "Failed is told under the run's context")
	require.Empty(t, b.e.Running())
	require.True(t, b.e.WaitRuns(time.Now().Add(time.Minute)))
	require.Equal(t, c, (<-b.started).claim)
}

// A run past its timeout returns an error that says so; its context's
// cause says after how long.
func TestRunTimesOut(t *testing.T) {
	t.Parallel()
	cause := make(chan error, 1)
	b := newBed(t, func(ctx context.Context, _ task) (json.RawMessage, error) {
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	b.e.Queue("q").Dispatch(task{claim: newClaim(1), timeout: time.Millisecond, runs: true})
	r := <-b.done
	require.EqualError(t, r.Err, "timed out after 1ms: context deadline exceeded")
	require.ErrorIs(t, r.Err, context.DeadlineExceeded)
	require.Equal(t, r.Err, (<-b.failed).err)
	require.EqualError(t, <-cause, "hopper: job timed out after 1ms")
}

// A task with nothing to run is started and finished, never begun nor
// called; a run that succeeds tells Failed nothing.
func TestTaskWithNothingToRun(t *testing.T) {
	t.Parallel()
	calls := 0
	b := newBed(t, func(context.Context, task) (json.RawMessage, error) { calls++; return nil, nil })
	c := newClaim(1)
	b.e.Queue("q").Dispatch(task{claim: c})
	require.Equal(t, Result{}, <-b.done)
	require.Zero(t, calls)
	select {
	case <-c.began:
		t.Fatal("a task with nothing to run was begun")
	default:
	}

	b.e.Queue("q").Dispatch(task{claim: newClaim(2), runs: true})
	r := <-b.done
	require.True(t, r.Ran)
	require.NoError(t, r.Err)
	require.Equal(t, 1, calls)
	require.Empty(t, b.failed)
}

// WaitGoroutines waits for Go's goroutines as for the handlers'.
func TestGoIsWaitedFor(t *testing.T) {
	t.Parallel()
	b := newBed(t, func(context.Context, task) (json.RawMessage, error) { return nil, nil })
	release := make(chan struct{})
	b.e.Go(func() { <-release })
	b.e.Close()
	require.False(t, b.e.WaitGoroutines(time.Now()), "Go's goroutine still runs")
	close(release)
	require.True(t, b.e.WaitGoroutines(time.Now().Add(time.Minute)))
}

// BenchmarkRun measures the executor's part of one run of a trivial
// handler (its context, its timeout, the in-flight set): what every job
// pays in this process, on top of the worker's part (worker's
// BenchmarkRun: the job's context value, the middleware and hooks).
func BenchmarkRun(b *testing.B) {
	e, err := New(Config[task, *claim]{Base: context.Background(),
		Begin:  func(*claim, context.CancelCauseFunc, time.Time, time.Duration) {},
		Call:   func(context.Context, task) (json.RawMessage, error) { return nil, nil },
		Finish: func(task, Result) {}})
	if err != nil {
		b.Fatal(err)
	}
	t := task{claim: &claim{}, timeout: time.Minute, runs: true}
	b.ReportAllocs()
	for b.Loop() {
		if r := e.run(t); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
}
