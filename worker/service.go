package worker

import (
	"context"
	"math/rand/v2"
	"time"
)

// service is one of a worker's background loops: the heartbeat, the
// maintenance services (sweeper, promoter, pruner, scheduler), the
// notifier and the metrics server. Each is built whole by its constructor,
// owns its state, and run works until ctx ends, then returns. Run starts
// them all from one list (run.services) and waits for every one at the very
// end of its shutdown.
type service interface {
	run(ctx context.Context)
}

// everyJittered calls pass on an interval jittered by ±25% (workers that
// started together spread out), until ctx ends: the shape of the periodic
// maintenance services. A pass that fails logs and waits for its next turn.
func everyJittered(ctx context.Context, every time.Duration, pass func(context.Context)) {
	for {
		if !sleep(ctx, jittered(every)) {
			return
		}
		pass(ctx)
	}
}

// jittered is d scaled by a random factor in [0.75, 1.25).
func jittered(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.75 + rand.Float64()/2))
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
