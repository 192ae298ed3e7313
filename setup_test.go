package hopper_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type Email struct {
	To string `json:"to"`
}

var (
	email  = jobs.MustDefine[Email]("email", jobs.Defaults(jobs.Queue("mail")))
	report = jobs.MustDefine[Email]("report")
)

// bundle is a test's own schema, with a Client on it.
type bundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	client *hopper.Client
	tdb    *testdb.DB
}

func setup(t *testing.T) *bundle {
	t.Helper()
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	tdb := testdb.New(t)
	return &bundle{ctx: ctx, pool: tdb.Pool, client: hopper.NewClient(tdb.Pool), tdb: tdb}
}

func (b *bundle) enqueue(t *testing.T, k *jobs.Kind[Email], to string, opts ...jobs.EnqueueOption) int64 {
	t.Helper()
	res, err := k.Enqueue(b.ctx, b.pool, Email{To: to}, opts...)
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	return res.ID
}

func (b *bundle) state(t *testing.T, id int64) jobs.State {
	t.Helper()
	row, err := b.client.GetJob(b.ctx, id)
	require.NoError(t, err)
	return row.State
}

// runUntil runs a worker with the given handlers until cond holds (polled
// from the test's goroutine), then stops it.
func (b *bundle) runUntil(t *testing.T, cfg worker.Config, register func(*worker.Worker), what string, cond func() bool) {
	t.Helper()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	cfg.RetryBackoff = worker.Backoff{Base: time.Millisecond, Max: time.Millisecond}
	cfg.Logger = quiet
	w, err := worker.New(b.pool, cfg)
	require.NoError(t, err)
	register(w)
	ctx, stop := context.WithCancel(b.ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	defer func() {
		stop()
		require.NoError(t, <-errc)
	}()
	testdb.WaitFor(t, what, cond)
}
