package worker

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// A claim under the claim lock sees the claims before it, and the lock
// ends with the claim. Both ways of running it: as a batch on the pool,
// and in a transaction scoped to Config.Schema.
func TestClaimLockLastsForTheClaimOnly(t *testing.T) {
	t.Parallel()
	for _, scoped := range []bool{false, true} {
		t.Run(map[bool]string{false: "pool", true: "schema"}[scoped], func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			tdb := testdb.New(t)
			pcfg, err := pgxpool.ParseConfig(tdb.URL)
			require.NoError(t, err)
			pcfg.MaxConns = 1 // every statement below runs on the claims' session
			pool, err := pgxpool.NewWithConfig(ctx, pcfg)
			require.NoError(t, err)
			defer pool.Close()

			cfg := Config{Queues: map[string]int{"default": 10}}
			if scoped {
				cfg.Schema = tdb.Schema
			}
			w, err := New(pool, cfg)
			require.NoError(t, err)
			limited := newTestRun(t, ctx, w).producers["default"]
			for _, key := range []string{"a", "a", "b"} {
				_, err := w.q.Enqueue(ctx, db.EnqueueParams{Queue: "default", Kind: "k", Version: 1,
					Payload: json.RawMessage(`{}`), RunAt: time.Now(), MaxAttempts: 3, ConcurrencyKey: &key})
				require.NoError(t, err)
			}

			p := db.DequeueLimitedParams{Owner: "w", LeaseMs: 60_000, Queue: "default",
				Kinds: []string{"k"}, MaxVersions: []int32{1}, KeyLimits: []int32{0}, KeyLimit: 1,
				AfterPriority: -1, MaxJobs: 10, Scan: 64, RateBy: "queue", RateWindowMs: 1000}
			bad := p
			bad.Scan = -1 // LIMIT -1: the statement fails, after the lock
			_, err = limited.claimLimited(ctx, bad)
			require.ErrorContains(t, err, "LIMIT must not be negative")

			first, err := limited.claimLimited(ctx, p)
			require.NoError(t, err)
			require.Len(t, first, 2, "one job of each key")
			again, err := limited.claimLimited(ctx, p)
			require.NoError(t, err)
			require.Empty(t, again, "key a is at its limit")

			var locks int
			require.NoError(t, pool.QueryRow(ctx,
				"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()").Scan(&locks))
			require.Zero(t, locks, "the claim lock ends with the claim")
		})
	}
}
