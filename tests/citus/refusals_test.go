package citus

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/citusbed"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/schema"
)

// TestCitusRefusals runs, on a distributed schema through the
// coordinator, each statement Citus 13.2.2 refused until the queries and
// migration 35 were written for it (docs/scaling-out.md, What Citus
// refused), and checks its effect: keeping a completed job in the
// history, the schedules' statements, a rate-limited claim and its log,
// the sweep, the hand-back of a gone worker's jobs, the retry of dead
// jobs and of a workflow, and the cancel. Those that move a job between
// tables with several parts (Citus runs each as a statement of its own)
// are checked for their order: a workflow step's edge to its parent stays
// when the step is kept or dies, as the delete's trigger finds it in the
// history or the dead jobs. A dead job's partition_at names the dead-job
// partition of its time, whichever statement buried it. Each statement
// runs more than five times where its plan could become generic.
func TestCitusRefusals(t *testing.T) {
	testdb.Slow(t, "starts a Citus formation: a coordinator and two worker nodes")
	f := citusbed.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const name = "hopper_refusals"
	pool := distributedSchema(t, ctx, f, name)
	require.NoError(t, schema.Up(ctx, pool))
	q := db.New(pool)
	_, err := pool.Exec(ctx, "SELECT hopper_history_partitions_ensure('1 hour', '6 hours'), hopper_dead_partitions_ensure('1 hour', '6 hours')")
	require.NoError(t, err)
	r := &refusals{t: t, ctx: ctx, f: f, pool: pool, q: q}

	t.Run("AckBatchKeep keeps a completed job", r.ackBatchKeep)
	t.Run("schedules", r.schedules)
	t.Run("a rate-limited claim", r.rateLimited)
	t.Run("the sweep buries before it deletes", r.sweep)
	t.Run("a gone worker's jobs handed back", r.release)
	t.Run("NackBatch buries with a partition", r.nack)
	t.Run("RetryDead and RetryWorkflow", r.retry)
	t.Run("Cancel", r.cancel)
	t.Run("upserts that set a time", r.upserts)
}

type refusals struct {
	t    *testing.T
	ctx  context.Context
	f    *citusbed.Formation
	pool *pgxpool.Pool
	q    *db.Queries
}

// running inserts a running job on its attempt of max attempts, its lease
// ending at lease (from now), with meta, and returns its id.
func (r *refusals) running(t *testing.T, attempt, maxAttempts int, lease time.Duration, meta string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, r.pool.QueryRow(r.ctx, `
		INSERT INTO hopper_jobs (queue, kind, payload, state, attempt, max_attempts, lease_owner, lease_until, meta)
		VALUES ('default', 'k', '{}', 'running', $1, $2, 'w', now() + $3 * interval '1 millisecond', $4::jsonb)
		RETURNING id`, attempt, maxAttempts, lease.Milliseconds(), nullJSON(meta)).Scan(&id))
	return id
}

// step is a workflow step's meta; edge gives it a parent (a job that
// never existed: only the edge is looked at).
func step(n int) string {
	b, _ := json.Marshal(map[string]string{"hopper.workflow": "wf", "hopper.step": "s" + string(rune('a'+n%26))})
	return string(b)
}

func (r *refusals) edge(t *testing.T, child int64) {
	t.Helper()
	_, err := r.pool.Exec(r.ctx, "INSERT INTO hopper_workflow_deps (parent_id, child_id) VALUES ($1, $2)", child+1_000_000, child)
	require.NoError(t, err)
}

func (r *refusals) edges(t *testing.T, child int64) int {
	t.Helper()
	var n int
	require.NoError(t, r.pool.QueryRow(r.ctx, "SELECT count(*) FROM hopper_workflow_deps WHERE child_id = $1", child).Scan(&n))
	return n
}

func (r *refusals) live(t *testing.T, id int64) bool {
	t.Helper()
	var n int
	require.NoError(t, r.pool.QueryRow(r.ctx, "SELECT count(*) FROM hopper_jobs WHERE id = $1", id).Scan(&n))
	return n == 1
}

