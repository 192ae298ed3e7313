package queries_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// TestHotPlansHoldWhateverTheStatistics runs every hot statement — the
// claims (Dequeue, DequeueLimited), the acks and nacks (AckBatch,
// AckBatchKeep, NackBatch), the lease statements (Extend, Release,
// ReleaseWorkerJobs, ClaimFates), Sweep and Promote — through EXPLAIN (ANALYZE,
// BUFFERS) on a table whose statistics were gathered when it looked quite
// unlike the rows the statement meets: ANALYZE saw every job pending (the
// normal state after a burst of enqueues), every job running, every job
// scheduled far ahead, an empty table, or a larger mixed table. Each runs
// with the batch a worker sends (1,000 claims, one in ten of them stale),
// once as a custom plan and then, on the same table (the first run is
// rolled back), as the generic plan a prepared statement may switch to
// after five runs (plan_cache_mode = force_generic_plan). Every one must
// do work in proportion to its batch, not to the table: it may examine a
// few rows per claim and touch a bounded number of shared buffers per
// claim. The log has each run's figures and plan (go test -v).
//
// Why two measures. At a test's size (20,000 jobs, a few hundred pages) a
// full scan of the table costs fewer buffers than 1,000 primary-key
// lookups, so buffers alone cannot tell the bad plan from the good one
// here; the rows the plan examines can (the index entries and rows each
// scan of hopper_jobs read, and those a join filter threw away). On a
// production table both grow with it. Before the fix, AckBatch after an
// ANALYZE of an all-pending table read the whole table for every batch:
// it hashed it (20,900 rows examined for 1,000 acks here), or, as the
// costs tipped, compared every running job with every claim (1,020,000
// rows), 1 to 2 s per call while draining 50,000 jobs on a server with
// production defaults (docs/benchmarks.md).
func TestHotPlansHoldWhateverTheStatistics(t *testing.T) {
	testdb.Slow(t, "every hot statement planned, custom and generic, on five filled tables")
	for _, st := range planStates {
		t.Run(st.name, func(t *testing.T) {
			b := setup(t)
			for _, pc := range planCases {
				t.Run(pc.name, func(t *testing.T) {
					if pc.skip != "" {
						t.Skip(pc.skip)
					}
					claims := b.preparePlan(t, st, pc)
					for _, generic := range []bool{false, true} {
						mode := "custom"
						if generic {
							mode = "generic"
						}
						t.Run(mode, func(t *testing.T) {
							w := b.explainWork(t, pc, claims, generic)
							t.Logf("%s %s %s: %d buffers (%.1f per claim), %d rows examined, %d rows answered; plan: %s",
								st.name, pc.name, mode, w.buffers, float64(w.buffers)/planBatch, w.examined, w.answered, w.plan)
							require.Positive(t, w.answered, "%s answered nothing: the test's rows are not what it means them to be", pc.name)
							maxExamined := int64(planExamined*planBatch + 200)
							if pc.perRunning {
								maxExamined += w.running
							}
							require.LessOrEqual(t, w.examined, maxExamined,
								"%s (%s plan, statistics: %s) examined %d rows for a batch of %d: it must examine rows in proportion to its batch, not to the table (%d jobs). Plan: %s",
								pc.name, mode, st.name, w.examined, planBatch, st.jobs, w.plan)
							require.LessOrEqual(t, w.buffers, int64(planBuffers*planBatch+500),
								"%s (%s plan, statistics: %s) touched %d buffers for a batch of %d (at most %d per claim). Plan: %s",
								pc.name, mode, st.name, w.buffers, planBatch, planBuffers, w.plan)
						})
					}
				})
			}
		})
	}
}

// What a statement may cost per claim of its batch: rows examined (index
// entries and rows read, a row's older versions included) and shared
// buffers. The plans the statements are written for examine 2 to 5 rows
// and touch 10 to 22 buffers per claim; one that reads the table examines
// at least 20 (the table has 20,000 jobs or more, the batch 1,000).
const (
	planExamined = 6
	planBuffers  = 30
)

