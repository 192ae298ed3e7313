package worker

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// benchRun measures one run of a trivial handler through the worker's run
// path (context, timeout, the call): what every job pays in this process,
// without the database. prepare sets the worker and claim up.
func benchRun(b *testing.B, prepare func(w *Worker, d *dispatched)) {
	w := &Worker{}
	w.held.abandonAfter = 10 * time.Second
	w.executor = &executor{handlerBase: context.Background(), cfg: &w.cfg}
	c := &heldJob{held: &w.held}
	d := dispatched{h: &handler{}, job: c, timeout: time.Minute,
		call: func(context.Context) (json.RawMessage, error) { return nil, nil }}
	prepare(w, &d)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := w.executor.run(d); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRun is a run with no middleware or hook registered (compare it
// with the same benchmark on a commit before middleware existed).
func BenchmarkRun(b *testing.B) {
	benchRun(b, func(*Worker, *dispatched) {})
}
