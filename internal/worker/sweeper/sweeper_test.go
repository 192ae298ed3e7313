package sweeper

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/passbed"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/worker/announce"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// The sweeper gives back an expired lease and announces the job; a live
// lease stays.
func TestSweeperGivesBackExpiredLeases(t *testing.T) {
	t.Parallel()
	b := passbed.New(t)
	s, err := New(Config{Queries: b.Q, Log: b.Log, Metrics: b.Metrics, Every: time.Hour, Batch: 10, Announce: b.Announce})
	require.NoError(t, err)

	lapsed := b.Enqueue(time.Now().Add(-2 * time.Second))
	require.Len(t, b.Claim("w", 1), 1)
	live := b.Enqueue(time.Now().Add(-time.Second))
	require.Len(t, b.Claim("w", 60_000), 1)
	time.Sleep(20 * time.Millisecond) // the 1ms lease has expired
	requeued, dead := s.SweepOnce(b.Ctx)
	require.Equal(t, 1, requeued)
	require.Zero(t, dead)
	require.Zero(t, b.Metrics.Dead("default"))
	require.Equal(t, "pending", b.State(lapsed))
	require.Equal(t, []int64{lapsed}, b.Announced("sweep"))
	require.Equal(t, "running", b.State(live))

	again, dead := s.SweepOnce(b.Ctx)
	require.Zero(t, again+dead, "nothing left to sweep")
}

// A Config missing what the sweeper works with is refused at New.
func TestSweeperConfig(t *testing.T) {
	t.Parallel()
	whole := Config{Queries: db.New(nil), Log: slog.Default(), Metrics: &passbed.Metrics{},
		Announce: func(context.Context, *announce.Set, string) {}, Every: time.Second, Batch: 1}
	_, err := New(whole)
	require.NoError(t, err)
	for name, edit := range map[string]func(*Config){
		"no queries": func(c *Config) { c.Queries = nil }, "no log": func(c *Config) { c.Log = nil },
		"no metrics": func(c *Config) { c.Metrics = nil }, "no announce": func(c *Config) { c.Announce = nil },
		"no interval": func(c *Config) { c.Every = 0 }, "no batch": func(c *Config) { c.Batch = 0 },
	} {
		cfg := whole
		edit(&cfg)
		_, err := New(cfg)
		require.Error(t, err, name)
	}
}