// planBatch is the batch each statement gets: a worker's ack, nack or
// claim of 1,000 jobs (the heartbeat sends up to 5,000, the sweep 500).
const planBatch = 1000

// planState is the table a statement meets: jobs rows in the state the
// statistics describe (ANALYZE runs after load); then, for some, after
// ANALYZE, more rows the statistics never saw.
type planState struct {
	name string
	jobs int
	// load fills the table before ANALYZE; after fills it after.
	load, after string
}

// jobsOf is an INSERT of n jobs of queue "default", kind "k", all in
// state (pending, running or scheduled) or mixed.
func jobsOf(n int, state string) string {
	const cols = `INSERT INTO hopper_jobs (queue, kind, payload, state, attempt, max_attempts, run_at, lease_owner, lease_until)
		SELECT 'default', 'k', jsonb_build_object('n', g, 'pad', repeat('x', 64)), `
	var row string
	switch state {
	case "pending":
		row = `'pending', 0, 25, now() - interval '1 minute', NULL, NULL`
	case "running":
		row = `'running', 1, 25, now() - interval '1 minute', 'other-worker', now() + interval '1 hour'`
	case "scheduled":
		row = `'scheduled', 0, 25, now() + interval '1 day', NULL, NULL`
	case "mixed": // half pending, 40% running, 10% scheduled
		row = `CASE WHEN g % 10 < 5 THEN 'pending' WHEN g % 10 < 9 THEN 'running' ELSE 'scheduled' END,
		       CASE WHEN g % 10 BETWEEN 5 AND 8 THEN 1 ELSE 0 END, 25,
		       CASE WHEN g % 10 = 9 THEN now() + interval '1 day' ELSE now() - interval '1 minute' END,
		       CASE WHEN g % 10 BETWEEN 5 AND 8 THEN 'other-worker' END,
		       CASE WHEN g % 10 BETWEEN 5 AND 8 THEN now() + interval '1 hour' END`
	default:
		panic(state)
	}
	return cols + row + fmt.Sprintf(" FROM generate_series(1, %d) AS g", n)
}

var planStates = []planState{
	// A burst of enqueues, analyzed: the planner expects no running job,
	// no lease, no scheduled job.
	{name: "all-pending", jobs: 20_000, load: jobsOf(20_000, "pending")},
	// Analyzed while every job was claimed: it expects no ready job.
	{name: "all-running", jobs: 20_000, load: jobsOf(20_000, "running")},
	// A backlog of jobs due tomorrow.
	{name: "all-scheduled", jobs: 20_000, load: jobsOf(20_000, "scheduled")},
	// Analyzed empty (a new queue), then a burst the statistics never saw.
	{name: "empty", jobs: 20_000, after: jobsOf(20_000, "pending")},
	// A larger table, every state, statistics up to date.
	{name: "larger-mixed", jobs: 50_000, load: jobsOf(50_000, "mixed")},
}

func (b *bundle) loadPlanState(t *testing.T, st planState) {
	t.Helper()
	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.Ctx) }()
	for _, stmt := range []string{
		// Quicker loads: nothing here needs to survive a crash, and no
		// one listens for these jobs.
		"SET LOCAL synchronous_commit = off",
		"ALTER TABLE hopper_jobs DISABLE TRIGGER hopper_jobs_notify_enqueued",
		// No autovacuum may refresh the statistics the test chose (the
		// shared test server runs without it, a throwaway cluster with it).
		"ALTER TABLE hopper_jobs SET (autovacuum_enabled = off)",
		"TRUNCATE hopper_jobs, hopper_dead_jobs, hopper_job_history RESTART IDENTITY",
		st.load,
		"ANALYZE hopper_jobs, hopper_dead_jobs, hopper_job_history",
		st.after,
	} {
		if stmt == "" {
			continue
		}
		_, err := tx.Exec(b.Ctx, stmt)
		require.NoError(t, err, stmt)
	}
	require.NoError(t, tx.Commit(b.Ctx))
}

