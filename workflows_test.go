package hopper_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// Step is the payload of the workflow tests' steps.
type Step struct {
	Name string `json:"name"`
	Fail bool   `json:"fail,omitempty"`
}

var stepKind = jobs.MustDefine[Step]("workflow_step")

// stepLedger records, in order, the steps that ran and the steps that
// were done when each started.
type stepLedger struct {
	mu      sync.Mutex
	started []string
	done    map[string]bool
	early   []string // steps that started before a parent had ended
}

func newStepLedger() *stepLedger { return &stepLedger{done: map[string]bool{}} }

func (l *stepLedger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.started)
}

// registerSteps handles stepKind: each step checks that its parents have
// all ended (Parents), returns its name as its result, and fails
// permanently when told to.
func registerSteps(t *testing.T, l *stepLedger, pool jobs.DBTX) func(*worker.Worker) {
	return func(w *worker.Worker) {
		require.NoError(t, worker.HandleWithResult(w, stepKind, func(ctx context.Context, job *jobs.Job[Step]) (string, error) {
			parents, err := jobs.Parents(ctx, pool, job.ID)
			if err != nil {
				return "", err
			}
			l.mu.Lock()
			l.started = append(l.started, job.Payload.Name)
			for _, p := range parents {
				if p.State != string(jobs.StateCompleted) && p.State != string(jobs.StateDead) && p.State != string(jobs.StateCancelled) {
					l.early = append(l.early, job.Payload.Name+" before "+p.Step+" ("+p.State+")")
				}
			}
			l.mu.Unlock()
			if job.Payload.Fail {
				return "", worker.Permanent(errors.New("told to fail"))
			}
			return "result of " + job.Payload.Name, nil
		}))
	}
}

func step(name string) jobs.Entry { return stepKind.Entry(Step{Name: name}) }

func TestWorkflowDiamondRunsInOrder(t *testing.T) {
	b := setup(t)
	wf := jobs.NewWorkflow("diamond-1").
		Add("fetch", step("fetch")).
		Add("resize", step("resize"), jobs.After("fetch")).
		Add("thumb", step("thumb"), jobs.After("fetch")).
		Add("index", step("index"), jobs.After("fetch")).
		Add("publish", step("publish"), jobs.After("resize", "thumb", "index"))
	res, err := jobs.EnqueueWorkflow(b.Ctx, b.Pool, wf)
	require.NoError(t, err)
	require.Equal(t, "diamond-1", res.ID)
	require.Len(t, res.Steps, 5)
	require.Equal(t, 4, res.Waiting)
	require.Equal(t, jobs.StatePending, b.state(t, res.Steps["fetch"]))
	require.Equal(t, jobs.StateWaiting, b.state(t, res.Steps["publish"]))

	l := newStepLedger()
	b.runUntil(t, worker.Config{}, registerSteps(t, l, b.Pool), "every step ran", func() bool { return l.count() == 5 })
	require.Empty(t, l.early)
	require.Equal(t, "fetch", l.started[0])
	require.Equal(t, "publish", l.started[4])

	steps, err := b.client.ListWorkflow(b.Ctx, "diamond-1")
	require.NoError(t, err)
	require.Len(t, steps, 5)
	for _, s := range steps {
		require.Equal(t, jobs.StateCompleted, s.State, s.Step)
	}
	require.Equal(t, []int64{res.Steps["index"], res.Steps["resize"], res.Steps["thumb"]}[0:0], steps[0].Parents)
	require.ElementsMatch(t, []int64{res.Steps["resize"], res.Steps["thumb"], res.Steps["index"]}, steps[4].Parents)

	got, err := jobs.ParentResult[string](b.Ctx, b.Pool, res.Steps["publish"], "thumb")
	require.NoError(t, err)
	require.Equal(t, "result of thumb", got)
	_, err = jobs.ParentResult[string](b.Ctx, b.Pool, res.Steps["publish"], "fetch")
	require.ErrorIs(t, err, jobs.ErrNoResult, "fetch is no parent of publish")
}

