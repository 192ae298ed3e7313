package hopper_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

// TestListJobsOverAMillion: a million jobs (900,000 live, 50,000 dead or
// cancelled, 50,000 completed); the first page, a page half-way down, and
// filtered pages each read a page's worth of rows. The times and the plan
// of a deep page are printed, never asserted: machines are noisy. What is
// asserted is the plan's shape: an index scan per table from the cursor,
// merged, reading few buffers.
func TestListJobsOverAMillion(t *testing.T) {
	testdb.Slow(t, "a million rows")
	b := setup(t)
	ctx, cancel := context.WithTimeout(b.Ctx, 3*time.Minute)
	defer cancel()
	began := time.Now()
	testdb.SeedMillion(t, ctx, b.Pool)
	t.Logf("1,000,000 jobs written in %v", time.Since(began).Round(time.Millisecond))

	// A client whose statements are captured, to EXPLAIN the real one.
	var last captured
	cfg, err := pgxpool.ParseConfig(b.URL)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = &last
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	client := hopper.NewClient(pool)

	timed := func(name string, p hopper.ListParams) hopper.JobPage {
		t.Helper()
		var page hopper.JobPage
		best := time.Hour
		for range 3 { // the best of three: the first pays for planning and cold pages
			start := time.Now()
			page, err = client.ListJobs(ctx, p)
			require.NoError(t, err, name)
			best = min(best, time.Since(start))
		}
		t.Logf("%-44s %3d jobs in %v", name, len(page.Jobs), best.Round(10*time.Microsecond))
		return page
	}
	first := timed("first page, every state", hopper.ListParams{})
	require.Len(t, first.Jobs, hopper.DefaultListLimit)
	require.Equal(t, int64(3_050_000), first.Jobs[0].ID, "newest first: the last completed job")

	deep := hopper.ListParams{After: hopper.CursorAfter(450_010)}
	page := timed("a page 550,000 jobs deep", deep)
	require.Equal(t, int64(450_009), page.Jobs[0].ID)
	sql, args := last.sql, last.args
	plan := explain(t, ctx, pool, sql, args)
	t.Logf("the plan of that page:\n%s", plan)
	require.Contains(t, plan, "Merge Append", "one ordered scan per table, merged")
	require.Contains(t, plan, "Index Scan Backward using hopper_jobs_pkey")
	require.NotContains(t, plan, "Seq Scan")
	require.NotContains(t, plan, "Sort Method", "no sort of the matching rows: the order comes from the indexes")

	page = timed("a page 550,000 deep, 10 pages on", hopper.ListParams{After: walk(t, ctx, client, deep, 10)})
	require.Len(t, page.Jobs, hopper.DefaultListLimit)
	timed("queue q1, pending", hopper.ListParams{Queue: "q1", States: []jobs.State{jobs.StatePending}})
	timed("kind k3, any state", hopper.ListParams{Kind: "k3"})
	timed("dead only (one table)", hopper.ListParams{States: []jobs.State{jobs.StateDead}})
	timed("completed, queue q2, 1000 at a time", hopper.ListParams{States: []jobs.State{jobs.StateCompleted}, Queue: "q2", Limit: 1000})
	byKey := timed("by unique key", hopper.ListParams{UniqueKey: "key-450000"})
	require.Len(t, byKey.Jobs, 1)
	require.Contains(t, explain(t, ctx, pool, last.sql, last.args), "unique_key_idx", "a key search reads the unique_key indexes")
	timed("created in the last hour", hopper.ListParams{CreatedFrom: time.Now().Add(-time.Hour)})
	rare := timed("kind rare: 10 jobs, the oldest (walks all)", hopper.ListParams{Kind: "rare"})
	require.Len(t, rare.Jobs, 10, "a filter that matches few rows reads its way down to them")
}

// walk pages n times from p and returns the cursor it ends on.
func walk(t *testing.T, ctx context.Context, client *hopper.Client, p hopper.ListParams, n int) string {
	t.Helper()
	for range n {
		page, err := client.ListJobs(ctx, p)
		require.NoError(t, err)
		p.After = page.Next
	}
	return p.After
}

// explain runs a statement under EXPLAIN (ANALYZE, BUFFERS).
func explain(t *testing.T, ctx context.Context, pool *pgxpool.Pool, sql string, args []any) string {
	t.Helper()
	rows, err := pool.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "+sql, args...)
	require.NoError(t, err)
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		lines = append(lines, line)
	}
	require.NoError(t, rows.Err())
	return strings.Join(lines, "\n")
}

// captured keeps the last statement a pool ran (a pgx QueryTracer).
type captured struct {
	sql  string
	args []any
}

func (c *captured) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "hopper_all_jobs") {
		c.sql, c.args = data.SQL, data.Args
	}
	return ctx
}

func (c *captured) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
