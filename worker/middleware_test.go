package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// journal is what middleware and hooks saw, in order.
type journal struct {
	mu        sync.Mutex
	lines     []string
	outcomes  map[int64][]worker.Outcome
	byAttempt map[int64][]string
	errs      map[int64][]error
}

func newJournal() *journal {
	return &journal{outcomes: map[int64][]worker.Outcome{}, byAttempt: map[int64][]string{}, errs: map[int64][]error{}}
}

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.lines = append(j.lines, fmt.Sprintf(format, args...))
}

func (j *journal) all() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.lines...)
}

func (j *journal) outcome(job *jobs.Row, o worker.Outcome, _ error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.outcomes[job.ID] = append(j.outcomes[job.ID], o)
	j.byAttempt[job.ID] = append(j.byAttempt[job.ID], fmt.Sprintf("%d:%s", job.Attempt, o))
}

// attempts are a job's outcomes as "attempt:outcome", in attempt order
// (the runs of two attempts may be told in either order).
func (j *journal) attempts(id int64) []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := append([]string(nil), j.byAttempt[id]...)
	sort.Strings(out)
	return out
}

func (j *journal) failed(_ context.Context, job *jobs.Row, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.errs[job.ID] = append(j.errs[job.ID], err)
}

func (j *journal) of(id int64) []worker.Outcome {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]worker.Outcome(nil), j.outcomes[id]...)
}

func (j *journal) errorsOf(id int64) []error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]error(nil), j.errs[id]...)
}

func named(j *journal, name string) worker.Middleware {
	return func(ctx context.Context, job *jobs.Row, next func(context.Context) error) error {
		j.add("%s before %s tenant=%s", name, job.Kind, job.Meta["tenant"])
		err := next(ctx)
		j.add("%s after err=%v", name, err)
		return err
	}
}

// TestMiddlewareOrder: the worker's middleware wrap the kind's, the first
// outermost, around the handler; each sees the job's metadata.
func TestMiddlewareOrder(t *testing.T) {
	b := setup(t)
	kind := jobs.MustDefine[Task]("mw_order")
	j := newJournal()
	res, err := kind.Enqueue(b.Ctx, b.Pool, Task{N: 1}, jobs.Metadata(jobs.Meta{"tenant": "acme"}))
	require.NoError(t, err)
	start(t, b, worker.Config{
		Middleware: []worker.Middleware{named(j, "A"), named(j, "B")},
		OnOutcome:  []worker.OutcomeHook{j.outcome},
	}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, kind, func(_ context.Context, job *jobs.Job[Task]) error {
			j.add("handler meta=%v", job.Meta)
			return nil
		}, worker.Use(named(j, "C"))))
	})
	testdb.WaitFor(t, "the job's outcome", func() bool { return len(j.of(res.ID)) == 1 })
	require.Equal(t, []string{
		"A before mw_order tenant=acme", "B before mw_order tenant=acme", "C before mw_order tenant=acme",
		"handler meta=map[tenant:acme]",
		"C after err=<nil>", "B after err=<nil>", "A after err=<nil>",
	}, j.all())
	require.Equal(t, []worker.Outcome{worker.OutcomeDone}, j.of(res.ID))
}