func TestWorkflowParentFailurePolicies(t *testing.T) {
	b := setup(t)
	wf := jobs.NewWorkflow("").
		Add("a", stepKind.Entry(Step{Name: "a", Fail: true})).
		Add("cancelled", step("cancelled"), jobs.After("a")).
		Add("grandchild", step("grandchild"), jobs.After("cancelled"), jobs.OnParentFailure(jobs.WorkflowRun)).
		Add("runs", step("runs"), jobs.After("a"), jobs.OnParentFailure(jobs.WorkflowRun)).
		Add("waits", step("waits"), jobs.After("a"), jobs.OnParentFailure(jobs.WorkflowWait))
	res, err := jobs.EnqueueWorkflow(b.Ctx, b.Pool, wf)
	require.NoError(t, err)
	require.Contains(t, res.ID, "wf_")

	l := newStepLedger()
	b.runUntil(t, worker.Config{}, registerSteps(t, l, b.Pool), "a, runs and grandchild ran", func() bool { return l.count() == 3 })
	require.ElementsMatch(t, []string{"a", "runs", "grandchild"}, l.started)
	require.Equal(t, jobs.StateDead, b.state(t, res.Steps["a"]))
	require.Equal(t, jobs.StateCancelled, b.state(t, res.Steps["cancelled"]))
	require.Equal(t, jobs.StateWaiting, b.state(t, res.Steps["waits"]))
	dead, err := b.client.GetJob(b.Ctx, res.Steps["cancelled"])
	require.NoError(t, err)
	require.Contains(t, dead.Reason, "ended dead")

	counts, err := jobs.CountParents(b.Ctx, b.Pool, res.Steps["runs"])
	require.NoError(t, err)
	require.Equal(t, jobs.ParentCounts{Dead: 1}, counts)

	// The operator fixes a and retries the workflow whole: a and the step
	// it cancelled come back; waits and cancelled run once a succeeds.
	_, err = b.Pool.Exec(b.Ctx, `UPDATE hopper_dead_jobs SET payload = '{"name": "a"}' WHERE id = $1`, res.Steps["a"])
	require.NoError(t, err)
	back, err := b.client.RetryWorkflow(b.Ctx, res.ID)
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{res.Steps["a"], res.Steps["cancelled"]}, back)
	require.Equal(t, jobs.StatePending, b.state(t, res.Steps["a"]))
	require.Equal(t, jobs.StateWaiting, b.state(t, res.Steps["cancelled"]))
	b.runUntil(t, worker.Config{}, registerSteps(t, l, b.Pool), "the retried steps ran", func() bool { return l.count() == 6 })
	require.ElementsMatch(t, []string{"a", "runs", "grandchild", "a", "cancelled", "waits"}, l.started)
	require.Empty(t, l.early)
}

func TestWorkflowCancel(t *testing.T) {
	b := setup(t)
	res, err := jobs.EnqueueWorkflow(b.Ctx, b.Pool, jobs.NewWorkflow("to-cancel").
		Add("a", step("a")).Add("b", step("b"), jobs.After("a")).Add("c", step("c"), jobs.After("b")))
	require.NoError(t, err)
	ids, err := b.client.CancelWorkflow(b.Ctx, "to-cancel")
	require.NoError(t, err)
	require.Len(t, ids, 3)
	steps, err := b.client.ListWorkflow(b.Ctx, "to-cancel")
	require.NoError(t, err)
	for _, s := range steps {
		require.Equal(t, jobs.StateCancelled, s.State)
	}
	_, err = b.client.ListWorkflow(b.Ctx, "no-such-workflow")
	require.ErrorIs(t, err, hopper.ErrNotFound)
	_ = res
}

func TestListWorkflows(t *testing.T) {
	b := setup(t)
	for _, id := range []string{"w-b", "w-a", "w-c"} {
		_, err := jobs.EnqueueWorkflow(b.Ctx, b.Pool, jobs.NewWorkflow(id).
			Add("a", step("a")).Add("b", step("b"), jobs.After("a")).Add("c", step("c"), jobs.After("a")))
		require.NoError(t, err)
	}
	_, err := b.client.CancelWorkflow(b.Ctx, "w-c")
	require.NoError(t, err)
	first, err := b.client.ListWorkflows(b.Ctx, hopper.WorkflowPage{Limit: 1})
	require.NoError(t, err)
	require.Len(t, first, 1)
	require.Equal(t, "w-a", first[0].ID)
	require.Equal(t, int64(2), first[0].Waiting)
	require.Equal(t, int64(1), first[0].Ready)
	require.False(t, first[0].Oldest.IsZero())
	rest, err := b.client.ListWorkflows(b.Ctx, hopper.WorkflowPage{After: first[0].ID})
	require.NoError(t, err)
	require.Len(t, rest, 1, "w-c has no live step")
	require.Equal(t, "w-b", rest[0].ID)
	_, err = b.client.ListWorkflows(b.Ctx, hopper.WorkflowPage{Limit: 1001})
	require.ErrorIs(t, err, hopper.ErrInvalidFilter)
}

