package tests

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/worker"
)

// grantedRole makes a login role of d's schema with nothing granted
// (PUBLIC's EXECUTE on the schema's functions revoked, as rolePool does),
// gives it what hopper grants --as kind --apply runs, requires the
// command to print exactly what hopper grants without --apply prints (no
// database: --schema), and returns its name and a pool that logs in as it.
func grantedRole(t *testing.T, d *testdb.DB, kind string) (string, *pgxpool.Pool) {
	t.Helper()
	pool := rolePool(t, d, kind)
	role := d.Schema + "_" + kind
	printed := runHopper(t, "postgres://127.0.0.1:1/nowhere", "", "grants", role, "--as", kind, "--schema", d.Schema)
	require.Zero(t, printed.code, printed.stderr)
	applied := applyGrants(t, d, role, kind)
	require.Equal(t, printed.stdout, applied, "--apply prints what it runs, which is what the command prints")
	return role, pool
}

// applyGrants runs hopper grants ROLE --as kind --apply on d's schema (the
// one its URL's search_path names) and returns what it printed.
func applyGrants(t *testing.T, d *testdb.DB, role, kind string) string {
	t.Helper()
	r := runHopper(t, d.URL, "", "grants", role, "--as", kind, "--apply")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "GRANT USAGE ON SCHEMA "+pgx.Identifier{d.Schema}.Sanitize()+" TO "+pgx.Identifier{role}.Sanitize()+";")
	return r.stdout
}

// TestGrantsCheckedAtWorkerStart: a worker whose role lacks a grant of
// hopper grants --as worker (hopper_job_steps's, as after a migration that
// added the table and grants not run again) refuses to start, with
// worker.ErrMissingGrants naming the GRANT to run, before it claims
// anything; schema.Check with Grants says the same. After hopper grants
// --apply it starts and runs a durable job to its end. Before the check,
// the worker started and its durable calls failed at run time (issue 62).
func TestGrantsCheckedAtWorkerStart(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	role, app := grantedRole(t, d, "worker")
	require.NoError(t, schema.Check(ctx, app, schema.Grants(schema.RoleWorker)))
	stepsTable := pgx.Identifier{d.Schema}.Sanitize() + ".hopper_job_steps"
	_, err := d.Pool.Exec(ctx, "REVOKE ALL ON "+stepsTable+" FROM "+pgx.Identifier{role}.Sanitize())
	require.NoError(t, err)

	chore := jobs.MustDefine[Chore]("granted_chore")
	res, err := chore.Enqueue(ctx, app, Chore{N: 1})
	require.NoError(t, err)
	newWorker := func() *worker.Worker {
		w, err := worker.New(app, worker.Config{Logger: quietLog, PollInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, worker.Handle(w, chore, func(ctx context.Context, j *jobs.Job[Chore]) error {
			_, err := worker.Step(ctx, j, "one", func(context.Context) (int, error) { return 1, nil })
			return err
		}))
		return w
	}
	want := "GRANT SELECT, INSERT, UPDATE, DELETE ON " + stepsTable + " TO " + pgx.Identifier{role}.Sanitize()
	client := hopper.NewClient(app)
	// Without the check the worker starts, claims the job and its step
	// fails: wait for whichever comes first, so that the test fails then
	// rather than at its deadline.
	firstCtx, stopFirst := context.WithCancel(ctx)
	firstErr := make(chan error, 1)
	go func() { firstErr <- newWorker().Run(firstCtx) }()
	returned := false
	testdb.WaitFor(t, "the worker refuses to start, or attempts the job", func() bool {
		select {
		case err = <-firstErr:
			returned = true
			return true
		default:
		}
		row, err := client.GetJob(ctx, res.ID)
		require.NoError(t, err)
		return row.Attempt > 0
	})
	stopFirst()
	if !returned {
		err = <-firstErr
		require.Fail(t, "the worker started without the grants and attempted the job", "Run: %v", err)
	}
	require.ErrorIs(t, err, worker.ErrMissingGrants)
	require.ErrorContains(t, err, want)
	require.ErrorContains(t, err, "hopper grants "+role+" --as worker --schema "+d.Schema+" --apply")
	err = schema.Check(ctx, app, schema.Grants(schema.RoleWorker))
	require.ErrorIs(t, err, schema.ErrMissingGrants)
	require.ErrorContains(t, err, want)
	require.NoError(t, schema.Check(ctx, app), "without Grants, Check checks the version only")
	row, err := client.GetJob(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, jobs.StatePending, row.State, "the worker claimed nothing")
	require.Zero(t, row.Attempt)

	applyGrants(t, d, role, "worker")
	require.NoError(t, schema.Check(ctx, app, schema.Grants(schema.RoleWorker)))
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- newWorker().Run(runCtx) }()
	row, err = client.WaitJob(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, jobs.StateCompleted, row.State, row.Reason)
	stop()
	require.NoError(t, <-errc)
}

// TestGrantsProducerAndReader: a role given exactly hopper grants --as
// producer enqueues, through Go and the SQL API, and may not run the
// pruner's partition functions; one given --as reader lists and counts
// jobs and may not enqueue. schema.Check with Grants passes for each.
func TestGrantsProducerAndReader(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, producer := grantedRole(t, d, "producer")
	_, reader := grantedRole(t, d, "reader")
	require.NoError(t, schema.Check(ctx, producer, schema.Grants(schema.RoleProducer)))
	require.NoError(t, schema.Check(ctx, reader, schema.Grants(schema.RoleReader)))

	chore := jobs.MustDefine[Chore]("produced_chore")
	_, err := chore.Enqueue(ctx, producer, Chore{N: 1})
	require.NoError(t, err, "Go's enqueue")
	_, err = chore.EnqueueMany(ctx, producer, jobs.Items(Chore{N: 2}, Chore{N: 3}))
	require.NoError(t, err, "Go's batch enqueue")
	var id int64
	require.NoError(t, producer.QueryRow(ctx, `SELECT id FROM hopper_enqueue(kind => 'produced_chore', payload => '{"n": 4}')`).Scan(&id))
	_, err = producer.Exec(ctx, `SELECT hopper_dead_partitions_drop('1 minute')`)
	require.ErrorContains(t, err, "permission denied", "the pruner's, not a producer's")

	client := hopper.NewClient(reader)
	list, err := client.ListJobs(ctx, hopper.ListParams{})
	require.NoError(t, err)
	require.Len(t, list.Jobs, 4)
	stats, err := client.GetStats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 4, stats.Total.Live())
	_, err = chore.Enqueue(ctx, reader, Chore{N: 5})
	require.ErrorContains(t, err, "permission denied", "a reader enqueues nothing")
}

// TestGrantsUsage: hopper grants needs one role and a known kind.
func TestGrantsUsage(t *testing.T) {
	t.Parallel()
	requireFailure(t, runHopper(t, "", "", "grants", "--as", "worker"), 2, "grants takes one role name")
	requireFailure(t, runHopper(t, "", "", "grants", "app"), 2, "--as producer|worker|reader")
	requireFailure(t, runHopper(t, "", "", "grants", "app", "--as", "owner"), 2, `unknown kind of role "owner" (producer, worker, reader)`)
}
