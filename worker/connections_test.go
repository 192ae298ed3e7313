package worker_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/worker"
)

// syncBuffer is a bytes.Buffer a logger may write from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestConnections: a worker counts the connections its own statements may
// hold at once, part by part, and says at start when its pool is smaller.
func TestConnections(t *testing.T) {
	b := setup(t)
	for _, c := range []struct {
		name     string
		maxConns int32
		cfg      worker.Config
		want     worker.Connections
		warns    bool
	}{
		{"three plain queues share a claim: pgxpool's default for 2 cores is enough", 4,
			worker.Config{Queues: map[string]int{"a": 5, "b": 5, "c": 5}},
			worker.Connections{Claims: 1, Completer: 1, Heartbeat: 1, Maintenance: 1}, false},
		{"two of three queues under flow control", 4,
			worker.Config{Queues: map[string]int{"a": 5, "b": 5, "c": 5},
				FlowControl: map[string]worker.FlowControl{"a": {KeyLimit: 1}, "b": {KeyLimit: 2}}},
			worker.Connections{Claims: 3, Completer: 1, Heartbeat: 1, Maintenance: 1}, true},
		{"one queue with metrics, a pool of 4", 4,
			worker.Config{MetricsAddr: "127.0.0.1:0"},
			worker.Connections{Claims: 1, Completer: 1, Heartbeat: 1, Maintenance: 1, Metrics: 1}, true},
		{"one queue on pgxpool's default for 2 cores", 4,
			worker.Config{},
			worker.Connections{Claims: 1, Completer: 1, Heartbeat: 1, Maintenance: 1}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := pgxpool.ParseConfig(b.URL)
			require.NoError(t, err)
			cfg.MaxConns = c.maxConns
			pool, err := pgxpool.NewWithConfig(b.Ctx, cfg)
			require.NoError(t, err)
			defer pool.Close()
			var logs syncBuffer
			c.cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			w, err := worker.New(pool, c.cfg)
			require.NoError(t, err)
			require.NoError(t, worker.Handle(w, kind(t, "connections"), noop))
			require.Equal(t, c.want, w.Connections())

			ctx, cancel := context.WithCancel(b.Ctx)
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			testdb.WaitFor(t, "started", func() bool { return len(b.workerRows(t)) == 1 })
			cancel()
			require.NoError(t, <-done)
			if c.warns {
				require.Contains(t, logs.String(), "the pool is smaller than this worker needs")
				require.Contains(t, logs.String(), c.want.String())
			} else {
				require.NotContains(t, logs.String(), "the pool is smaller")
			}
		})
	}
}

// TestConnectionsForSizing: the connections a worker needs can be counted
// before there is a pool (ConnectionsFor, from the Config alone) and
// right after New, before any handler is registered; ConnectionsFor is
// the most a worker of that Config reaches once its handlers (one with a
// key limit of its own) and schedules are registered.
func TestConnectionsForSizing(t *testing.T) {
	b := setup(t)
	cfg := worker.Config{Queues: map[string]int{"a": 5, "b": 5, "c": 5},
		FlowControl: map[string]worker.FlowControl{"a": {KeyLimit: 1}}, MetricsAddr: "127.0.0.1:0"}

	most, err := worker.ConnectionsFor(cfg)
	require.NoError(t, err)
	require.Equal(t, worker.Connections{Claims: 3, Completer: 1, Heartbeat: 1, Maintenance: 1, Schedules: 1, Metrics: 1}, most)
	require.Equal(t, 8, most.Total())
	defaults, err := worker.ConnectionsFor(worker.Config{})
	require.NoError(t, err)
	require.Equal(t, worker.Connections{Claims: 1, Completer: 1, Heartbeat: 1, Maintenance: 1, Schedules: 1}, defaults,
		"the default queue, and a schedule it may fire")
	_, err = worker.ConnectionsFor(worker.Config{Queues: map[string]int{"a": 0}})
	require.ErrorIs(t, err, worker.ErrInvalidConfig)

	w, err := worker.New(b.Pool, cfg)
	require.NoError(t, err)
	before := w.Connections()
	require.Equal(t, worker.Connections{Claims: 2, Completer: 1, Heartbeat: 1, Maintenance: 1, Metrics: 1}, before,
		"before any handler: a, under flow control, claims alone; b and c share a claim")
	require.NoError(t, worker.Handle(w, kind(t, "sizing_plain"), noop))
	require.Equal(t, before, w.Connections(), "a plain handler changes nothing")
	require.NoError(t, worker.Handle(w, kind(t, "sizing_keyed"), noop, worker.KeyLimit(2)))
	require.NoError(t, worker.Schedule(w, "sizing", tick, "@every 1h", slotOf))
	require.Equal(t, most, w.Connections(), "a kind's key limit puts every queue under flow control; a schedule adds its own")
}
