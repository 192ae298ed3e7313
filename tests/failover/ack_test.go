package failover

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/hacluster"
	"github.com/hopperq/hopper/internal/testbed/wirefault"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/worker"
)

// formation starts a formation of the test's own, with Hopper's schema on
// it, and a pool on its multi-host URL.
func formation(t *testing.T, ctx context.Context) (*hacluster.Formation, *pgxpool.Pool) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a pg_auto_failover formation")
	}
	if err := hacluster.Available(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	f, err := hacluster.Start(ctx, hacluster.Options{FastDetection: true, Log: logWriter{t}})
	require.NoError(t, err)
	t.Cleanup(f.Stop)
	cfg, err := pgxpool.ParseConfig(f.URL())
	require.NoError(t, err)
	hopper.DetectSilentPeers(&cfg.ConnConfig.Config)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, schema.Up(ctx, pool))
	return f, pool
}

// TestAckInFlightAcrossFailover: the acknowledgement of a job commits on
// the primary (and, synchronously, on its standby) but its answer never
// reaches the worker; the primary is then switched over. The worker's
// session hangs until its deadline, and the worker resolves the outcome
// by reading the new primary (docs/guarantees.md, exact outcomes): with
// history kept the row there proves the ack, and the job is reported
// done; without, the ack left no trace and the job is reported
// unconfirmed. Either way it completed, and it does not run again.
func TestAckInFlightAcrossFailover(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		keep    map[string]time.Duration
		outcome worker.Outcome
	}{
		{"history kept", map[string]time.Duration{jobs.DefaultQueue: time.Hour}, worker.OutcomeDone},
		{"no history", nil, worker.OutcomeUnconfirmed},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ackInFlight(t, c.keep, c.outcome)
		})
	}
}

func ackInFlight(t *testing.T, keep map[string]time.Duration, want worker.Outcome) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f, pool := formation(t, ctx)
	var hosts []string
	var proxies []*wirefault.Proxy
	for _, n := range f.Nodes() {
		p := wirefault.Start(t, n.Addr())
		proxies = append(proxies, p)
		hosts = append(hosts, p.Addr())
	}
	wcfg, err := pgxpool.ParseConfig("postgres://postgres@" + strings.Join(hosts, ",") +
		"/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=5")
	require.NoError(t, err)
	hopper.DetectSilentPeers(&wcfg.ConnConfig.Config)
	wpool, err := pgxpool.NewWithConfig(ctx, wcfg)
	require.NoError(t, err)
	defer wpool.Close()

	k := jobs.MustDefine[Task]("failover.ack")
	var mu sync.Mutex
	runs := 0
	var outcomes []worker.Outcome
	w, err := worker.New(wpool, worker.Config{
		Queues: map[string]int{jobs.DefaultQueue: 1}, LeaseDuration: lease, Logger: quiet(), KeepHistoryByQueue: keep,
		OnOutcome: []worker.OutcomeHook{func(_ *jobs.Row, o worker.Outcome, _ error) {
			mu.Lock()
			defer mu.Unlock()
			outcomes = append(outcomes, o)
		}},
	})
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, k, func(context.Context, *jobs.Job[Task]) error {
		mu.Lock()
		defer mu.Unlock()
		runs++
		return nil
	}))
	// The ack goes through in full; its answer is held on node1's proxy
	// (the primary), and that session stops answering.
	const ack = "-- name: AckBatch" // AckBatchKeep too
	proxies[0].StallAfterRequest(ack, 1)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stop(); <-done }()

	job, err := k.Enqueue(ctx, pool, Task{Order: 1})
	require.NoError(t, err)
	require.NoError(t, proxies[0].WaitFired(ctx, ack, 1))
	require.NoError(t, f.Switchover(ctx))
	_, err = f.Stable(ctx)
	require.NoError(t, err)

	client := hopper.NewClient(pool)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(outcomes) > 0
	}, 2*time.Minute, 50*time.Millisecond, "the worker reports the job's outcome")
	mu.Lock()
	require.Equal(t, []worker.Outcome{want}, outcomes, "resolved by reading the new primary")
	require.Equal(t, 1, runs, "the job ran once")
	mu.Unlock()
	row, err := client.GetJob(ctx, job.ID)
	if keep != nil {
		require.NoError(t, err)
		require.Equal(t, jobs.StateCompleted, row.State, "kept in the history")
	} else {
		require.ErrorIs(t, err, hopper.ErrNotFound, "the job is gone: completed")
	}
	proxies[0].Release()
}
