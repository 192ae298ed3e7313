package worker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

// newTestRun builds w's run components on its schema without starting
// anything, for tests that drive a component directly; ctx is the run's
// hard deadline.
func newTestRun(t *testing.T, ctx context.Context, w *Worker) *run {
	t.Helper()
	schema, err := w.q.HopperSchema(ctx)
	require.NoError(t, err)
	r, err := w.newRun(schema, context.Background(), ctx)
	require.NoError(t, err)
	w.active.Store(r)
	return r
}

// newRun wires every component whole: each producer has its queue's flow
// control (none for a plain queue) and handler goroutines of its own; the
// notifier and registry know the schema; the read-only guard's counter is
// the worker's; the scheduler exists only with
// schedules; and the services list starts the loops the configuration asks
// for, in order.
func TestNewRunWiresEveryComponent(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tdb := testdb.New(t)
	type task struct{}
	kind := jobs.MustDefine[task]("wired")
	build := func(cfg Config, schedules bool) *run {
		t.Helper()
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		w, err := New(tdb.Pool, cfg)
		require.NoError(t, err)
		require.NoError(t, Handle(w, kind, func(context.Context, *jobs.Job[task]) error { return nil }))
		if schedules {
			require.NoError(t, Schedule(w, "nightly", kind, "@daily", func(time.Time) task { return task{} }))
		}
		return newTestRun(t, ctx, w)
	}
	serviceNames := func(r *run) []string {
		var names []string
		for _, s := range r.services() {
			names = append(names, fmt.Sprintf("%T", s))
		}
		return names
	}

	r := build(Config{Queues: map[string]int{"plain": 2, "limited": 3},
		FlowControl: map[string]FlowControl{"limited": {KeyLimit: 1}}}, false)
	require.False(t, r.producers["plain"].Limited())
	require.True(t, r.producers["limited"].Limited())
	for name, p := range r.producers {
		require.Equal(t, name, p.Name())
		require.NotNil(t, r.executor.Queue(name), "queue %s has its handler goroutines", name)
	}
	require.Equal(t, tdb.Schema, r.notifier.Schema())
	require.Equal(t, r.w.metrics.readOnlyC, r.guard.refusals, "the refusals' counter, given to the guard's constructor")
	require.Equal(t, tdb.Schema, r.registry.Schema())
	require.Equal(t, []string{"limited", "plain"}, r.registry.Queues())
	require.Equal(t, ctx, r.hard)
	require.Nil(t, r.scheduler)
	require.Equal(t, []string{"*heartbeat.Heartbeat", "*sweeper.Sweeper", "*promoter.Promoter", "*pruner.Pruner", "*notifier.Notifier"},
		serviceNames(r))

	r = build(Config{Queues: map[string]int{"default": 1}, PollOnly: true}, true)
	require.NotNil(t, r.scheduler)
	require.Equal(t, []string{"nightly"}, r.scheduler.Names())
	require.Equal(t, []string{"*heartbeat.Heartbeat", "*sweeper.Sweeper", "*promoter.Promoter", "*pruner.Pruner", "*scheduler.Scheduler"},
		serviceNames(r), "PollOnly: no notifier")
}
