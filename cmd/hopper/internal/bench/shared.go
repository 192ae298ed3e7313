package bench

import (
	"context"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/jobs"
)

// The jobs every mode runs, the machine the figures come from, and the
// helpers the modes share: filling the table, percentiles.

// benchJob is the payload every benchmark job carries.
type benchJob struct {
	Pad string `json:"pad,omitempty"`
}

var noop = jobs.MustDefine[benchJob]("bench.noop")

// traced is a benchmark job whose worker reports when it started and ended
// (the flow-control modes time some tenants, or every job, this way).
var traced = jobs.MustDefine[benchJob]("bench.traced")

func (cfg Config) payload() benchJob { return benchJob{Pad: strings.Repeat("x", cfg.PayloadSize)} }

// Machine describes where the figures come from.
type Machine struct {
	CPUs     int    `json:"cpus"`
	GoOS     string `json:"goos"`
	GoArch   string `json:"goarch"`
	Go       string `json:"go"`
	Postgres string `json:"postgres"`
}

func machine(ctx context.Context, dbURL string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoOS: runtime.GOOS, GoArch: runtime.GOARCH, Go: runtime.Version()}
	if conn, err := pgx.Connect(ctx, dbURL); err == nil {
		m.Postgres = conn.PgConn().ParameterStatus("server_version")
		conn.Close(ctx)
	}
	return m
}

func repeat[T any](v T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// addScheduled puts n jobs a year ahead into the table.
func addScheduled(ctx context.Context, pool *pgxpool.Pool, n int) error {
	const chunk = 50_000
	far := time.Now().AddDate(1, 0, 0)
	for done := 0; done < n; done += chunk {
		items := make([]jobs.Item[benchJob], min(chunk, n-done))
		for i := range items {
			items[i].Options = []jobs.EnqueueOption{jobs.RunAt(far.Add(time.Duration(i) * time.Millisecond))}
		}
		if _, err := noop.EnqueueMany(ctx, pool, items, jobs.MaxAttempts(1)); err != nil {
			return err
		}
	}
	if n > 0 {
		return maintain(ctx, pool, "analyze.sql")
	}
	return nil
}

// enqueueCopy sends n ready jobs of kind in COPY batches of batch.
func enqueueCopy(ctx context.Context, pool *pgxpool.Pool, kind *jobs.Kind[benchJob], n, batch int, payload benchJob) error {
	items := jobs.Items(repeat(payload, batch)...)
	for left := n; left > 0; left -= len(items) {
		if _, err := kind.EnqueueMany(ctx, pool, items[:min(len(items), left)]); err != nil {
			return err
		}
	}
	return nil
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p / 100 * float64(len(s)-1))
	return s[i]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