// planCase is one hot statement: how its rows are made ready (prep, run
// after ANALYZE over the jobs $1..$2, returning their id and attempt), and
// how it is called.
type planCase struct {
	name string
	prep string
	call func(q *db.Queries, ctx context.Context, ids []int64, attempts []int32) error
	// perRunning: the statement may read every running job besides
	// (ReleaseWorkerJobs: no index finds an owner's jobs).
	perRunning bool
	// skip says why the case does not run.
	skip string
}

// The jobs a statement is given, made (and committed) after ANALYZE.
const (
	prepHeld = `UPDATE hopper_jobs SET state = 'running', attempt = attempt + 1, lease_owner = 'plan-owner',
		lease_until = now() + interval '5 minutes' WHERE id BETWEEN $1 AND $2 RETURNING id, attempt`
	// prepHeldGone: held as in prepHeld by a worker whose row in
	// hopper_workers has gone stale.
	prepHeldGone = `WITH gone AS (
			INSERT INTO hopper_workers (id, host, pid, queues, stale_after_ms, last_seen_at)
			VALUES ('plan-owner', 'plan-host', 1, '{default}', 1000, now() - interval '1 minute')
			ON CONFLICT (id) DO UPDATE SET last_seen_at = excluded.last_seen_at, released_at = NULL)
		UPDATE hopper_jobs SET state = 'running', attempt = attempt + 1, lease_owner = 'plan-owner',
		lease_until = now() + interval '5 minutes' WHERE id BETWEEN $1 AND $2 RETURNING id, attempt`
	prepExpired = `UPDATE hopper_jobs SET state = 'running', attempt = attempt + 1, lease_owner = 'plan-owner',
		lease_until = now() - interval '1 second' WHERE id BETWEEN $1 AND $2 RETURNING id, attempt`
	prepDue = `UPDATE hopper_jobs SET state = 'scheduled', run_at = now() - interval '1 second', lease_owner = NULL,
		lease_until = NULL WHERE id BETWEEN $1 AND $2 RETURNING id, attempt`
	prepReady = `UPDATE hopper_jobs SET state = 'pending', run_at = now() - interval '1 second', lease_owner = NULL,
		lease_until = NULL WHERE id BETWEEN $1 AND $2 RETURNING id, attempt`
)

