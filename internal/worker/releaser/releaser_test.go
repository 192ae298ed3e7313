package releaser

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

// The releaser hands back the running jobs of a worker gone without a
// clean stop (its row stale) and announces them, recording the reason in
// the job's errors; a live worker's jobs stay, unless named and forced, as
// a worker taking over its own ID at start does.
func TestReleaserHandsBackGoneWorkersJobs(t *testing.T) {
	t.Parallel()
	b := passbed.New(t)
	rel, err := New(Config{Queries: b.Q, Log: b.Log, Metrics: b.Metrics, Batch: 10, Announce: b.Announce})
	require.NoError(t, err)
	register := func(id string, staleAfter time.Duration) {
		t.Helper()
		_, err := b.Q.RegisterWorker(b.Ctx, db.RegisterWorkerParams{ID: id, Host: "h-" + id, Pid: 7, HopperVersion: "test",
			Queues: []string{"default"}, StaleAfterMs: staleAfter.Milliseconds()})
		require.NoError(t, err)
	}
	register("gone", time.Millisecond)
	register("live", time.Hour)
	goneJob := b.Enqueue(time.Now().Add(-2 * time.Second))
	require.Len(t, b.Claim("gone", 60_000), 1)
	liveJob := b.Enqueue(time.Now().Add(-time.Second))
	require.Len(t, b.Claim("live", 60_000), 1)
	time.Sleep(20 * time.Millisecond) // "gone" misses its stale window

	rel.ReleaseGone(b.Ctx, time.Hour)
	require.Equal(t, "pending", b.State(goneJob))
	require.Equal(t, "running", b.State(liveJob))
	require.Equal(t, []int64{goneJob}, b.Announced("release"))
	require.Equal(t, 1, b.Metrics.Released("default", ReasonGone))
	j, err := b.Q.GetJob(b.Ctx, goneJob)
	require.NoError(t, err)
	require.Contains(t, string(j.Errors), ReasonGone)

	id := "live"
	gone, err := rel.ReleaseJobsOf(b.Ctx, db.ReleaseWorkerJobsParams{WorkerID: &id, Force: true, Reason: ReasonRestarted})
	require.NoError(t, err)
	require.Len(t, gone, 1)
	require.Equal(t, Gone{ID: "live", Host: "h-live", PID: 7, Requeued: 1}, *gone[0])
	require.Equal(t, "pending", b.State(liveJob))
	require.Equal(t, 1, b.Metrics.Released("default", ReasonRestarted))
}

// A Config missing what the releaser works with is refused at New.
func TestReleaserConfig(t *testing.T) {
	t.Parallel()
	whole := Config{Queries: db.New(nil), Log: slog.Default(), Metrics: &passbed.Metrics{},
		Announce: func(context.Context, *announce.Set, string) {}, Batch: 1}
	_, err := New(whole)
	require.NoError(t, err)
	for name, edit := range map[string]func(*Config){
		"no queries": func(c *Config) { c.Queries = nil }, "no log": func(c *Config) { c.Log = nil },
		"no metrics": func(c *Config) { c.Metrics = nil }, "no announce": func(c *Config) { c.Announce = nil },
		"no batch": func(c *Config) { c.Batch = 0 },
	} {
		cfg := whole
		edit(&cfg)
		_, err := New(cfg)
		require.Error(t, err, name)
	}
}
