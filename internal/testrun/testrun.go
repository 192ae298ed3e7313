// Package testrun carries a handler run that has no worker and no
// database (hoppertest.Work) in the handler's context, so that
// worker.ExtendLease and worker.AckTx record what the handler asked for
// instead of running statements.
package testrun

import (
	"context"
	"sync"
	"time"
)

// Run records the calls a handler made during one detached run.
type Run struct {
	mu         sync.Mutex
	extensions []time.Duration
	ackedInTx  any // the transaction given to AckTx; nil: none
}

type key struct{}

// With returns ctx carrying r.
func With(ctx context.Context, r *Run) context.Context { return context.WithValue(ctx, key{}, r) }

// From returns the run ctx carries, or nil in a real worker's run.
func From(ctx context.Context) *Run {
	r, _ := ctx.Value(key{}).(*Run)
	return r
}

// Extend records an ExtendLease.
func (r *Run) Extend(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.extensions = append(r.extensions, d)
}

// AckTx records an AckTx on tx.
func (r *Run) AckTx(tx any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ackedInTx = tx
}

// Extensions are the durations ExtendLease was called with, in order.
func (r *Run) Extensions() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.extensions...)
}

// AckedInTx is the transaction AckTx was given (nil: not called).
func (r *Run) AckedInTx() any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ackedInTx
}
