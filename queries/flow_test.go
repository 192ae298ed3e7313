package queries_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
)

// TestStrictClaimGoesRoundOnlyWhenCrowded: a strict claim under a key
// limit of 1 looks at its first scan ready jobs; it goes round the keys
// for jobs beyond them only when fewer than half the jobs asked for may
// run there. A claim a little short takes what may run: a round costs
// more than the claim.
func TestStrictClaimGoesRoundOnlyWhenCrowded(t *testing.T) {
	const scan, ask = 64, 10
	for _, tc := range []struct {
		name      string
		openKeys  int  // keys with one job each at the front of the head
		wantRound bool // whether the jobs beyond the head are claimed
		wantJobs  int
	}{
		// 6 open keys and one job of the flood: 7 of 10 may run
		{name: "a little short", openKeys: 6, wantJobs: 7},
		// 4 open keys and the flood's: 5 of 10, half, is not crowded
		{name: "half", openKeys: 4, wantJobs: 5},
		// 2 open keys and the flood's: 3 of 10; the round adds the five
		// keys beyond the head, one job each
		{name: "crowded", openKeys: 2, wantRound: true, wantJobs: 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			enqueue := func(key string) {
				t.Helper()
				_, err := b.Queries.Enqueue(b.Ctx, db.EnqueueParams{Queue: "default", Kind: "k", Version: 1,
					Payload: json.RawMessage(`{}`), RunAt: past, MaxAttempts: 3, ConcurrencyKey: &key})
				require.NoError(t, err)
			}
			for i := range tc.openKeys {
				enqueue(fmt.Sprintf("open-%d", i))
			}
			for range scan - tc.openKeys { // the rest of the head: one key's flood
				enqueue("flood")
			}
			for i := range 5 { // beyond the head
				enqueue(fmt.Sprintf("beyond-%d", i))
			}

			rows, err := b.Queries.DequeueLimited(b.Ctx, db.DequeueLimitedParams{Owner: "w", LeaseMs: 60_000,
				Queue: "default", Kinds: []string{"k"}, MaxVersions: []int32{1}, KeyLimits: []int32{0},
				KeyLimit: 1, AfterPriority: -1, AfterRunAt: time.Time{}, MaxJobs: ask, Scan: scan,
				RateBy: "queue", RateWindowMs: 1000})
			require.NoError(t, err)
			beyond := 0
			perKey := map[string]int{}
			for _, r := range rows {
				key := *r.HopperJob.ConcurrencyKey
				perKey[key]++
				if strings.HasPrefix(key, "beyond") {
					beyond++
				}
			}
			require.Equal(t, tc.wantJobs, len(rows), "claimed per key: %v", perKey)
			require.Equal(t, tc.wantRound, beyond > 0, "jobs beyond the head: %v", perKey)
			for key, n := range perKey {
				require.Equal(t, 1, n, "key %s is limited to 1", key)
			}
		})
	}
}

// TestExactStartsHoldBudgetUntilMoved: a claim made with exact_starts
// counts against its rate limit past its window until the worker moves it
// to its last handler start (RateClaimStarted), or until a grace of five
// seconds past its window; RateWait then says 10ms, not the window. Log
// entries are aged by hand, so nothing here waits on the clock.
func TestExactStartsHoldBudgetUntilMoved(t *testing.T) {
	b := setup(t)
	for range 20 {
		b.enqueue(t, jobSpec{})
	}
	claim := func(exact bool) int {
		t.Helper()
		rows, err := b.Queries.DequeueLimited(b.Ctx, db.DequeueLimitedParams{Owner: "w", LeaseMs: 60_000,
			Queue: "default", Kinds: []string{"k"}, MaxVersions: []int32{1}, KeyLimits: []int32{0},
			AfterPriority: -1, MaxJobs: 10, Scan: 64, RateBy: "queue", RateLimit: 3, RateWindowMs: 1000, ExactStarts: exact})
		require.NoError(t, err)
		return len(rows)
	}
	age := func(by string) time.Time { // moves every entry back; returns the newest
		t.Helper()
		var newest time.Time
		require.NoError(t, b.Pool.QueryRow(b.Ctx,
			"WITH aged AS (UPDATE hopper_rate_claims SET claimed_at = claimed_at - $1::interval RETURNING claimed_at) SELECT max(claimed_at) FROM aged", by).Scan(&newest))
		return newest
	}
	wait := func() int64 {
		t.Helper()
		ms, err := b.Queries.RateWait(b.Ctx, db.RateWaitParams{Queue: "default", RateWindowMs: 1000})
		require.NoError(t, err)
		return ms
	}

	require.Equal(t, 3, claim(true))
	claimedAt := age("2 seconds") // past its window, not moved
	require.Zero(t, claim(true), "an entry awaiting its starts still counts")
	require.EqualValues(t, 10, wait(), "overdue: it is moved any moment")

	require.NoError(t, b.Queries.RateClaimStarted(b.Ctx, db.RateClaimStartedParams{Queue: "default", ClaimedAt: claimedAt}))
	require.Zero(t, claim(true), "moved to now: in the window")
	require.Greater(t, wait(), int64(500))
	require.LessOrEqual(t, wait(), int64(1000))

	age("2 seconds")
	require.Equal(t, 3, claim(false), "moved and past its window: the budget is back")
	age("2 seconds")
	require.Equal(t, 3, claim(true), "an entry made without exact_starts does not wait")
	age("7 seconds") // past the window and the grace, never moved
	require.Equal(t, 3, claim(true), "a worker that never moves its entry holds the budget five seconds at most")
	var left int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT count(*) FROM hopper_rate_claims").Scan(&left))
	require.Equal(t, 1, left, "older entries are pruned, the one just made stays")
}
