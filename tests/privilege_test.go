package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/tools/doccheck"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/worker"
)

// TestLeastPrivilege: a role with only the grants docs/operating.md lists (no DDL,
// no ownership) enqueues, works, retries, dead-letters, sweeps, promotes,
// keeps and prunes history, fires schedules, and operates: lists, cancels,
// pauses, triages.
func TestLeastPrivilege(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	app := leastPrivilegePool(t, d)

	_, err := app.Exec(ctx, "CREATE TABLE sneaky (id int)")
	require.ErrorContains(t, err, "permission denied", "the role has no DDL rights")

	chore := jobs.MustDefine[Chore]("chore")
	_, err = chore.EnqueueMany(ctx, app, jobs.Items(Chore{N: 1}, Chore{N: 2}, Chore{N: 3}))
	require.NoError(t, err, "COPY")
	_, err = chore.Enqueue(ctx, app, Chore{N: 4}, jobs.UniqueKey("four"), jobs.MaxAttempts(1))
	require.NoError(t, err)
	_, err = chore.Enqueue(ctx, app, Chore{N: 5}, jobs.Delay(200*time.Millisecond))
	require.NoError(t, err)
	_, err = chore.Enqueue(ctx, app, Chore{N: 7}, jobs.UniqueKey("seven"), jobs.UniquePeriod(time.Hour))
	require.NoError(t, err, "a period records its key in hopper_unique_periods")

	require.NoError(t, schema.Check(ctx, app), "the version is readable under the grants")
	require.NoError(t, schema.Up(ctx, app), "migrating a current schema needs no DDL: golang-migrate sees its table")

	var done, scheduled atomic.Int64
	w, err := worker.New(app, worker.Config{ID: "least-privilege", PollInterval: 50 * time.Millisecond, SweepInterval: 50 * time.Millisecond,
		RetryBackoff: worker.Backoff{Base: time.Millisecond, Max: time.Millisecond}, DeadRetention: time.Hour,
		KeepHistoryByQueue: map[string]time.Duration{jobs.DefaultQueue: time.Millisecond}})
	require.NoError(t, err)
	require.NoError(t, worker.Schedule(w, "chores", chore, "@every 1s", func(time.Time) Chore { return Chore{N: 6} }))
	require.NoError(t, worker.Handle(w, chore, func(_ context.Context, j *jobs.Job[Chore]) error {
		if j.Payload.N == 4 {
			return errors.New("always fails")
		}
		if j.Payload.N == 3 && j.Attempt == 1 {
			return errors.New("fails once")
		}
		if j.Payload.N == 6 {
			scheduled.Add(1)
			return nil
		}
		done.Add(1)
		return nil
	}))
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(runCtx) }()
	client := hopper.NewClient(app)
	// The condition runs on a goroutine of its own, so it reports through
	// CollectT rather than t.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		stats, err := client.GetStats(ctx)
		require.NoError(c, err)
		require.Len(c, stats.Rows, 1)
		require.Zero(c, stats.Total.Live(), "live jobs")
		require.EqualValues(c, 1, stats.Total.Dead)
		kept, err := client.ListJobs(ctx, hopper.ListParams{States: []jobs.State{jobs.StateCompleted}})
		require.NoError(c, err)
		require.Empty(c, kept.Jobs, "kept a millisecond, then pruned")
		require.Positive(c, scheduled.Load(), "the schedule fired")
		// The pruner's pass makes the partitions: awaited, as it may come
		// after the jobs are done.
		var parts int
		require.NoError(c, app.QueryRow(ctx, "SELECT count(*) FROM hopper_history_partitions").Scan(&parts))
		require.Positive(c, parts, "the worker created the history's partitions through the SECURITY DEFINER function")
		require.NoError(c, app.QueryRow(ctx, "SELECT count(*) FROM hopper_dead_partitions").Scan(&parts))
		require.Positive(c, parts, "and, for its DeadRetention, the dead jobs' partitions")
	}, testdb.WaitLimit, 20*time.Millisecond)
	queues, err := client.ListQueues(ctx)
	require.NoError(t, err)
	require.Len(t, queues, 1)
	require.Equal(t, 1, queues[0].Workers, "the worker registered itself")
	stop()
	require.NoError(t, <-errc)
	require.EqualValues(t, 5, done.Load())
	again, err := chore.Enqueue(ctx, app, Chore{N: 7}, jobs.UniqueKey("seven"), jobs.UniquePeriod(time.Hour))
	require.NoError(t, err)
	require.True(t, again.Duplicate, "completed, its history pruned: the period's record still holds the key")
	queues, err = client.ListQueues(ctx)
	require.NoError(t, err)
	require.Zero(t, queues[0].Workers, "the worker removed its row at its clean stop")

	dead, err := client.ListJobs(ctx, hopper.ListParams{States: []jobs.State{jobs.StateDead}})
	require.NoError(t, err)
	require.Len(t, dead.Jobs, 1)
	retried, err := client.RetryDeadJobs(ctx, hopper.DeadFilter{IDs: []int64{dead.Jobs[0].ID}})
	require.NoError(t, err)
	require.Len(t, retried.Retried, 1)
	_, err = client.PauseQueue(ctx, jobs.DefaultQueue)
	require.NoError(t, err)
	_, err = client.ResumeQueue(ctx, jobs.DefaultQueue)
	require.NoError(t, err)
	swept, err := db.New(app).Sweep(ctx, db.SweepParams{MaxJobs: 10})
	require.NoError(t, err)
	require.Empty(t, swept)
	later, priority := time.Now().Add(time.Hour), 5
	edited, err := client.UpdateJob(ctx, retried.Retried[0], hopper.JobUpdate{RunAt: &later, Priority: &priority})
	require.NoError(t, err)
	require.Equal(t, jobs.StateScheduled, edited.State)
	_, err = client.UpdateJob(ctx, retried.Retried[0], hopper.JobUpdate{RunNow: true})
	require.NoError(t, err, "a job made ready wakes its queue")
	require.NoError(t, client.CancelJob(ctx, retried.Retried[0]))
	purged, err := client.PurgeDeadJobs(ctx, hopper.DeadFilter{States: []jobs.State{jobs.StateCancelled}, All: true})
	require.NoError(t, err)
	require.EqualValues(t, 1, purged)
	doomed, err := jobs.EnqueueRaw(ctx, app, "doomed", 1, json.RawMessage(`{}`), jobs.Delay(time.Hour))
	require.NoError(t, err)
	_, err = client.DeleteJob(ctx, doomed.ID)
	require.NoError(t, err)

	// Sequences: placement at commit, a block when the head is cancelled,
	// a skip that promotes the next job.
	first, err := chore.Enqueue(ctx, app, Chore{N: 6}, jobs.Sequence("s"), jobs.Delay(time.Hour))
	require.NoError(t, err)
	second, err := chore.Enqueue(ctx, app, Chore{N: 7}, jobs.Sequence("s"), jobs.Delay(time.Hour))
	require.NoError(t, err)
	require.NoError(t, client.CancelJob(ctx, first.ID))
	next, err := client.SkipSequence(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, second.ID, next)
	retriedHead, err := client.RetryDeadJobs(ctx, hopper.DeadFilter{IDs: []int64{first.ID}, States: []jobs.State{jobs.StateCancelled}})
	require.NoError(t, err)
	require.Equal(t, []int64{first.ID}, retriedHead.Retried)

	// Workflows: edges and counts at enqueue, a cancel that cascades to a
	// waiting child, a retry of the workflow whole, a prune of edges.
	wf, err := jobs.EnqueueWorkflow(ctx, app, jobs.NewWorkflow("w").
		Add("a", chore.Entry(Chore{N: 6}, jobs.Delay(time.Hour))).
		Add("b", chore.Entry(Chore{N: 7}), jobs.After("a")))
	require.NoError(t, err)
	require.NoError(t, client.CancelJob(ctx, wf.Steps["a"]))
	steps, err := client.ListWorkflow(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, jobs.StateCancelled, steps[1].State, "b is cancelled with its parent")
	back, err := client.RetryWorkflow(ctx, "w")
	require.NoError(t, err)
	require.Len(t, back, 2)
	_, err = client.CancelWorkflow(ctx, "w")
	require.NoError(t, err)
	purged, err = client.PurgeDeadJobs(ctx, hopper.DeadFilter{States: []jobs.State{jobs.StateCancelled}, All: true})
	require.NoError(t, err)
	require.EqualValues(t, 2, purged, "a purge deletes the steps' edges too")
}

