package shard_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/metricsum"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/shard"
	"github.com/hopperq/hopper/worker"
)

type errand struct{ N int }

var errandKind = jobs.MustDefine[errand]("shard_worker_errand")

// lazyPool is a pool that never connects unless used: NewWorker's checks
// need no database.
func lazyPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/none")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func TestNewWorkerRefusesBadShardsAndConfig(t *testing.T) {
	t.Parallel()
	pool := lazyPool(t)
	for name, c := range map[string]struct {
		shards []string
		cfg    worker.Config
		says   string
	}{
		"no shards":     {nil, worker.Config{}, "no shards"},
		"a duplicate":   {[]string{"s0", "s1", "s0"}, worker.Config{}, "s0 is named twice"},
		"an empty name": {[]string{"s0", ""}, worker.Config{}, "shard 1: the schema name is empty"},
		"a long name":   {[]string{strings.Repeat("s", 64)}, worker.Config{}, "64 bytes long"},
		"a schema":      {[]string{"s0"}, worker.Config{Schema: "s0"}, "its shards"},
		"metrics addr":  {[]string{"s0"}, worker.Config{MetricsAddr: ":0"}, "MetricsAddr"},
		"a bad queue":   {[]string{"s0"}, worker.Config{Queues: map[string]int{"q": 0}}, "shard s0"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := shard.NewWorker(pool, c.shards, c.cfg)
			require.ErrorIs(t, err, worker.ErrInvalidConfig)
			require.ErrorContains(t, err, c.says)
		})
	}
	_, err := shard.NewWorker(nil, []string{"s0"}, worker.Config{})
	require.ErrorIs(t, err, worker.ErrInvalidConfig)
}

func TestNewWorkerSuffixesIDsAndRegistersEverywhere(t *testing.T) {
	t.Parallel()
	pool := lazyPool(t)
	w, err := shard.NewWorker(pool, []string{"s0", "s1", "s2"}, worker.Config{ID: "pod-7", Queues: map[string]int{"default": 3}})
	require.NoError(t, err)
	require.Equal(t, "pod-7", w.ID())
	require.Equal(t, []string{"s0", "s1", "s2"}, w.Shards())
	require.NoError(t, shard.Handle(w, errandKind, func(context.Context, *jobs.Job[errand]) error { return nil }))
	var ids []string
	require.NoError(t, w.Each(func(s string, rt *worker.Worker) error {
		ids = append(ids, rt.ID())
		return nil
	}))
	require.Equal(t, []string{"pod-7/s0", "pod-7/s1", "pod-7/s2"}, ids)
	// A kind registered twice is refused, naming the first shard.
	err = shard.Handle(w, errandKind, func(context.Context, *jobs.Job[errand]) error { return nil })
	require.ErrorIs(t, err, jobs.ErrDuplicateKind)
	require.ErrorContains(t, err, "shard s0")
	require.Equal(t, 3, w.Connections().Completer, "one completer per shard")

	// A made-up ID is one for the whole Worker.
	w, err = shard.NewWorker(pool, []string{"s0", "s1"}, worker.Config{})
	require.NoError(t, err)
	require.NoError(t, w.Each(func(s string, rt *worker.Worker) error {
		require.Equal(t, w.ID()+"/"+s, rt.ID())
		return nil
	}))
}

// TestWorkerServesEveryShard, on plain PostgreSQL: two Hopper schemas
// served by one Worker, every job of both worked once; the metrics carry
// the shard; a shard that is not migrated stops the whole Worker, naming
// the shard.
func TestWorkerServesEveryShard(t *testing.T) {
	t.Parallel()
	a, b := testdb.New(t), testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 40
	for i := range n {
		_, err := errandKind.Enqueue(ctx, a.Pool, errand{N: i})
		require.NoError(t, err)
		_, err = errandKind.Enqueue(ctx, b.Pool, errand{N: n + i})
		require.NoError(t, err)
	}
	reg := prometheus.NewRegistry()
	w, err := shard.NewWorker(a.Pool, []string{a.Schema, b.Schema}, worker.Config{Registerer: reg, Logger: quiet()})
	require.NoError(t, err)
	var mu sync.Mutex
	ran := map[int]int{}
	require.NoError(t, shard.Handle(w, errandKind, func(_ context.Context, j *jobs.Job[errand]) error {
		mu.Lock()
		ran[j.Payload.N]++
		mu.Unlock()
		return nil
	}))
	wctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(wctx) }()
	testdb.WaitFor(t, "both shards drained", func() bool {
		return metricsum.Sum(`hopper_job_outcomes_total{outcome="done"}`, reg) == 2*n
	})
	stop()
	require.NoError(t, <-errc)
	require.Len(t, ran, 2*n)
	for i, times := range ran {
		require.Equal(t, 1, times, "job %d ran once", i)
	}
	for _, s := range []string{a.Schema, b.Schema} {
		require.EqualValues(t, n, metricsum.Sum(`hopper_job_outcomes_total{outcome="done",shard="`+s+`"}`, reg), s)
	}

	// A shard with no Hopper schema: Run fails naming it, and the other
	// shard's runtime, started meanwhile, is shut down.
	w, err = shard.NewWorker(a.Pool, []string{a.Schema, "shard_worker_test_missing"}, worker.Config{Logger: quiet()})
	require.NoError(t, err)
	require.NoError(t, shard.Handle(w, errandKind, func(context.Context, *jobs.Job[errand]) error { return nil }))
	err = w.Run(ctx)
	require.ErrorIs(t, err, jobs.ErrNotMigrated)
	require.ErrorContains(t, err, "shard shard_worker_test_missing")
	require.NotContains(t, err.Error(), "shard "+a.Schema+":")
	require.ErrorContains(t, w.Run(ctx), "Run called twice")
}
