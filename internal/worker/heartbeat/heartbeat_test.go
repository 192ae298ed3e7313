package heartbeat

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/passbed"
	"github.com/hopperq/hopper/internal/testbed/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// recorder records what a heartbeat's funcs were called with.
type recorder struct {
	mu       sync.Mutex
	beats    int
	released []time.Duration // ReleaseGone's liveFor
	leases   []time.Duration // Extend's lease
	ownConn  []bool          // whether Beat ran on the heartbeat's own connection
	result   BeatResult      // what Beat answers
}

func (r *recorder) config(b *passbed.Bed) Config {
	return Config{Pool: b.DB.Pool, DBTX: func(c db.DBTX) db.DBTX { return c }, Queries: b.Q, Log: b.Log,
		Beat: func(ctx context.Context, q *db.Queries) BeatResult {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.beats++
			r.ownConn = append(r.ownConn, q != b.Q)
			return r.result
		},
		ReleaseGone: func(_ context.Context, liveFor time.Duration) {
			r.mu.Lock()
			r.released = append(r.released, liveFor)
			r.mu.Unlock()
		},
		ReadOnly: func(error) bool { return false },
		Extend: func(_ context.Context, q *db.Queries, lease time.Duration) error {
			r.mu.Lock()
			r.leases = append(r.leases, lease)
			r.mu.Unlock()
			return nil
		},
		Running:      func() []Handler { return nil },
		BeatInterval: 5 * time.Millisecond, ExtendInterval: 15 * time.Millisecond, LeaseDuration: time.Minute,
	}
}

func (r *recorder) snapshot() (beats int, released, leases []time.Duration, own []bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.beats, append([]time.Duration(nil), r.released...), append([]time.Duration(nil), r.leases...), append([]bool(nil), r.ownConn...)
}

// run runs h until the test ends.
func run(t *testing.T, h *Heartbeat) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// The heartbeat beats on a connection of its own, hands back gone workers'
// jobs when its beat says some wait, and extends the held claims' leases by
// LeaseDuration, less often than it beats.
func TestHeartbeatBeatsAndExtends(t *testing.T) {
	t.Parallel()
	b := passbed.New(t)
	r := &recorder{result: BeatResult{GoneWaiting: true, LiveFor: 7 * time.Second}}
	h, err := New(r.config(b))
	require.NoError(t, err)
	run(t, h)
	testdb.WaitFor(t, "three lease extensions", func() bool { return h.Extensions() >= 3 })

	beats, released, leases, own := r.snapshot()
	require.GreaterOrEqual(t, len(leases), 3)
	require.Greater(t, beats, len(leases), "it beats more often than it extends")
	for _, l := range leases {
		require.Equal(t, time.Minute, l)
	}
	require.NotEmpty(t, released)
	require.Equal(t, 7*time.Second, released[0])
	// The first acquire may take longer than a beat (a new session): the
	// heartbeat then runs on Queries until it has its connection.
	require.Contains(t, own, true, "the beats run on the heartbeat's own connection")
}

// With ExtendInterval off the heartbeat only beats; once a beat says the
// worker was taken to be gone, it checks its claims at once, moving no
// lease (an extension by 0).
func TestHeartbeatExtensionOff(t *testing.T) {
	t.Parallel()
	b := passbed.New(t)
	r := &recorder{}
	cfg := r.config(b)
	cfg.ExtendInterval = -1
	h, err := New(cfg)
	require.NoError(t, err)
	run(t, h)
	testdb.WaitFor(t, "three beats", func() bool { beats, _, _, _ := r.snapshot(); return beats >= 3 })
	_, released, leases, _ := r.snapshot()
	require.Empty(t, leases, "no extension while extension is off")
	require.Empty(t, released, "no gone worker waits")

	r.mu.Lock()
	r.result = BeatResult{Released: true}
	r.mu.Unlock()
	testdb.WaitFor(t, "a check of the claims", func() bool { return h.Extensions() >= 1 })
	_, _, leases, _ = r.snapshot()
	require.Equal(t, time.Duration(0), leases[0])
}