func TestWorkflowBadInput(t *testing.T) {
	b := setup(t)
	cases := []struct {
		name string
		wf   *jobs.Workflow
		want string
	}{
		{"empty", jobs.NewWorkflow("x"), "no steps"},
		{"empty name", jobs.NewWorkflow("x").Add("", step("a")), "empty name"},
		{"repeated name", jobs.NewWorkflow("x").Add("a", step("a")).Add("a", step("a")), `two steps are named "a"`},
		{"unknown parent", jobs.NewWorkflow("x").Add("a", step("a"), jobs.After("nope")), `"nope", which is no step`},
		{"self", jobs.NewWorkflow("x").Add("a", step("a"), jobs.After("a")), "after itself"},
		{"cycle", jobs.NewWorkflow("x").Add("a", step("a"), jobs.After("c")).Add("b", step("b"), jobs.After("a")).Add("c", step("c"), jobs.After("b")).Add("d", step("d")), "a cycle among steps"},
		{"bad policy", jobs.NewWorkflow("x").Add("a", step("a"), jobs.OnParentFailure("sometimes")), "unknown policy"},
		{"bad job id", jobs.NewWorkflow("x").Add("a", step("a"), jobs.AfterJobs(0)), "not a job id"},
		{"unique key", jobs.NewWorkflow("x").Add("a", stepKind.Entry(Step{}, jobs.UniqueKey("k"))), "unique key"},
		{"sequence", jobs.NewWorkflow("x").Add("a", stepKind.Entry(Step{}, jobs.Sequence("k"))), "sequence"},
		{"long id", jobs.NewWorkflow(string(make([]byte, 300))).Add("a", step("a")), "over the limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := jobs.EnqueueWorkflow(b.Ctx, b.Pool, c.wf)
			require.ErrorIs(t, err, jobs.ErrInvalidWorkflow)
			require.ErrorContains(t, err, c.want)
		})
	}
	// A parent that is no step of the workflow (a plain job, or a step of
	// another) is refused by the database, and nothing is written.
	plain := b.enqueue(t, email, "x@example.com")
	_, err := jobs.EnqueueWorkflow(b.Ctx, b.Pool, jobs.NewWorkflow("x").Add("a", step("a"), jobs.AfterJobs(plain)))
	require.ErrorIs(t, err, jobs.ErrInvalidWorkflow)
	require.ErrorContains(t, err, "is no step of the workflow")
	_, err = b.client.ListWorkflow(b.Ctx, "x")
	require.ErrorIs(t, err, hopper.ErrNotFound, "nothing was written")
	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT count(*) FROM hopper_jobs`).Scan(&n))
	require.Equal(t, 1, n)
}

// A handler adds steps to its own running workflow, in its transaction,
// after itself: they run once it has completed, and not if it rolls back.
func TestWorkflowStepsAddedByAHandler(t *testing.T) {
	b := setup(t)
	res, err := jobs.EnqueueWorkflow(b.Ctx, b.Pool, jobs.NewWorkflow("grow").Add("root", step("root")))
	require.NoError(t, err)
	l := newStepLedger()
	var added sync.Map
	b.runUntil(t, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, stepKind, func(ctx context.Context, job *jobs.Job[Step]) error {
			l.mu.Lock()
			l.started = append(l.started, job.Payload.Name)
			l.mu.Unlock()
			if job.Payload.Name != "root" {
				return nil
			}
			tx, err := b.Pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx) //nolint:errcheck
			more := jobs.NewWorkflow(job.Workflow())
			for _, n := range []string{"found-1", "found-2"} {
				more.Add(n, step(n), jobs.AfterJobs(job.ID))
			}
			r, err := jobs.EnqueueWorkflow(ctx, tx, more)
			if err != nil {
				return err
			}
			for n, id := range r.Steps {
				added.Store(n, id)
			}
			if err := worker.AckTx(ctx, tx, job); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}))
	}, "root and the steps it found ran", func() bool { return l.count() == 3 })
	require.Equal(t, "root", l.started[0])
	steps, err := b.client.ListWorkflow(b.Ctx, "grow")
	require.NoError(t, err)
	require.Len(t, steps, 3)
	require.Equal(t, res.Steps["root"], steps[0].ID)
	require.Equal(t, []int64{res.Steps["root"]}, steps[1].Parents)
}

func TestBatchCallbackRunsOnceWithCounts(t *testing.T) {
	b := setup(t)
	entries := make([]jobs.Entry, 50)
	for i := range entries {
		entries[i] = stepKind.Entry(Step{Name: "job", Fail: i%10 == 0})
	}
	res, err := jobs.EnqueueWorkflow(b.Ctx, b.Pool, jobs.NewBatch("batch-1", entries, step("callback")))
	require.NoError(t, err)
	require.Len(t, res.Steps, 51)
	var mu sync.Mutex
	var calls []jobs.ParentCounts
	jobsRun := 0
	b.runUntil(t, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, stepKind, func(ctx context.Context, job *jobs.Job[Step]) error {
			if job.Step() == "callback" {
				c, err := jobs.CountParents(ctx, b.Pool, job.ID)
				if err != nil {
					return err
				}
				mu.Lock()
				calls = append(calls, c)
				mu.Unlock()
				return nil
			}
			mu.Lock()
			jobsRun++
			mu.Unlock()
			if job.Payload.Fail {
				return worker.Permanent(errors.New("told to fail"))
			}
			return nil
		}))
	}, "the callback ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls) > 0
	})
	require.Equal(t, []jobs.ParentCounts{{Completed: 45, Dead: 5}}, calls)
	require.Equal(t, 50, jobsRun)
	testdb.WaitFor(t, "callback completed", func() bool { return b.state(t, res.Steps["callback"]) == jobs.StateCompleted })
}

// TestWorkflowLongChain: a chain of steps (2,000; HOPPER_CHAIN_STEPS sets
// another length: 10,000 for the figures in docs/benchmarks.md) enqueues
// in one call; each end promotes the next; a cancel near the top cascades
// down the rest in one statement (a loop, not thousands of nested
// triggers, which would exhaust the stack). One more step than the limit
// is refused before anything is written. The times are logged, never
// asserted.
func TestWorkflowLongChain(t *testing.T) {
	testdb.Slow(t, "a workflow of 2,000 steps run to its end")
	b := setup(t)
	n := 2000
	if s := os.Getenv("HOPPER_CHAIN_STEPS"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	wf := jobs.NewWorkflow("chain")
	for i := range n {
		var opts []jobs.StepOption
		if i > 0 {
			opts = append(opts, jobs.After(fmt.Sprintf("s%d", i-1)))
		}
		wf.Add(fmt.Sprintf("s%d", i), step("s"), opts...)
	}
	start := time.Now()
	res, err := jobs.EnqueueWorkflow(b.Ctx, b.Pool, wf)
	require.NoError(t, err)
	t.Logf("enqueue of a %d-step chain: %v", n, time.Since(start))
	require.Equal(t, n-1, res.Waiting)
	for i := range 3 {
		_, err := b.client.DeleteJob(b.Ctx, res.Steps[fmt.Sprintf("s%d", i)])
		require.NoError(t, err)
		require.Equal(t, jobs.StatePending, b.state(t, res.Steps[fmt.Sprintf("s%d", i+1)]))
	}
	start = time.Now()
	require.NoError(t, b.client.CancelJob(b.Ctx, res.Steps["s3"]))
	t.Logf("cancel of step 3, cascading to %d steps: %v", n-4, time.Since(start))
	var live, cancelled int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT count(*) FROM hopper_jobs`).Scan(&live))
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT count(*) FROM hopper_dead_jobs WHERE state = 'cancelled'`).Scan(&cancelled))
	require.Zero(t, live)
	require.Equal(t, n-3, cancelled)

	big := jobs.NewWorkflow("too-big")
	e := step("x")
	for i := range jobs.MaxWorkflowSteps + 1 {
		big.Add(strconv.Itoa(i), e)
	}
	_, err = jobs.EnqueueWorkflow(b.Ctx, b.Pool, big)
	require.ErrorIs(t, err, jobs.ErrInvalidWorkflow)
	require.ErrorContains(t, err, "over the limit of 100001")
}

// TestWorkflowRetryOneStep: a step retried on its own (RetryDeadJobs)
// comes back waiting for its parents still live, and applies its policy
// again when one of them failed; retried after its parent, it runs once
// the parent has succeeded.
func TestWorkflowRetryOneStep(t *testing.T) {
	b := setup(t)
	res, err := jobs.EnqueueWorkflow(b.Ctx, b.Pool, jobs.NewWorkflow("one").
		Add("a", step("a")).Add("b", step("b"), jobs.After("a")))
	require.NoError(t, err)
	a, child := res.Steps["a"], res.Steps["b"]
	require.NoError(t, b.client.CancelJob(b.Ctx, a))
	require.Equal(t, jobs.StateCancelled, b.state(t, child))

	back, err := b.client.RetryDeadJobs(b.Ctx, hopper.DeadFilter{IDs: []int64{child}, States: []jobs.State{jobs.StateCancelled}})
	require.NoError(t, err)
	require.Equal(t, []int64{child}, back.Retried)
	require.Equal(t, jobs.StateCancelled, b.state(t, child), "its parent is still cancelled: cancelled again")

	_, err = b.client.RetryDeadJobs(b.Ctx, hopper.DeadFilter{IDs: []int64{a}, States: []jobs.State{jobs.StateCancelled}})
	require.NoError(t, err)
	_, err = b.client.RetryDeadJobs(b.Ctx, hopper.DeadFilter{IDs: []int64{child}, States: []jobs.State{jobs.StateCancelled}})
	require.NoError(t, err)
	require.Equal(t, jobs.StatePending, b.state(t, a))
	require.Equal(t, jobs.StateWaiting, b.state(t, child), "it waits for its parent, live again")
	_, err = b.client.DeleteJob(b.Ctx, a)
	require.NoError(t, err)
	require.Equal(t, jobs.StatePending, b.state(t, child))
}

// TestWorkflowEdgesGoWithTheirStep: a step's edges to its parents stay
// while it is live, dead or kept, and go when it is pruned from the
// history, purged from the dead table, or ends without being kept.
func TestWorkflowEdgesGoWithTheirStep(t *testing.T) {
	b := setup(t)
	edges := func() int {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT count(*) FROM hopper_workflow_deps`).Scan(&n))
		return n
	}
	res, err := jobs.EnqueueWorkflow(b.Ctx, b.Pool, jobs.NewWorkflow("edges").
		Add("a", step("a")).Add("b", step("b"), jobs.After("a")).Add("c", step("c"), jobs.After("a")).
		Add("d", step("d"), jobs.After("b", "c")))
	require.NoError(t, err)
	require.Equal(t, 4, edges())
	l := newStepLedger()
	b.runUntil(t, worker.Config{}, registerSteps(t, l, b.Pool), "the diamond ran", func() bool { return l.count() == 4 })
	testdb.WaitFor(t, "the last step is kept", func() bool { return b.state(t, res.Steps["d"]) == jobs.StateCompleted })
	require.Equal(t, 4, edges(), "kept steps keep their edges")
	_, err = b.Pool.Exec(b.Ctx, `UPDATE hopper_job_history SET keep_until = now() - interval '1 second'`)
	require.NoError(t, err)
	pruned, err := db.New(b.Pool).PruneHistory(b.Ctx, db.PruneHistoryParams{MaxJobs: 100})
	require.NoError(t, err)
	require.EqualValues(t, 4, pruned)
	require.Zero(t, edges(), "pruned with their steps")

	res, err = jobs.EnqueueWorkflow(b.Ctx, b.Pool, jobs.NewWorkflow("edges-2").
		Add("a", step("a")).Add("b", step("b"), jobs.After("a")).Add("c", step("c"), jobs.After("a")))
	require.NoError(t, err)
	_, err = b.client.DeleteJob(b.Ctx, res.Steps["b"])
	require.NoError(t, err)
	require.Equal(t, 1, edges(), "a deleted step is not kept: its edge goes")
	require.NoError(t, b.client.CancelJob(b.Ctx, res.Steps["a"]))
	require.Equal(t, 1, edges(), "a cancelled step is kept in the dead table, with its edges")
	purged, err := b.client.PurgeDeadJobs(b.Ctx, hopper.DeadFilter{States: []jobs.State{jobs.StateCancelled}, All: true})
	require.NoError(t, err)
	require.EqualValues(t, 2, purged)
	require.Zero(t, edges(), "purged with their steps")
}
