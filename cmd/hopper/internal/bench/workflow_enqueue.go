package bench

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/jobs"
)

// How fast many small workflows are enqueued, with no worker running: one
// EnqueueWorkflow per workflow (50 to a transaction, each in a savepoint,
// as an application enqueueing them one by one in batches would) against
// EnqueueWorkflows of workflowsPerCall a call. Both write from four
// connections, each run in a fresh scratch schema; the shapes are the
// diamond (5 steps, 6 edges) and a pair (2 steps, 1 edge). The calls run
// one by one, then batched, then batched, then one by one, per shape.

// WorkflowEnqueueRun is one timed enqueue.
type WorkflowEnqueueRun struct {
	Shape              string  `json:"shape"`
	Batched            bool    `json:"batched"`
	Workflows          int     `json:"workflows"`
	Seconds            float64 `json:"seconds"`
	WorkflowsPerSecond float64 `json:"workflows_per_second"`
	StepsPerSecond     float64 `json:"steps_per_second"`
	// PostgresCPUPer1000 is the server's CPU seconds per 1,000 workflows.
	PostgresCPUPer1000 float64 `json:"postgres_cpu_seconds_per_1000_workflows,omitempty"`
}

const (
	workflowsPerTx   = 50
	workflowsPerCall = 1000
	enqueueConns     = 4
)

// workflowShape builds a workflow of one shape.
type workflowShape struct {
	name  string
	steps int
	build func(id string, payload benchJob) *jobs.Workflow
}

var workflowShapes = []workflowShape{
	{name: "diamond (1→3→1)", steps: 5, build: diamond},
	{name: "pair (1→1)", steps: 2, build: func(id string, payload benchJob) *jobs.Workflow {
		return jobs.NewWorkflow(id).
			Add("first", noop.Entry(payload)).
			Add("then", noop.Entry(payload), jobs.After("first"))
	}},
}

// timeWorkflowEnqueues runs the mirrored pairs of every shape: n
// workflows batched, n/10 one by one (ten times slower, or more).
func timeWorkflowEnqueues(ctx context.Context, cfg Config, n int, logf func(string, ...any)) ([]*WorkflowEnqueueRun, error) {
	var runs []*WorkflowEnqueueRun
	payload := cfg.payload()
	for _, shape := range workflowShapes {
		for _, batched := range []bool{false, true, true, false} {
			count := n
			if !batched {
				count = max(workflowsPerTx*enqueueConns, n/10)
			}
			logf("workflows: enqueue %d of %s, batched %v", count, shape.name, batched)
			r, err := timeWorkflowEnqueue(ctx, cfg, shape, batched, count, payload)
			if err != nil {
				return runs, fmt.Errorf("enqueue %s: %w", shape.name, err)
			}
			runs = append(runs, r)
		}
	}
	return runs, nil
}

func timeWorkflowEnqueue(ctx context.Context, cfg Config, shape workflowShape, batched bool, n int, payload benchJob) (*WorkflowEnqueueRun, error) {
	s, err := newScratch(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	meter := startPGMeter()
	began := time.Now()
	if batched {
		err = enqueueWorkflowsBatched(ctx, s.pool, n, "w-", shape, payload)
	} else {
		err = enqueueWorkflowsOneByOne(ctx, s.pool, n, "w-", shape, payload)
	}
	if err != nil {
		return nil, err
	}
	r := &WorkflowEnqueueRun{Shape: shape.name, Batched: batched, Workflows: n, Seconds: time.Since(began).Seconds()}
	r.WorkflowsPerSecond = float64(n) / r.Seconds
	r.StepsPerSecond = r.WorkflowsPerSecond * float64(shape.steps)
	if pg, ok := meter.seconds(); ok {
		r.PostgresCPUPer1000 = pg / float64(n) * 1000
	}
	return r, nil
}

// fromConns runs fill over [0, n) in chunks of per, from enqueueConns
// goroutines, each chunk in its own transaction.
func fromConns(ctx context.Context, pool *pgxpool.Pool, n, per int, fill func(context.Context, jobs.DBTX, int, int) error) error {
	var next atomic.Int64
	errs := make(chan error, enqueueConns)
	for range enqueueConns {
		go func() {
			for {
				from := int(next.Add(int64(per))) - per
				if from >= n {
					errs <- nil
					return
				}
				tx, err := pool.Begin(ctx)
				if err == nil {
					if err = fill(ctx, tx, from, min(from+per, n)); err == nil {
						err = tx.Commit(ctx)
					}
					_ = tx.Rollback(context.WithoutCancel(ctx)) // a no-op after the commit
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var first error
	for range enqueueConns {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// enqueueWorkflowsOneByOne enqueues n workflows named prefix0, prefix1 …,
// one EnqueueWorkflow each (a savepoint), 50 to a transaction.
func enqueueWorkflowsOneByOne(ctx context.Context, pool *pgxpool.Pool, n int, prefix string, shape workflowShape, payload benchJob) error {
	return fromConns(ctx, pool, n, workflowsPerTx, func(ctx context.Context, tx jobs.DBTX, from, to int) error {
		for i := from; i < to; i++ {
			if _, err := jobs.EnqueueWorkflow(ctx, tx, shape.build(fmt.Sprintf("%s%d", prefix, i), payload)); err != nil {
				return err
			}
		}
		return nil
	})
}

// enqueueWorkflowsBatched enqueues n workflows named prefix0, prefix1 …,
// workflowsPerCall to an EnqueueWorkflows call.
func enqueueWorkflowsBatched(ctx context.Context, pool *pgxpool.Pool, n int, prefix string, shape workflowShape, payload benchJob) error {
	return fromConns(ctx, pool, n, workflowsPerCall, func(ctx context.Context, tx jobs.DBTX, from, to int) error {
		ws := make([]*jobs.Workflow, 0, to-from)
		for i := from; i < to; i++ {
			ws = append(ws, shape.build(fmt.Sprintf("%s%d", prefix, i), payload))
		}
		_, err := jobs.EnqueueWorkflows(ctx, tx, ws)
		return err
	})
}

func printWorkflowEnqueues(w io.Writer, runs []*WorkflowEnqueueRun) {
	if len(runs) == 0 {
		return
	}
	fmt.Fprintf(w, "workflows: enqueueing small workflows, no worker, %d connections (one by one: %d to a transaction; batched: %d to an EnqueueWorkflows call)\n",
		enqueueConns, workflowsPerTx, workflowsPerCall)
	for _, r := range runs {
		way := "one by one"
		if r.Batched {
			way = "batched"
		}
		fmt.Fprintf(w, "  %-18s %-10s %7d workflows in %6.2fs: %8.0f workflows/s, %8.0f steps/s; PostgreSQL CPU per 1000 workflows %.3fs\n",
			r.Shape, way, r.Workflows, r.Seconds, r.WorkflowsPerSecond, r.StepsPerSecond, r.PostgresCPUPer1000)
	}
}
