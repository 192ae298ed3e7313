package shard

import (
	"context"
	"fmt"

	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// Handle registers fn as the handler of kind in every shard the Worker
// serves, as worker.Handle does for one worker: the same fn and options
// for each shard's runtime. Register every handler before Run. A limit an
// option sets inside the worker (worker.SharedLimit) holds per shard; the
// limits kept in the database (worker.KeyLimit, FlowControl) hold per
// shard as well, which is exact when a key's jobs all go to one shard, as
// the sharded enqueue places them.
func Handle[T any](w *Worker, kind *jobs.Kind[T], fn func(context.Context, *jobs.Job[T]) error, opts ...worker.HandleOption) error {
	if w == nil {
		return fmt.Errorf("shard: handle: %w: nil Worker", worker.ErrInvalidConfig)
	}
	return w.Each(func(_ string, rt *worker.Worker) error {
		return worker.Handle(rt, kind, fn, opts...)
	})
}

// HandleWithResult registers fn as the handler of kind in every shard the
// Worker serves, as worker.HandleWithResult does for one worker.
func HandleWithResult[T, R any](w *Worker, kind *jobs.Kind[T], fn func(context.Context, *jobs.Job[T]) (R, error), opts ...worker.HandleOption) error {
	if w == nil {
		return fmt.Errorf("shard: handle: %w: nil Worker", worker.ErrInvalidConfig)
	}
	return w.Each(func(_ string, rt *worker.Worker) error {
		return worker.HandleWithResult(rt, kind, fn, opts...)
	})
}
