// Package loop holds the shape of a worker's periodic background
// loops: a pass on a jittered interval until the context ends.
package loop

import (
	"context"
	"math/rand/v2"
	"time"
)

// Every calls pass on an interval jittered by ±25% (workers that started
// together spread out), until ctx ends: the shape of the periodic
// maintenance services. A pass that fails logs and waits for its next turn.
func Every(ctx context.Context, every time.Duration, pass func(context.Context)) {
	for {
		if !Sleep(ctx, Jittered(every)) {
			return
		}
		pass(ctx)
	}
}

// Jittered is d scaled by a random factor in [0.75, 1.25).
func Jittered(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.75 + rand.Float64()/2))
}

// Sleep waits d and reports true, or reports false as soon as ctx ends.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
