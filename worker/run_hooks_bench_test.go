package worker

import (
	"context"
	"testing"

	"github.com/hopperq/hopper/jobs"
)

// BenchmarkRunMiddleware is BenchmarkRun with one and with three no-op
// middleware and an outcome hook: what hooks cost per run.
func BenchmarkRunMiddleware(b *testing.B) {
	noop := func(ctx context.Context, _ *jobs.Row, next func(context.Context) error) error { return next(ctx) }
	for _, n := range []int{1, 3} {
		b.Run(map[int]string{1: "one", 3: "three"}[n], func(b *testing.B) {
			benchRun(b, func(cfg *Config, d *dispatched) {
				for range n {
					cfg.Middleware = append(cfg.Middleware, noop)
				}
				cfg.OnOutcome = []OutcomeHook{func(*jobs.Row, Outcome, error) {}}
				d.job.view = &jobs.Row{ID: 1, Kind: "k"}
			})
		})
	}
}
