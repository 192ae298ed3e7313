package worker

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// benchRun measures the worker's part of one run of a trivial handler
// (the job's context value, the middleware and hooks, the call): what
// every job pays in this process, without the database, on top of the
// executor's part (internal/worker/executor's BenchmarkRun: the run's
// context, its timeout, the in-flight set). prepare sets the
// configuration and claim up.
func benchRun(b *testing.B, prepare func(cfg *Config, d *dispatched)) {
	var cfg Config
	c := &heldJob{held: &heldJobs{abandonAfter: 10 * time.Second}}
	d := dispatched{h: &handler{}, job: c, timeout: time.Minute,
		call: func(context.Context) (json.RawMessage, error) { return nil, nil }}
	prepare(&cfg, &d)
	r := &run{w: &Worker{cfg: cfg}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.call(ctx, d); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRun is the worker's part of a run with no middleware or hook
// registered.
func BenchmarkRun(b *testing.B) {
	benchRun(b, func(*Config, *dispatched) {})
}
