package worker_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/metricsum"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(flowHelperEnv); mode != "" {
		os.Exit(runFlowHelper(mode))
	}
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelper())
	}
	testdb.Main(m)
}

type Task struct {
	N int `json:"n"`
}

// bundle is the test bed's Bundle; this package's helpers hang on it.
type bundle struct{ *testdb.Bundle }

func setup(t *testing.T) *bundle {
	t.Helper()
	return &bundle{testdb.Setup(t)}
}

// taggedPool is a pool of the test's schema whose sessions carry the
// schema's name as application_name, so a test can find (and kill) them.
func (b *bundle) taggedPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(b.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = b.Schema
	pool, err := pgxpool.NewWithConfig(b.Ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// quiet is a logger for tests that expect warnings.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fast is a config for tests: short intervals so nothing waits long.
func fast(cfg worker.Config) worker.Config {
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = 100 * time.Millisecond
	}
	if cfg.RetryBackoff == (worker.Backoff{}) {
		cfg.RetryBackoff = worker.Backoff{Base: time.Millisecond, Max: 10 * time.Millisecond}
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	return cfg
}

// running is a worker started by start.
type running struct {
	w    *worker.Worker
	stop func() // cancels Run and waits for it to return nil
}

// start runs a worker until the test ends (or stop is called).
func start(t *testing.T, b *bundle, cfg worker.Config, register func(*worker.Worker)) *running {
	t.Helper()
	w, err := worker.New(b.Pool, fast(cfg))
	require.NoError(t, err)
	register(w)
	ctx, cancel := context.WithCancel(b.Ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				require.NoError(t, err)
			case <-time.After(time.Minute):
				t.Error("worker did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return &running{w: w, stop: stop}
}

func (b *bundle) job(t *testing.T, id int64) db.HopperJob {
	t.Helper()
	j, err := b.Queries.GetJob(b.Ctx, id)
	require.NoError(t, err)
	return j
}

func (b *bundle) dead(t *testing.T, id int64) (db.HopperDeadJob, bool) {
	t.Helper()
	d, err := b.Queries.GetDead(b.Ctx, id)
	if err != nil {
		return d, false
	}
	return d, true
}

// takeAway makes a running job's lease expire and sweeps it back to
// pending, in one transaction: the worker's lease extension cannot slip in
// between and renew the lease.
func (b *bundle) takeAway(t *testing.T, j db.HopperJob) {
	t.Helper()
	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.Ctx) //nolint:errcheck
	q := db.New(tx)
	// Extend never shortens a lease, so the test ends it by hand.
	tag, err := tx.Exec(b.Ctx, "UPDATE hopper_jobs SET lease_until = now() - interval '1 second' WHERE id = $1 AND attempt = $2 AND state = 'running'", j.ID, j.Attempt)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	swept, err := q.Sweep(b.Ctx, db.SweepParams{MaxJobs: 10})
	require.NoError(t, err)
	require.Len(t, swept, 1)
	require.NoError(t, tx.Commit(b.Ctx))
}

func history(t *testing.T, raw []byte) []jobs.AttemptError {
	t.Helper()
	h, err := jobs.ParseErrors(raw)
	require.NoError(t, err)
	return h
}

var errBoom = errors.New("boom")

func kind(t *testing.T, name string, opts ...jobs.DefineOption) *jobs.Kind[Task] {
	t.Helper()
	k, err := jobs.Define[Task](name, opts...)
	require.NoError(t, err)
	return k
}

// metricValue sums a counter or gauge family across its labels.
func metricValue(t *testing.T, reg *prometheus.Registry, selector string) float64 {
	t.Helper()
	return metricsum.Sum(selector, reg)
}

// scrape reads the worker's metrics endpoint; "" when it does not answer.
func scrape(w *worker.Worker) string {
	resp, err := http.Get("http://" + w.MetricsAddr() + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return string(raw)
}