var planCases = []planCase{
	{name: "Dequeue", prep: prepReady,
		call: func(q *db.Queries, ctx context.Context, _ []int64, _ []int32) error {
			_, err := q.Dequeue(ctx, db.DequeueParams{
				Queue: "default", Kinds: []string{"k"}, MaxVersions: []int32{1}, MaxJobs: planBatch,
				Owner: "plan-owner", LeaseMs: 30_000, AfterPriority: -1,
			})
			return err
		}},
	{name: "DequeueQueues", prep: prepReady,
		call: func(q *db.Queries, ctx context.Context, _ []int64, _ []int32) error {
			// The jobs' queue, and two queues that hold none: each costs
			// a descent of the ready index, not a scan.
			_, err := q.DequeueQueues(ctx, db.DequeueQueuesParams{
				Queues: []string{"default", "empty-1", "empty-2"}, MaxJobs: []int32{planBatch, 10, 10},
				AfterPriorities: []int16{-1, -1, -1}, AfterRunAts: make([]time.Time, 3), AfterIds: make([]int64, 3),
				Kinds: []string{"k"}, MaxVersions: []int32{1}, Owner: "plan-owner", LeaseMs: 30_000,
			})
			return err
		}},
	{name: "DequeueLimited", prep: prepReady,
		call: func(q *db.Queries, ctx context.Context, _ []int64, _ []int32) error {
			_, err := q.DequeueLimited(ctx, db.DequeueLimitedParams{
				Queue: "default", Kinds: []string{"k"}, MaxVersions: []int32{1}, KeyLimits: []int32{0},
				KeyLimit: 5, MaxJobs: planBatch, Scan: planBatch + planBatch/4, RateBy: "queue", RateWindowMs: 1000,
				Owner: "plan-owner", LeaseMs: 30_000, AfterPriority: -1,
			})
			return err
		}},
	{name: "Promote", prep: prepDue,
		call: func(q *db.Queries, ctx context.Context, _ []int64, _ []int32) error {
			_, err := q.Promote(ctx, db.PromoteParams{MaxJobs: planBatch})
			return err
		}},
	{name: "AckBatch", prep: prepHeld,
		call: func(q *db.Queries, ctx context.Context, ids []int64, attempts []int32) error {
			_, err := q.AckBatch(ctx, db.AckBatchParams{Ids: ids, Attempts: attempts})
			return err
		}},
	{name: "AckBatchKeep", prep: prepHeld,
		call: func(q *db.Queries, ctx context.Context, ids []int64, attempts []int32) error {
			_, err := q.AckBatchKeep(ctx, db.AckBatchKeepParams{Ids: ids, Attempts: attempts,
				KeepMs: repeat(int64(60_000), len(ids)), Results: make([]json.RawMessage, len(ids))})
			return err
		}},
	{name: "NackBatch", prep: prepHeld,
		call: func(q *db.Queries, ctx context.Context, ids []int64, attempts []int32) error {
			n := len(ids)
			actions := repeat("retry", n)
			for i := 0; i < n; i += 4 {
				actions[i] = "dead" // a quarter die, the rest wait to retry
			}
			_, err := q.NackBatch(ctx, db.NackBatchParams{Ids: ids, Attempts: attempts, Actions: actions,
				Messages: repeat("boom", n), BackoffsMs: repeat(int64(1000), n), Reasons: repeat("bad input", n)})
			return err
		}},
	{name: "Extend", prep: prepHeld,
		call: func(q *db.Queries, ctx context.Context, ids []int64, attempts []int32) error {
			_, err := q.Extend(ctx, db.ExtendParams{Ids: ids, Attempts: attempts, LeaseMs: 60_000})
			return err
		}},
	{name: "Release", prep: prepHeld,
		call: func(q *db.Queries, ctx context.Context, ids []int64, attempts []int32) error {
			_, err := q.Release(ctx, db.ReleaseParams{Ids: ids, Attempts: attempts})
			return err
		}},
	{name: "ReleaseWorkerJobs", prep: prepHeldGone, perRunning: true,
		call: func(q *db.Queries, ctx context.Context, _ []int64, _ []int32) error {
			_, err := q.ReleaseWorkerJobs(ctx, db.ReleaseWorkerJobsParams{Force: false, Reason: "worker gone", MaxJobs: planBatch})
			return err
		}},
	{name: "ClaimFates", prep: prepHeld,
		call: func(q *db.Queries, ctx context.Context, ids []int64, attempts []int32) error {
			_, err := q.ClaimFates(ctx, db.ClaimFatesParams{Ids: ids, Attempts: attempts})
			return err
		}},
	{name: "Sweep", prep: prepExpired,
		call: func(q *db.Queries, ctx context.Context, _ []int64, _ []int32) error {
			_, err := q.Sweep(ctx, db.SweepParams{MaxJobs: planBatch})
			return err
		}},
}

// planWork is what one run of a statement cost.
type planWork struct {
	// buffers: shared buffers hit and read while executing (not planning).
	buffers int64
	// examined: rows returned or filtered out by the scans of hopper_jobs,
	// entries its bitmap index scans found, and rows a join filter threw
	// away.
	examined int64
	// answered: rows of the statement's answer.
	answered int64
	// running: jobs running when it ran (ReleaseOwner's bound).
	running int64
	plan    string
}