// leastPrivilegePool makes a role with the grants docs/operating.md lists
// (documentedRolePool), plus the extra blocks of that guide that name the
// tables in extra (the flow-control grant), and returns a pool that logs in
// as it.
func leastPrivilegePool(t *testing.T, d *testdb.DB, extra ...string) *pgxpool.Pool {
	t.Helper()
	return documentedRolePool(t, d, "operating.md", "app", extra...)
}

// documentedRolePool makes a role of d's schema with the grants of the sql
// blocks of docs/<file> that name it (role: "app", "producer") in their
// doccheck comment, exactly as a reader copies them, with only the
// schema's and the role's names replaced: the first block, and each later
// one that mentions one of extra. PUBLIC's EXECUTE on the schema's
// functions is revoked (rolePool), as security-minded setups do. The
// grants run in a session whose search_path is another schema holding
// Hopper's tables, as public may in the database of an administrator who
// runs them: a name the block leaves unqualified would land there.
func documentedRolePool(t *testing.T, d *testdb.DB, file, role string, extra ...string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	md, err := os.ReadFile(filepath.Join("..", "docs", file))
	require.NoError(t, err)
	roleID := pgx.Identifier{d.Schema + "_" + role}.Sanitize()
	schemaID := pgx.Identifier{d.Schema}.Sanitize()
	stmts := doccheck.Grants("docs/"+file, string(md), role, schemaID, roleID, extra...)
	pool := rolePool(t, d, role)
	decoy := testdb.New(t) // another schema with Hopper's tables
	cfg, err := pgx.ParseConfig(d.URL)
	require.NoError(t, err)
	cfg.RuntimeParams["search_path"] = pgx.Identifier{decoy.Schema}.Sanitize()
	admin, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, admin.Close(ctx)) }()
	for _, stmt := range stmts {
		_, err := admin.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	require.NotEmpty(t, stmts, "docs/%s has grants for %s", file, role)
	return pool
}

