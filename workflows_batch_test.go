package hopper_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// randomWorkflow is a workflow of 1 to 6 steps, each after a random set
// of the steps before it.
func randomWorkflow(rng *rand.Rand, id string) *jobs.Workflow {
	wf := jobs.NewWorkflow(id)
	n := 1 + rng.IntN(6)
	for i := range n {
		var after []string
		for j := range i {
			if rng.IntN(3) == 0 {
				after = append(after, fmt.Sprintf("%s/s%d", id, j))
			}
		}
		name := fmt.Sprintf("%s/s%d", id, i)
		wf.Add(name, step(name), jobs.After(after...))
	}
	return wf
}

// Many workflows of random shapes enqueued in one call run each step
// after its parents, and each result names its own workflow's jobs.
func TestEnqueueWorkflowsRunsEachInOrder(t *testing.T) {
	b := setup(t)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	var ws []*jobs.Workflow
	steps, waiting := 0, 0
	for i := range 60 {
		wf := randomWorkflow(rng, fmt.Sprintf("batch-%d", i))
		ws = append(ws, wf)
		steps += wf.Len()
	}
	res, err := jobs.EnqueueWorkflows(b.Ctx, b.Pool, ws)
	require.NoError(t, err, "seed %d", seed)
	require.Len(t, res, len(ws))
	seen := map[int64]bool{}
	for i, r := range res {
		require.Equal(t, ws[i].ID(), r.ID)
		require.Len(t, r.Steps, ws[i].Len())
		for name, id := range r.Steps {
			require.False(t, seen[id], "job %d given twice", id)
			seen[id] = true
			var wf, st string
			require.NoError(t, b.Pool.QueryRow(b.Ctx,
				`SELECT meta->>'hopper.workflow', meta->>'hopper.step' FROM hopper_jobs WHERE id = $1`, id).Scan(&wf, &st))
			require.Equal(t, [2]string{r.ID, name}, [2]string{wf, st}, "seed %d", seed)
		}
		waiting += r.Waiting
	}
	var stored int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT count(*) FROM hopper_jobs WHERE state = 'waiting'`).Scan(&stored))
	require.Equal(t, waiting, stored)

	l := newStepLedger()
	b.runUntil(t, worker.Config{}, registerSteps(t, l, b.Pool), "every step ran", func() bool { return l.count() == steps })
	require.Empty(t, l.early, "seed %d", seed)
}

// A batch is written all or none: any workflow refused, before or by the
// database, leaves nothing of the others.
func TestEnqueueWorkflowsAllOrNone(t *testing.T) {
	b := setup(t)
	good := func(id string) *jobs.Workflow {
		return jobs.NewWorkflow(id).Add("a", step("a")).Add("b", step("b"), jobs.After("a"))
	}
	plain := b.enqueue(t, email, "x@example.com")
	tooMany := make([]*jobs.Workflow, 0, 3)
	for i := range 3 {
		wf := jobs.NewWorkflow(fmt.Sprintf("big-%d", i))
		for j := range jobs.MaxWorkflowSteps / 2 {
			wf.Add(fmt.Sprint(j), step("x"))
		}
		tooMany = append(tooMany, wf)
	}
	cases := []struct {
		name string
		ws   []*jobs.Workflow
		want string
	}{
		{"a bad one in the middle", []*jobs.Workflow{good("w1"), jobs.NewWorkflow("w2").Add("a", step("a"), jobs.After("b")), good("w3")},
			`workflow "w2" (2 of 3)`},
		{"a repeated id", []*jobs.Workflow{good("w1"), good("w2"), good("w1")}, `workflows 1 and 3 of 3`},
		{"a nil workflow", []*jobs.Workflow{good("w1"), nil}, "workflow 2 of 2"},
		{"too many steps in all", tooMany, "more than"},
		{"a parent the database refuses", []*jobs.Workflow{good("w1"), jobs.NewWorkflow("w2").Add("a", step("a"), jobs.AfterJobs(plain))},
			"is no step of the workflow"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := jobs.EnqueueWorkflows(b.Ctx, b.Pool, c.ws)
			require.ErrorIs(t, err, jobs.ErrInvalidWorkflow)
			require.ErrorContains(t, err, c.want)
			var n int
			require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT count(*) FROM hopper_jobs`).Scan(&n))
			require.Equal(t, 1, n, "only the plain job")
		})
	}
	res, err := jobs.EnqueueWorkflows(b.Ctx, b.Pool, nil)
	require.NoError(t, err)
	require.Empty(t, res)
}

// Inside a transaction, the batch joins it: rolled back, nothing stays.
func TestEnqueueWorkflowsInTx(t *testing.T) {
	b := setup(t)
	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.Ctx) //nolint:errcheck // after the explicit rollback
	res, err := jobs.EnqueueWorkflows(b.Ctx, tx, []*jobs.Workflow{
		jobs.NewWorkflow("t1").Add("a", step("a")),
		jobs.NewWorkflow("t2").Add("a", step("a")).Add("b", step("b"), jobs.After("a")),
	})
	require.NoError(t, err)
	require.Len(t, res, 2)
	require.NoError(t, tx.Rollback(b.Ctx))
	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT count(*) FROM hopper_jobs`).Scan(&n))
	require.Zero(t, n)
}