// planClaims are the claims a statement is given: ids[i], attempts[i].
type planClaims struct {
	ids      []int64
	attempts []int32
}

// preparePlan loads the table of st and makes the jobs pc needs (after
// ANALYZE, as workers would), and returns their claims.
func (b *bundle) preparePlan(t *testing.T, st planState, pc planCase) planClaims {
	t.Helper()
	b.loadPlanState(t, st)
	// planBatch jobs from the middle of the table.
	first := int64(st.jobs/2 + 1)
	rows, err := b.Pool.Query(b.Ctx, pc.prep, first, first+planBatch-1)
	require.NoError(t, err)
	type claim struct {
		id      int64
		attempt int32
	}
	claims, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (claim, error) {
		var c claim
		return c, r.Scan(&c.id, &c.attempt)
	})
	require.NoError(t, err)
	require.Len(t, claims, planBatch)
	slices.SortFunc(claims, func(a, b claim) int { return int(a.id - b.id) })
	var pcl planClaims
	for i, c := range claims {
		if i%10 == 9 {
			// A claim in ten is stale (its job was claimed again since),
			// as after a lost lease: the fence must refuse it.
			c.attempt--
		}
		pcl.ids = append(pcl.ids, c.id)
		pcl.attempts = append(pcl.attempts, c.attempt)
	}
	return pcl
}

// explainWork runs pc under EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) in a
// transaction that is rolled back. generic runs it as a prepared statement
// forced to its generic plan.
func (b *bundle) explainWork(t *testing.T, pc planCase, claims planClaims, generic bool) planWork {
	t.Helper()
	ctx := b.Ctx
	conn, err := b.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SET LOCAL jit = off")
	require.NoError(t, err)
	var w planWork
	require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM hopper_jobs WHERE state = 'running'").Scan(&w.running))

	// The statement's text and arguments, as the generated code sends them.
	var c capture
	require.ErrorIs(t, pc.call(db.New(&c), ctx, claims.ids, claims.attempts), errCaptured)

	const explain = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
	var out []byte
	if !generic {
		_, err = tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_custom_plan")
		require.NoError(t, err)
		require.NoError(t, tx.QueryRow(ctx, explain+c.sql, c.args...).Scan(&out))
	} else {
		const name = "hopper_plan_test"
		sd, err := tx.Conn().Prepare(ctx, name, c.sql)
		require.NoError(t, err)
		defer func() { _ = conn.Conn().Deallocate(context.Background(), name) }()
		lits := make([]string, len(c.args))
		for i, arg := range c.args {
			var typ string
			require.NoError(t, tx.QueryRow(ctx, "SELECT format_type($1, NULL)", sd.ParamOIDs[i]).Scan(&typ))
			var lit string
			require.NoError(t, tx.QueryRow(ctx, "SELECT quote_nullable(($1::"+typ+")::text)", arg).Scan(&lit))
			lits[i] = lit
		}
		_, err = tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan")
		require.NoError(t, err)
		require.NoError(t, tx.QueryRow(ctx, explain+"EXECUTE "+name+"("+strings.Join(lits, ", ")+")").Scan(&out))
	}
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(out, &plans))
	require.Len(t, plans, 1)
	root := plans[0].Plan
	w.buffers = root.blocks()
	// Data-modifying CTEs that nothing reads run after the main plan has
	// finished, outside its count: add theirs.
	read := map[string]bool{}
	root.walk(func(n *planNode) {
		if n.NodeType == "CTE Scan" {
			read[n.CTEName] = true
		}
	})
	for i := range root.Plans {
		sub := &root.Plans[i]
		if name, ok := strings.CutPrefix(sub.SubplanName, "CTE "); ok && !read[name] {
			w.buffers += sub.blocks()
		}
	}
	root.walk(func(n *planNode) {
		loops := max(n.ActualLoops, 1) // EXPLAIN gives rows per loop
		switch {
		case n.NodeType == "Bitmap Heap Scan" && n.RelationName == "hopper_jobs":
			// its rows were counted as its index's entries
			w.examined += int64((n.RemovedByFilter + n.RemovedByRecheck) * loops)
		case n.RelationName == "hopper_jobs" && strings.Contains(n.NodeType, "Scan"):
			w.examined += int64((n.ActualRows + n.RemovedByFilter + n.RemovedByRecheck) * loops)
		case n.NodeType == "Bitmap Index Scan" && strings.HasPrefix(n.IndexName, "hopper_jobs_"):
			w.examined += int64(n.ActualRows * loops) // entries, dead ones too
		}
		w.examined += int64(n.RemovedByJoin * loops)
	})
	w.answered = int64(root.ActualRows)
	w.plan = root.describe()
	return w
}

