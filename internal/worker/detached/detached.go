// Package detached is the runtime's word for a handler run without a
// worker and without a database (hoppertest.Work): the test kit puts a Run
// in the handler's context, and the job's own calls (worker.ExtendLease,
// worker.AckTx, the durable calls) tell it what the handler asked for
// instead of running statements. The runtime defines the interface; the
// test kit implements it, so the runtime imports nothing of the kit.
package detached

import (
	"context"
	"time"

	"github.com/hopperq/hopper/jobs"
)

// Run is one detached run: what a job's calls report to when no worker
// holds the job.
type Run interface {
	// ExtendLease is told of a worker.ExtendLease by d.
	ExtendLease(d time.Duration)
	// AckTx is told of a worker.AckTx on tx (never nil).
	AckTx(tx jobs.DBTX)
}

type key struct{}

// With returns ctx carrying r.
func With(ctx context.Context, r Run) context.Context { return context.WithValue(ctx, key{}, r) }

// From returns the detached run ctx carries, or nil in a worker's run.
func From(ctx context.Context) Run {
	r, _ := ctx.Value(key{}).(Run)
	return r
}