// InBatches extends the claims held in statements of at most extendBatch
// claims, every claim once, and stops at the first error.
func TestInBatches(t *testing.T) {
	t.Parallel()
	held := make([]int, 2*extendBatch+1)
	for i := range held {
		held[i] = i
	}
	var sizes []int
	var seen int
	failAt := -1
	extend := InBatches(func() []int { return held }, func(_ context.Context, _ *db.Queries, batch []int, lease time.Duration) (int, error) {
		require.Equal(t, time.Minute, lease)
		if len(sizes) == failAt {
			return 0, errors.New("refused")
		}
		sizes = append(sizes, len(batch))
		for _, c := range batch {
			require.Equal(t, seen, c)
			seen++
		}
		return len(batch), nil
	})
	require.NoError(t, extend(context.Background(), nil, time.Minute))
	require.Equal(t, []int{extendBatch, extendBatch, 1}, sizes)

	sizes, seen, failAt = nil, 0, 1
	require.EqualError(t, extend(context.Background(), nil, time.Minute), "refused")
	require.Equal(t, []int{extendBatch}, sizes, "the first error stops it")
}

// stuck is a running handler for the stuck watch.
type stuck struct {
	name                string
	overdue, held, done bool
	abandoned, gaveUp   bool
}

func (s *stuck) Overdue(time.Time) (bool, time.Duration) { return s.overdue, time.Hour }
func (s *stuck) Abandon() bool {
	if !s.held {
		return false
	}
	s.held, s.abandoned = false, true
	return true
}
func (s *stuck) GiveUp() bool {
	if s.done || s.gaveUp {
		return false
	}
	s.gaveUp = true
	return true
}
func (s *stuck) LogAttrs() []any { return []any{"job", s.name} }

// The stuck watch abandons an overdue handler whose claim is held, gives up
// on one whose claim was taken from it, once, and leaves the others be.
func TestAbandonStuck(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	onTime := &stuck{name: "on-time", held: true}
	held := &stuck{name: "held", overdue: true, held: true}
	lost := &stuck{name: "lost", overdue: true}
	returned := &stuck{name: "returned", overdue: true, done: true}
	h, err := New(Config{Queries: db.New(nil), Log: slog.New(slog.NewTextHandler(&logs, nil)),
		Beat:        func(context.Context, *db.Queries) BeatResult { return BeatResult{} },
		ReleaseGone: func(context.Context, time.Duration) {}, ReadOnly: func(error) bool { return false },
		Extend:       func(context.Context, *db.Queries, time.Duration) error { return nil },
		Running:      func() []Handler { return []Handler{onTime, held, lost, returned} },
		BeatInterval: time.Second, LeaseDuration: time.Minute})
	require.NoError(t, err)

	h.abandonStuck(time.Now())
	require.False(t, onTime.abandoned || onTime.gaveUp, "a handler on time is left be")
	require.True(t, held.abandoned)
	require.True(t, lost.gaveUp)
	require.False(t, returned.gaveUp, "a handler that returned is not given up on")
	require.Contains(t, logs.String(), "job=held")
	require.Contains(t, logs.String(), "job=lost")
	require.Contains(t, logs.String(), "running_for=1h0m0s")

	logs.Reset()
	h.abandonStuck(time.Now())
	require.NotContains(t, logs.String(), "job=lost", "given up on once")
}

// A Config missing what the heartbeat works with is refused at New.
func TestHeartbeatConfig(t *testing.T) {
	t.Parallel()
	whole := Config{Queries: db.New(nil), Log: slog.Default(),
		Beat:        func(context.Context, *db.Queries) BeatResult { return BeatResult{} },
		ReleaseGone: func(context.Context, time.Duration) {}, ReadOnly: func(error) bool { return false },
		Extend:       func(context.Context, *db.Queries, time.Duration) error { return nil },
		Running:      func() []Handler { return nil },
		BeatInterval: time.Second, LeaseDuration: time.Minute}
	_, err := New(whole)
	require.NoError(t, err)
	for name, edit := range map[string]func(*Config){
		"no queries": func(c *Config) { c.Queries = nil }, "no log": func(c *Config) { c.Log = nil },
		"no beat": func(c *Config) { c.Beat = nil }, "no release": func(c *Config) { c.ReleaseGone = nil },
		"no read-only check": func(c *Config) { c.ReadOnly = nil }, "no extend": func(c *Config) { c.Extend = nil },
		"no running": func(c *Config) { c.Running = nil }, "no beat interval": func(c *Config) { c.BeatInterval = 0 },
		"no lease":            func(c *Config) { c.LeaseDuration = 0 },
		"a pool without DBTX": func(c *Config) { c.Pool = &pgxpool.Pool{} },
	} {
		cfg := whole
		edit(&cfg)
		_, err := New(cfg)
		require.Error(t, err, name)
	}
}