// dead is the dead job's state and whether its partition_at is set and
// in a partition of its own (not the default one).
func (r *refusals) dead(t *testing.T, id int64) (state string, partitioned bool) {
	t.Helper()
	require.NoError(t, r.pool.QueryRow(r.ctx, `
		SELECT d.state, d.partition_at IS NOT NULL AND d.tableoid <> 'hopper_dead_jobs_default'::regclass
		FROM hopper_dead_jobs AS d WHERE d.id = $1`, id).Scan(&state, &partitioned))
	return state, partitioned
}

func nullJSON(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (r *refusals) ackBatchKeep(t *testing.T) {
	for i := range 8 {
		kept := r.running(t, 1, 3, time.Hour, step(i))
		r.edge(t, kept)
		plain := r.running(t, 1, 3, time.Hour, "")
		acked, err := r.q.AckBatchKeep(r.ctx, db.AckBatchKeepParams{
			Ids: []int64{kept, plain}, Attempts: []int32{1, 1},
			KeepMs: []int64{(2 * time.Hour).Milliseconds(), 0}, Results: []json.RawMessage{json.RawMessage(`{"n": 1}`), nil}})
		require.NoError(t, err, "round %d", i)
		require.Len(t, acked, 2, "round %d: both acknowledged", i)
		require.False(t, r.live(t, kept))
		require.False(t, r.live(t, plain))
		var result string
		var dropAfter *time.Time
		require.NoError(t, r.pool.QueryRow(r.ctx, "SELECT result::text, drop_after FROM hopper_job_history WHERE id = $1", kept).Scan(&result, &dropAfter))
		require.JSONEq(t, `{"n": 1}`, result)
		require.NotNil(t, dropAfter, "round %d: kept in a partition of its own", i)
		var n int
		require.NoError(t, r.pool.QueryRow(r.ctx, "SELECT count(*) FROM hopper_job_history WHERE id = $1", plain).Scan(&n))
		require.Zero(t, n, "a keep of 0 keeps nothing")
		require.Equal(t, 1, r.edges(t, kept), "round %d: a kept step keeps its edge: the history had it when the delete's trigger fired", i)
	}
}

func (r *refusals) schedules(t *testing.T) {
	see := func(hash string) {
		t.Helper()
		require.NoError(t, r.q.SeeScheduleVersions(r.ctx, db.SeeScheduleVersionsParams{Names: []string{"s"}, Hashes: []string{hash}, StaleAfterMs: time.Hour.Milliseconds()}))
	}
	define := func(hash, expr string) db.DefineScheduleRow {
		t.Helper()
		row, err := r.q.DefineSchedule(r.ctx, db.DefineScheduleParams{Name: "s", DefinitionHash: hash, Kind: "k", Expression: expr,
			TimeZone: "UTC", Policy: "once", Queue: "default", NextFireAt: time.Now().Add(time.Duration(len(expr)) * time.Minute)})
		require.NoError(t, err)
		return row
	}
	for range 6 {
		see("v1")
	}
	var seen int
	require.NoError(t, r.pool.QueryRow(r.ctx, "SELECT count(*) FROM hopper_schedule_versions WHERE last_seen_at > first_seen_at").Scan(&seen))
	require.Equal(t, 1, seen, "reported again: last seen moved on")
	row := define("v1", "@every 1m")
	require.True(t, row.InForce, "a new schedule")
	require.Equal(t, "v1", row.DefinitionHash)
	for range 6 {
		row = define("v1", "@every 1m")
		require.True(t, row.InForce)
	}
	see("v2")
	row = define("v2", "@every 2m")
	require.True(t, row.InForce, "a newer definition takes over")
	require.Equal(t, "k", row.ReplacedLiveKind, "it replaced one a running worker reports")
	require.Equal(t, "@every 2m", row.Expression)
	row = define("v1", "@every 1m")
	require.False(t, row.InForce, "an older one does not take it back")
	require.Equal(t, "v2", row.DefinitionHash)

	list, err := r.q.ListSchedules(r.ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	next := list[0].NextFireAt
	for i := range 6 {
		following := next.Add(time.Minute)
		n, err := r.q.AdvanceSchedule(r.ctx, db.AdvanceScheduleParams{Name: "s", Following: following, Fired: i%2 == 0, ExpectedNext: next})
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		next = following
	}
	list, err = r.q.ListSchedules(r.ctx)
	require.NoError(t, err)
	require.NotNil(t, list[0].LastFireAt, "fired: last_fire_at set")

	paused, err := r.q.PauseSchedule(r.ctx, "s")
	require.NoError(t, err)
	require.False(t, paused.WasPaused)
	at, err := r.q.TriggerSchedule(r.ctx, "s")
	require.NoError(t, err)
	again, err := r.q.TriggerSchedule(r.ctx, "s")
	require.NoError(t, err)
	require.True(t, again.Equal(at), "a waiting trigger is kept")
	resumed, err := r.q.ResumeSchedule(r.ctx, db.ResumeScheduleParams{Name: "s", NextFireAt: next})
	require.NoError(t, err)
	require.True(t, resumed.WasPaused)
	require.NotNil(t, resumed.PausedAt)
	require.True(t, resumed.PausedAt.Equal(paused.PausedAt), "the pause's answer is the time it wrote")
}

func (r *refusals) rateLimited(t *testing.T) {
	for range 12 {
		_, err := r.q.Enqueue(r.ctx, db.EnqueueParams{Queue: "rated", Kind: "k", Version: 1, Payload: json.RawMessage(`{}`), MaxAttempts: 3})
		require.NoError(t, err)
	}
	claim := func() []db.DequeueLimitedRow {
		t.Helper()
		rows, err := r.q.DequeueLimited(r.ctx, db.DequeueLimitedParams{Owner: "w", LeaseMs: 60_000, Queue: "rated",
			Kinds: []string{"k"}, MaxVersions: []int32{1}, KeyLimits: []int32{0}, AfterPriority: -1, MaxJobs: 10, Scan: 64,
			RateBy: "queue", RateLimit: 2, RateWindowMs: 60_000, ExactStarts: true})
		require.NoError(t, err)
		return rows
	}
	rows := claim()
	require.Len(t, rows, 2, "the rate limit's budget")
	var claimedAt time.Time
	require.NoError(t, r.pool.QueryRow(r.ctx, "SELECT claimed_at FROM hopper_rate_claims WHERE queue = 'rated' AND awaiting_starts").Scan(&claimedAt))
	require.NoError(t, r.q.RateClaimStarted(r.ctx, db.RateClaimStartedParams{Queue: "rated", ClaimedAt: claimedAt}))
	var awaiting bool
	var movedTo time.Time
	require.NoError(t, r.pool.QueryRow(r.ctx, "SELECT awaiting_starts, claimed_at FROM hopper_rate_claims WHERE queue = 'rated'").Scan(&awaiting, &movedTo))
	require.False(t, awaiting, "moved to the handlers' start")
	require.False(t, movedTo.Before(claimedAt))
	for range 5 {
		require.Empty(t, claim(), "the window's budget is spent")
	}
	// The log's old rows are pruned by the claim that finds them past
	// their window.
	_, err := r.pool.Exec(r.ctx, "UPDATE hopper_rate_claims SET claimed_at = '2000-01-01' WHERE queue = 'rated'")
	require.NoError(t, err)
	require.Len(t, claim(), 2, "a new window")
	var logged int
	require.NoError(t, r.pool.QueryRow(r.ctx, "SELECT count(*) FROM hopper_rate_claims WHERE queue = 'rated'").Scan(&logged))
	require.Equal(t, 1, logged, "the old row pruned, the new one logged")
}

func (r *refusals) sweep(t *testing.T) {
	for i := range 7 {
		last := r.running(t, 1, 1, -time.Minute, step(i))
		r.edge(t, last)
		more := r.running(t, 1, 3, -time.Minute, "")
		swept, err := r.q.Sweep(r.ctx, db.SweepParams{MaxJobs: 100})
		require.NoError(t, err, "round %d", i)
		require.Len(t, swept, 2, "round %d", i)
		state, partitioned := r.dead(t, last)
		require.Equal(t, "dead", state)
		require.True(t, partitioned, "round %d: a dead job in its time's partition", i)
		require.False(t, r.live(t, last))
		require.True(t, r.live(t, more), "a job with attempts left goes back")
		require.Equal(t, 1, r.edges(t, last), "round %d: a dead step keeps its edge: it was dead when the delete's trigger fired", i)
		_, err = r.pool.Exec(r.ctx, "DELETE FROM hopper_jobs WHERE id = $1", more)
		require.NoError(t, err)
	}
}

func (r *refusals) release(t *testing.T) {
	for i := range 6 {
		worker := "gone-" + string(rune('a'+i))
		_, err := r.q.RegisterWorker(r.ctx, db.RegisterWorkerParams{ID: worker, Host: "h", Pid: 1, HopperVersion: "test",
			Queues: []string{"default"}, StaleAfterMs: 1})
		require.NoError(t, err)
		last := r.running(t, 1, 1, time.Hour, step(i))
		r.edge(t, last)
		_, err = r.pool.Exec(r.ctx, "UPDATE hopper_jobs SET lease_owner = $1 WHERE id = $2", worker, last)
		require.NoError(t, err)
		_, err = r.pool.Exec(r.ctx, "UPDATE hopper_workers SET last_seen_at = now() - interval '1 hour' WHERE id = $1", worker)
		require.NoError(t, err)
		released, err := r.q.ReleaseWorkerJobs(r.ctx, db.ReleaseWorkerJobsParams{WorkerID: &worker, Reason: "worker gone", MaxJobs: 100})
		require.NoError(t, err, "round %d", i)
		require.Len(t, released, 1)
		require.True(t, released[0].Dead)
		state, partitioned := r.dead(t, last)
		require.Equal(t, "dead", state)
		require.True(t, partitioned, "round %d", i)
		require.Equal(t, 1, r.edges(t, last), "round %d: a dead step keeps its edge", i)
	}
}

func (r *refusals) nack(t *testing.T) {
	for i := range 7 {
		last := r.running(t, 1, 1, time.Hour, step(i))
		r.edge(t, last)
		nacked, err := r.q.NackBatch(r.ctx, db.NackBatchParams{Ids: []int64{last}, Attempts: []int32{1}, Actions: []string{"retry"},
			Messages: []string{"boom"}, BackoffsMs: []int64{0}, Reasons: []string{""}})
		require.NoError(t, err, "round %d", i)
		require.Len(t, nacked, 1)
		require.True(t, nacked[0].Dead)
		state, partitioned := r.dead(t, last)
		require.Equal(t, "dead", state)
		require.True(t, partitioned, "round %d: a dead job in its time's partition", i)
		require.Equal(t, 1, r.edges(t, last))
	}
}

func (r *refusals) retry(t *testing.T) {
	// RetryDead brings back a plain dead job; its insert notifies, so it
	// runs where the shard's node commits alone (through the coordinator a
	// statement with several parts commits in two phases, which a NOTIFY
	// refuses: docs/scaling-out.md).
	node := r.nodePool(t)
	qn := db.New(node)
	for i := range 6 {
		id := r.running(t, 1, 1, time.Hour, "")
		_, err := r.q.NackBatch(r.ctx, db.NackBatchParams{Ids: []int64{id}, Attempts: []int32{1}, Actions: []string{"retry"},
			Messages: []string{"boom"}, BackoffsMs: []int64{0}, Reasons: []string{""}})
		require.NoError(t, err)
		retried, err := qn.RetryDead(r.ctx, db.RetryDeadParams{States: []string{"dead"}, Ids: []int64{id}, MaxJobs: 100})
		require.NoError(t, err, "round %d", i)
		require.Equal(t, []db.RetryDeadRow{{ID: id, Retried: true}}, retried)
		require.True(t, r.live(t, id))
		var n int
		require.NoError(t, r.pool.QueryRow(r.ctx, "SELECT count(*) FROM hopper_dead_jobs WHERE id = $1", id).Scan(&n))
		require.Zero(t, n)
	}

	// RetryWorkflow: a dead step with a parent comes back waiting, its
	// edge kept; a root comes back pending.
	var child, root int64
	require.NoError(t, r.pool.QueryRow(r.ctx, `
		INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt, max_attempts, errors, reason, created_at, meta)
		VALUES (nextval(pg_get_serial_sequence('hopper_jobs', 'id')), 'default', 'k', 1, '{}', 0, 1, 1, '[]', 'boom', now(),
		        '{"hopper.workflow": "retried", "hopper.step": "child"}')
		RETURNING id`).Scan(&child))
	require.NoError(t, r.pool.QueryRow(r.ctx, `
		INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt, max_attempts, errors, reason, created_at, meta)
		VALUES (nextval(pg_get_serial_sequence('hopper_jobs', 'id')), 'default', 'k', 1, '{}', 0, 1, 1, '[]', 'boom', now(),
		        '{"hopper.workflow": "retried", "hopper.step": "root"}')
		RETURNING id`).Scan(&root))
	_, err := r.pool.Exec(r.ctx, "INSERT INTO hopper_workflow_deps (parent_id, child_id) VALUES ($1, $2)", root, child)
	require.NoError(t, err)
	ids, err := qn.RetryWorkflow(r.ctx, "retried")
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{child, root}, ids)
	var childState, rootState string
	require.NoError(t, r.pool.QueryRow(r.ctx, "SELECT state FROM hopper_jobs WHERE id = $1", child).Scan(&childState))
	require.NoError(t, r.pool.QueryRow(r.ctx, "SELECT state FROM hopper_jobs WHERE id = $1", root).Scan(&rootState))
	require.Equal(t, "waiting", childState, "a step whose parent runs again waits for it")
	require.Equal(t, "pending", rootState)
	require.Equal(t, 1, r.edges(t, child))
}

func (r *refusals) cancel(t *testing.T) {
	node := r.nodePool(t)
	qn := db.New(node)
	for i := range 6 {
		id := r.running(t, 1, 3, time.Hour, step(i))
		r.edge(t, id)
		// Cancel notifies the running job's worker: through the shard's
		// node (see retry).
		cancelled, err := qn.Cancel(r.ctx, []int64{id, id + 1_000_000})
		require.NoError(t, err, "round %d", i)
		require.Equal(t, []db.CancelRow{{ID: id, State: "running", Cancelled: true}, {ID: id + 1_000_000, State: "", Cancelled: false}}, cancelled)
		state, partitioned := r.dead(t, id)
		require.Equal(t, "cancelled", state)
		require.True(t, partitioned, "round %d", i)
		require.Equal(t, 1, r.edges(t, id), "round %d: a cancelled step keeps its edge", i)
	}
}

// nodePool is a pool on the worker node that holds the schema, its
// search_path the schema.
func (r *refusals) nodePool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	const name = "hopper_refusals"
	cfg, err := pgxpool.ParseConfig(nodeURL(r.f, schemaNode(t, r.ctx, r.pool, name)))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	pool, err := pgxpool.NewWithConfig(r.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// upserts runs, each twice and more (its second run updates the row
// the first wrote), the upserts whose DO UPDATE SET wrote now(), which
// Citus refuses ("functions used in the DO UPDATE SET clause … must be
// marked IMMUTABLE"): they write excluded's time now.
func (r *refusals) upserts(t *testing.T) {
	for i := range 7 {
		paused, err := r.q.PauseQueue(r.ctx, "upserted")
		require.NoError(t, err)
		require.Equal(t, i > 0, paused.WasPaused)

		require.NoError(t, r.q.SetKeyLimit(r.ctx, db.SetKeyLimitParams{Queue: "upserted", Key: "k", MaxRunning: int32(i + 1)}))
		var limit int32
		require.NoError(t, r.pool.QueryRow(r.ctx, "SELECT max_running FROM hopper_key_limits WHERE queue = 'upserted' AND key = 'k'").Scan(&limit))
		require.Equal(t, int32(i+1), limit)

		require.NoError(t, r.q.RecordSharedLimits(r.ctx, db.RecordSharedLimitsParams{Kinds: []string{"upserted"}, Names: []string{"shared"}, MaxRunning: []int32{int32(i + 1)}}))
		require.NoError(t, r.pool.QueryRow(r.ctx, "SELECT max_running FROM hopper_shared_limits WHERE kind = 'upserted'").Scan(&limit))
		require.Equal(t, int32(i+1), limit)
	}
	id := r.running(t, 1, 3, time.Minute, "")
	for i := range 7 {
		held, err := r.q.SetProgress(r.ctx, db.SetProgressParams{JobID: id, Attempt: 1, Progress: json.RawMessage(fmt.Sprintf(`{"n": %d}`, i))})
		require.NoError(t, err)
		require.True(t, held)
	}
	var n int
	require.NoError(t, r.pool.QueryRow(r.ctx, "SELECT (progress ->> 'n')::integer FROM hopper_job_progress WHERE job_id = $1", id).Scan(&n))
	require.Equal(t, 6, n, "the last progress written")
}
