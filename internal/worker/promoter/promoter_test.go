package promoter

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/passbed"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
	"github.com/hopperq/hopper/internal/worker/announce"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// The promoter makes a scheduled job that fell due pending and announces
// it; one not yet due stays scheduled.
func TestPromoterPromotesDueJobs(t *testing.T) {
	t.Parallel()
	b := passbed.New(t)
	p, err := New(Config{Queries: b.Q, Log: b.Log, Every: time.Hour, Announce: b.Announce})
	require.NoError(t, err)

	// A scheduled job already due, written as such: enqueued with a due
	// time a little ahead, it could be pending by the time a loaded
	// machine inserts it.
	soon := testfactory.Job(b.Ctx, t, b.DB.Pool, &testfactory.JobOpts{State: testfactory.Scheduled,
		RunAt: testfactory.Ptr(time.Now().Add(-time.Second))}).ID
	later := b.Enqueue(time.Now().Add(time.Hour))
	require.Equal(t, "scheduled", b.State(soon))
	require.Equal(t, "scheduled", b.State(later))
	require.EqualValues(t, 1, p.PromoteOnce(b.Ctx), "the job due")
	require.Equal(t, "pending", b.State(soon))
	require.Equal(t, []int64{soon}, b.Announced("promotion"))
	require.Equal(t, "scheduled", b.State(later))
	require.Zero(t, p.PromoteOnce(b.Ctx), "nothing else is due")
}

// A Config missing what the promoter works with is refused at New.
func TestPromoterConfig(t *testing.T) {
	t.Parallel()
	whole := Config{Queries: db.New(nil), Log: slog.Default(), Announce: func(context.Context, *announce.Set, string) {}, Every: time.Second}
	_, err := New(whole)
	require.NoError(t, err)
	for name, edit := range map[string]func(*Config){
		"no queries": func(c *Config) { c.Queries = nil }, "no log": func(c *Config) { c.Log = nil },
		"no announce": func(c *Config) { c.Announce = nil }, "no interval": func(c *Config) { c.Every = 0 },
	} {
		cfg := whole
		edit(&cfg)
		_, err := New(cfg)
		require.Error(t, err, name)
	}
}
