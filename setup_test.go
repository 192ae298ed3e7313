package hopper_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
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

// bundle is the test bed's Bundle with a Client on the test's schema.
type bundle struct {
	*testdb.Bundle
	client *hopper.Client
}

func setup(t *testing.T) *bundle {
	t.Helper()
	tb := testdb.Setup(t)
	return &bundle{Bundle: tb, client: hopper.NewClient(tb.Pool)}
}

func (b *bundle) enqueue(t *testing.T, k *jobs.Kind[Email], to string, opts ...jobs.EnqueueOption) int64 {
	t.Helper()
	res, err := k.Enqueue(b.Ctx, b.Pool, Email{To: to}, opts...)
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	return res.ID
}

func (b *bundle) state(t *testing.T, id int64) jobs.State {
	t.Helper()
	row, err := b.client.GetJob(b.Ctx, id)
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
	w, err := worker.New(b.Pool, cfg)
	require.NoError(t, err)
	register(w)
	ctx, stop := context.WithCancel(b.Ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	defer func() {
		stop()
		require.NoError(t, <-errc)
	}()
	testdb.WaitFor(t, what, cond)
}

// propertySeed is a property test's seed: the clock's, or the one the
// environment variable env gives to repeat a run's plan. It is logged with
// the command that repeats it.
func propertySeed(t *testing.T, env string) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(env); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d: repeat with %s=%d go test -run %s .", seed, env, seed, t.Name())
	return seed
}