// TestMiddlewareDecides: what a middleware returns is the run's result,
// read like a handler's, and a panic in one is a failed run.
func TestMiddlewareDecides(t *testing.T) {
	b := setup(t)
	j := newJournal()
	kind := jobs.MustDefine[Task]("mw_decides", jobs.Defaults(jobs.MaxAttempts(1)))
	var handled sync.Map
	decide := func(ctx context.Context, job *jobs.Row, next func(context.Context) error) error {
		switch job.Meta["mw"] {
		case "refuse":
			return errors.New("refused by middleware") // the handler never runs
		case "panic":
			panic("middleware exploded")
		case "swallow":
			_ = next(ctx)
			return nil // the handler's error is forgiven
		case "snooze":
			if job.Attempt == 1 {
				return worker.Snooze(time.Millisecond)
			}
		}
		return next(ctx)
	}
	ids := map[string]int64{}
	for _, mode := range []string{"refuse", "panic", "swallow", "snooze"} {
		res, err := kind.Enqueue(b.Ctx, b.Pool, Task{}, jobs.Metadata(jobs.Meta{"mw": mode}))
		require.NoError(t, err)
		ids[mode] = res.ID
	}
	start(t, b, worker.Config{
		Middleware: []worker.Middleware{decide},
		OnOutcome:  []worker.OutcomeHook{j.outcome},
		OnError:    []worker.ErrorHook{j.failed},
	}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, kind, func(_ context.Context, job *jobs.Job[Task]) error {
			handled.Store(job.Meta["mw"], true)
			if job.Meta["mw"] == "swallow" {
				return errors.New("handler failed")
			}
			return nil
		}))
	})
	testdb.WaitFor(t, "every job's last outcome", func() bool {
		return len(j.of(ids["refuse"])) == 1 && len(j.of(ids["panic"])) == 1 && len(j.of(ids["swallow"])) == 1 &&
			len(j.of(ids["snooze"])) == 2
	})
	require.Equal(t, []worker.Outcome{worker.OutcomeDead}, j.of(ids["refuse"]))
	require.Equal(t, []worker.Outcome{worker.OutcomeDead}, j.of(ids["panic"]))
	require.Equal(t, []worker.Outcome{worker.OutcomeDone}, j.of(ids["swallow"]))
	require.Equal(t, []worker.Outcome{worker.OutcomeSnoozed, worker.OutcomeDone}, j.of(ids["snooze"]))
	_, ran := handled.Load("refuse")
	require.False(t, ran, "a middleware that does not call next does not run the handler")

	var pe *worker.PanicError
	require.Len(t, j.errorsOf(ids["panic"]), 1)
	require.ErrorAs(t, j.errorsOf(ids["panic"])[0], &pe)
	require.Equal(t, "middleware exploded", pe.Value)
	require.Contains(t, string(pe.Stack), "middleware_test.go")
	require.Empty(t, j.errorsOf(ids["swallow"]), "the run's result is what the middleware returned")
	row, err := hopper.NewClient(b.Pool).GetJob(b.Ctx, ids["panic"])
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(row.Errors[0].Error, "panic: middleware exploded"), row.Errors[0].Error)
}