// TestLeastPrivilegeFlowControl: a flow-controlled queue claims under the
// listed grants plus the one docs/operating.md adds for flow control.
func TestLeastPrivilegeFlowControl(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	app := leastPrivilegePool(t, d, "hopper_rate_claims")

	chore := jobs.MustDefine[Chore]("keyed_chore", jobs.KeyBy(func(c Chore) string { return fmt.Sprint(c.N % 2) }))
	_, err := chore.EnqueueMany(ctx, app, jobs.Items(Chore{N: 1}, Chore{N: 2}, Chore{N: 3}, Chore{N: 4}))
	require.NoError(t, err)
	var done atomic.Int64
	w, err := worker.New(app, worker.Config{Logger: quietLog, PollInterval: 50 * time.Millisecond,
		FlowControl: map[string]worker.FlowControl{jobs.DefaultQueue: {KeyLimit: 1}}})
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, chore, func(context.Context, *jobs.Job[Chore]) error { done.Add(1); return nil }))
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(runCtx) }()
	testdb.WaitFor(t, "every keyed job done", func() bool { return done.Load() == 4 })
	stop()
	require.NoError(t, <-errc)
	budgets, err := hopper.NewClient(app).ListRateBudgets(ctx)
	require.NoError(t, err, "hopper keys' rate budgets read under the grant")
	require.Empty(t, budgets)
}

// TestLeastPrivilegeDurable: under the same grants, a durable handler
// records a step and progress, sleeps, waits for an event the operations
// API emits, and a caller waits for its end; the worker prunes events.
func TestLeastPrivilegeDurable(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	app := leastPrivilegePool(t, d)
	chore := jobs.MustDefine[Chore]("durable_chore")
	res, err := chore.Enqueue(ctx, app, Chore{N: 1})
	require.NoError(t, err)
	client := hopper.NewClient(app)
	ended := make(chan jobs.Row, 1)
	go func() {
		row, err := client.WaitJob(ctx, res.ID)
		if err != nil {
			row.Reason = err.Error()
		}
		ended <- row
	}()
	w, err := worker.New(app, worker.Config{ID: "least-privilege-durable", PollInterval: 50 * time.Millisecond,
		SweepInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, chore, func(ctx context.Context, j *jobs.Job[Chore]) error {
		if _, err := worker.Step(ctx, j, "one", func(context.Context) (int, error) { return 1, nil }); err != nil {
			return err
		}
		if err := worker.SetProgress(ctx, j, "half"); err != nil {
			return err
		}
		if err := worker.Sleep(ctx, j, "nap", 50*time.Millisecond); err != nil {
			return err
		}
		_, err := worker.AwaitEvent[string](ctx, j, "go", time.Hour)
		return err
	}))
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(runCtx) }()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		steps, err := client.ListJobSteps(ctx, res.ID)
		require.NoError(c, err)
		require.Len(c, steps, 3, "step, sleep, event")
	}, testdb.WaitLimit, 20*time.Millisecond)
	_, err = client.EmitEvent(ctx, "go", "now")
	require.NoError(t, err)
	row := <-ended
	require.Equal(t, jobs.StateCompleted, row.State, row.Reason)
	stop()
	require.NoError(t, <-errc)
}