// planNode is a node of EXPLAIN's JSON plan.
type planNode struct {
	NodeType         string     `json:"Node Type"`
	RelationName     string     `json:"Relation Name"`
	IndexName        string     `json:"Index Name"`
	SubplanName      string     `json:"Subplan Name"`
	CTEName          string     `json:"CTE Name"`
	ActualRows       float64    `json:"Actual Rows"`
	ActualLoops      float64    `json:"Actual Loops"`
	RemovedByFilter  float64    `json:"Rows Removed by Filter"`
	RemovedByJoin    float64    `json:"Rows Removed by Join Filter"`
	RemovedByRecheck float64    `json:"Rows Removed by Index Recheck"`
	SharedHit        int64      `json:"Shared Hit Blocks"`
	SharedRead       int64      `json:"Shared Read Blocks"`
	Plans            []planNode `json:"Plans"`
}

func (n *planNode) blocks() int64 { return n.SharedHit + n.SharedRead }

func (n *planNode) walk(f func(*planNode)) {
	f(n)
	for i := range n.Plans {
		n.Plans[i].walk(f)
	}
}

// describe is the plan on one line: each node with its table or index
// and its rows x loops.
func (n *planNode) describe() string {
	var sb strings.Builder
	var rec func(n *planNode, depth int)
	rec = func(n *planNode, depth int) {
		if sb.Len() > 0 {
			sb.WriteString(" | ")
		}
		sb.WriteString(strings.Repeat(">", depth))
		if n.SubplanName != "" {
			sb.WriteString("[" + n.SubplanName + "] ")
		}
		sb.WriteString(n.NodeType)
		if n.RelationName != "" {
			sb.WriteString(" on " + n.RelationName)
		}
		if n.IndexName != "" {
			sb.WriteString(" using " + n.IndexName)
		}
		if n.CTEName != "" {
			sb.WriteString(" of " + n.CTEName)
		}
		fmt.Fprintf(&sb, " %gx%g", n.ActualRows, n.ActualLoops)
		if n.RemovedByFilter > 0 {
			fmt.Fprintf(&sb, " (-%g filter)", n.RemovedByFilter)
		}
		if n.RemovedByJoin > 0 {
			fmt.Fprintf(&sb, " (-%g join filter)", n.RemovedByJoin)
		}
		fmt.Fprintf(&sb, " %db", n.blocks())
		for i := range n.Plans {
			rec(&n.Plans[i], depth+1)
		}
	}
	rec(n, 0)
	return sb.String()
}

// capture is a db.DBTX that records the statement the generated code would
// send, and sends nothing.
type capture struct {
	sql  string
	args []any
}

var errCaptured = errors.New("statement captured, not run")

func (c *capture) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.sql, c.args = sql, args
	return pgconn.CommandTag{}, errCaptured
}

func (c *capture) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.sql, c.args = sql, args
	return nil, errCaptured
}

func (c *capture) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	c.sql, c.args = sql, args
	return capturedRow{}
}

func (c *capture) CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error) {
	return 0, errCaptured
}

type capturedRow struct{}

func (capturedRow) Scan(...any) error { return errCaptured }
