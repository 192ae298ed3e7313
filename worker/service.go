package worker

import (
	"context"
	"time"

	"github.com/hopperq/hopper/internal/worker/loop"
)

// service is one of a worker's background loops: the heartbeat, the
// maintenance services (sweeper, promoter, pruner, scheduler), the
// notifier and the metrics server. Each is built whole by its constructor,
// owns its state, and Run works until ctx ends, then returns. Run starts
// them all from one list (run.services) and waits for every one at the very
// end of its shutdown. The periodic ones pass on a jittered interval
// (internal/worker/loop.Every).
type service interface {
	Run(ctx context.Context)
}

// sleep waits d and reports true, or false as soon as ctx ends.
func sleep(ctx context.Context, d time.Duration) bool { return loop.Sleep(ctx, d) }
