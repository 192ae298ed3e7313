package worker

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// benchRun measures one run of a trivial handler through the worker's run
// path (context, timeout, the call): what every job pays in this process,
// without the database. prepare sets the configuration and claim up.
func benchRun(b *testing.B, prepare func(cfg *Config, d *dispatched)) {
	var cfg Config
	e := &executor{handlerBase: context.Background(), cfg: &cfg}
	c := &heldJob{held: &heldJobs{abandonAfter: 10 * time.Second}}
	d := dispatched{h: &handler{}, job: c, timeout: time.Minute,
		call: func(context.Context) (json.RawMessage, error) { return nil, nil }}
	prepare(&cfg, &d)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := e.run(d); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRun is a run with no middleware or hook registered (compare it
// with the same benchmark on a commit before middleware existed).
func BenchmarkRun(b *testing.B) {
	benchRun(b, func(*Config, *dispatched) {})
}