// TestHooksSeeEveryOutcome: a run's outcome hook is told done, failed,
// dead, cancelled (by the handler and by an operator while it ran),
// snoozed and refused (the lease was lost), once per run; the error hook
// sees the failures, with the panic's value.
func TestHooksSeeEveryOutcome(t *testing.T) {
	b := setup(t)
	j := newJournal()
	client := hopper.NewClient(b.Pool)
	kind := jobs.MustDefine[Task]("hooks_all", jobs.Defaults(jobs.MaxAttempts(2)))
	modes := []string{"done", "fail-then-done", "dead", "cancel", "snooze", "panic", "operator", "refused"}
	ids := map[string]int64{}
	for _, mode := range modes {
		opts := []jobs.EnqueueOption{jobs.Metadata(jobs.Meta{"mode": mode})}
		if mode == "refused" {
			opts = append(opts, jobs.Queue("lossy"))
		}
		res, err := kind.Enqueue(b.Ctx, b.Pool, Task{}, opts...)
		require.NoError(t, err)
		ids[mode] = res.ID
	}
	handler := func(ctx context.Context, job *jobs.Job[Task]) error {
		switch job.Meta["mode"] {
		case "fail-then-done":
			if job.Attempt == 1 {
				return errors.New("first try fails")
			}
		case "dead":
			return errors.New("always fails")
		case "cancel":
			return worker.Cancel(errors.New("not wanted"))
		case "snooze":
			if job.Attempt == 1 {
				return worker.Snooze(time.Millisecond)
			}
		case "panic":
			panic(fmt.Sprintf("attempt %d", job.Attempt))
		case "operator":
			if err := client.CancelJob(context.WithoutCancel(ctx), job.ID); err != nil {
				return err
			}
			<-ctx.Done() // the worker hears of the cancel and stops the run
			return ctx.Err()
		case "refused":
			// The first run waits (no require here: this is not the
			// test's goroutine) until the sweep took the job back; the
			// second run, or its end, says so too.
			for job.Attempt == 1 && ctx.Err() == nil {
				row, err := client.GetJob(context.WithoutCancel(ctx), job.ID)
				if errors.Is(err, hopper.ErrNotFound) || (err == nil && (row.State != jobs.StateRunning || row.Attempt > 1)) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		return nil
	}
	hooks := worker.Config{OnOutcome: []worker.OutcomeHook{j.outcome}, OnError: []worker.ErrorHook{j.failed}}
	steady, lossy := hooks, hooks
	steady.Queues = map[string]int{jobs.DefaultQueue: len(modes)}
	// The lossy worker has no lease extension: its lease runs out while the
	// handler waits, and the sweep takes the job back.
	lossy.Queues, lossy.LeaseDuration, lossy.ExtendInterval = map[string]int{"lossy": 1}, time.Second, -1
	for _, cfg := range []worker.Config{steady, lossy} {
		start(t, b, cfg, func(w *worker.Worker) { require.NoError(t, worker.Handle(w, kind, handler)) })
	}
	want := map[string][]string{
		"done":           {"1:done"},
		"fail-then-done": {"1:failed", "2:done"},
		"dead":           {"1:failed", "2:dead"},
		"cancel":         {"1:cancelled"},
		"snooze":         {"1:snoozed", "2:done"},
		"panic":          {"1:failed", "2:dead"},
		"operator":       {"1:cancelled"},
		"refused":        {"1:refused", "2:done"},
	}
	testdb.WaitFor(t, "every outcome", func() bool {
		for mode, w := range want {
			if len(j.attempts(ids[mode])) < len(w) {
				return false
			}
		}
		return true
	})
	for mode, w := range want {
		require.Equal(t, w, j.attempts(ids[mode]), mode)
	}
	require.Len(t, j.errorsOf(ids["dead"]), 2)
	require.Empty(t, j.errorsOf(ids["done"]))
	var pe *worker.PanicError
	require.ErrorAs(t, j.errorsOf(ids["panic"])[1], &pe)
	require.Equal(t, "attempt 2", pe.Value)
}

// TestMetaTravelsWithTheJob: metadata set at enqueue is kept in the dead
// table, in the history, and back in the live table after a retry.
func TestMetaTravelsWithTheJob(t *testing.T) {
	b := setup(t)
	client := hopper.NewClient(b.Pool)
	kind := jobs.MustDefine[Task]("meta_travels", jobs.Defaults(jobs.MaxAttempts(1), jobs.Metadata(jobs.Meta{"team": "core"})))
	dead, err := kind.Enqueue(b.Ctx, b.Pool, Task{N: 1}, jobs.Metadata(jobs.Meta{"tenant": "acme"}))
	require.NoError(t, err)
	kept, err := kind.Enqueue(b.Ctx, b.Pool, Task{N: 2}, jobs.Metadata(jobs.Meta{"tenant": "globex"}))
	require.NoError(t, err)
	plain, err := jobs.MustDefine[Task]("meta_none").Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	r := start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, kind, func(_ context.Context, job *jobs.Job[Task]) error {
			if job.Payload.N == 1 && job.Attempt == 1 {
				return errors.New("dies")
			}
			return nil
		}, worker.KeepHistory(time.Hour)))
	})
	testdb.WaitFor(t, "one dead, one completed", func() bool {
		d, err1 := client.GetJob(b.Ctx, dead.ID)
		k, err2 := client.GetJob(b.Ctx, kept.ID)
		return err1 == nil && err2 == nil && d.State == jobs.StateDead && k.State == jobs.StateCompleted
	})
	r.stop()
	d, err := client.GetJob(b.Ctx, dead.ID)
	require.NoError(t, err)
	require.Equal(t, jobs.Meta{"team": "core", "tenant": "acme"}, d.Meta)
	k, err := client.GetJob(b.Ctx, kept.ID)
	require.NoError(t, err)
	require.Equal(t, jobs.Meta{"team": "core", "tenant": "globex"}, k.Meta)
	p, err := client.GetJob(b.Ctx, plain.ID)
	require.NoError(t, err)
	require.Nil(t, p.Meta)

	_, err = client.RetryDeadJobs(b.Ctx, hopper.DeadFilter{IDs: []int64{dead.ID}})
	require.NoError(t, err)
	d, err = client.GetJob(b.Ctx, dead.ID)
	require.NoError(t, err)
	require.Equal(t, jobs.StatePending, d.State)
	require.Equal(t, jobs.Meta{"team": "core", "tenant": "acme"}, d.Meta)
}
