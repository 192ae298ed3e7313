package worker_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// A flow-control worker in a process of its own: the test binary run again
// with flowHelperEnv set to its mode. Every run writes a row to the test's
// flow_ledger table as it starts and another field as it ends, and its
// recorded outcome, so the test can check the runs of every process
// against the limits afterwards, SIGKILLed processes included.
const flowHelperEnv = "HOPPER_FLOW_HELPER"

// The modes: keys (a per-key limit of 1, 20ms runs), lossy (the same limit,
// but no lease extension, a 1s lease and 1.5s runs: every run loses its lease
// and its result is refused), victim (the same limit, runs that last until
// the process is killed), rate (20 jobs per 500ms across processes).
func runFlowHelper(mode string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pcfg, err := pgxpool.ParseConfig(os.Getenv(helperEnv))
	if err != nil {
		return 2
	}
	// The test sees the process at work by its connections (flowHelpersUp).
	pcfg.ConnConfig.RuntimeParams["application_name"] = os.Getenv("HOPPER_WORKER_HELPER_ID")
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return 2
	}
	defer pool.Close()
	cfg := worker.Config{
		ID:              os.Getenv("HOPPER_WORKER_HELPER_ID"),
		Queues:          map[string]int{"default": 8},
		LeaseDuration:   time.Second,
		SweepInterval:   100 * time.Millisecond,
		PollInterval:    50 * time.Millisecond,
		ShutdownTimeout: 100 * time.Millisecond,
		Logger:          quiet,
		FlowControl:     map[string]worker.FlowControl{"default": {KeyLimit: 1}},
		OnOutcome: []worker.OutcomeHook{func(row *jobs.Row, o worker.Outcome, _ error) {
			_, _ = pool.Exec(context.Background(), "UPDATE flow_ledger SET outcome = $3 WHERE id = $1 AND attempt = $2", row.ID, row.Attempt, string(o))
		}},
	}
	work := 20 * time.Millisecond
	switch mode {
	case "lossy":
		cfg.ExtendInterval = -1
		work = 1500 * time.Millisecond
	case "victim":
		// Its runs last until it is SIGKILLed: each is open, never
		// ended without its outcome, when it dies.
		work = time.Hour
	case "rate":
		// The claim time is read back as lease_until less the lease: no
		// lease extension may move the lease meanwhile.
		cfg.LeaseDuration, cfg.ExtendInterval = 30*time.Second, -1
		// Not a test of crash recovery: a process starved for a few
		// beats on a loaded machine must not be taken to be gone, its
		// jobs claimed twice.
		cfg.BeatInterval = 10 * time.Second
		cfg.FlowControl = map[string]worker.FlowControl{"default": {Rate: worker.Rate{Limit: 20, Per: 500 * time.Millisecond}}}
		work = time.Millisecond
	}
	w, err := worker.New(pool, cfg)
	if err != nil {
		return 3
	}
	if worker.Handle(w, jobs.MustDefine[Task]("flow"), func(ctx context.Context, j *jobs.Job[Task]) error {
		if _, err := pool.Exec(ctx, `INSERT INTO flow_ledger (id, attempt, key, worker, claimed_at, started_at)
			SELECT $1, $2, $3, $4, lease_until - $5::bigint * interval '1 millisecond', clock_timestamp() FROM hopper_jobs WHERE id = $1`,
			j.ID, j.Attempt, j.ConcurrencyKey, cfg.ID, cfg.LeaseDuration.Milliseconds()); err != nil {
			return err
		}
		time.Sleep(work) // the work itself
		_, err := pool.Exec(context.Background(), "UPDATE flow_ledger SET ended_at = clock_timestamp() WHERE id = $1 AND attempt = $2", j.ID, j.Attempt)
		return err
	}) != nil {
		return 4
	}
	if err := w.Run(ctx); err != nil {
		return 5
	}
	return 0
}

// flowProc is a started flow helper.
type flowProc struct {
	cmd      *exec.Cmd
	id       string
	killedAt time.Time
}

func startFlowHelper(t *testing.T, b *bundle, mode, id string) *flowProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+b.URL, "HOPPER_WORKER_HELPER_ID="+id, flowHelperEnv+"="+mode)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return &flowProc{cmd: cmd, id: id}
}

// kill SIGKILLs the process and notes when, by the database's clock: the
// process is gone, so its runs have ended by then.
func (p *flowProc) kill(t *testing.T, b *bundle) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Kill())
	_ = p.cmd.Wait()
	require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT clock_timestamp()").Scan(&p.killedAt))
}

// closeRuns ends the killed process's open ledger rows at its death (a row
// its dying session wrote after that ran no handler code).
func (p *flowProc) closeRuns(t *testing.T, b *bundle) {
	t.Helper()
	_, err := b.Pool.Exec(b.Ctx, `UPDATE flow_ledger SET ended_at = greatest(started_at, $2), outcome = 'killed'
		WHERE worker = $1 AND ended_at IS NULL`, p.id, p.killedAt)
	require.NoError(t, err)
}

func createLedger(t *testing.T, b *bundle) {
	t.Helper()
	_, err := b.Pool.Exec(b.Ctx, `CREATE TABLE flow_ledger (
		id bigint, attempt integer, key text, worker text,
		claimed_at timestamptz, started_at timestamptz, ended_at timestamptz, outcome text,
		PRIMARY KEY (id, attempt))`)
	require.NoError(t, err)
}

func (b *bundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, sql, args...).Scan(&n))
	return n
}

// TestKeyLimitAcrossProcesses: four worker processes share a per-key limit
// of 1; one of them loses every lease (no lease extension, runs longer than the
// lease), and one is SIGKILLed mid-run and replaced. Every job completes,
// and the ledger shows no two runs of one key ever overlapping, except
// runs whose lease was lost: their results were refused by the fence.
func TestKeyLimitAcrossProcesses(t *testing.T) {
	testdb.Slow(t, "a key limit across worker processes")
	b := setup(t)
	createLedger(t, b)
	k := kind(t, "flow")
	var entries []jobs.Entry
	for i := range 120 {
		entries = append(entries, k.Entry(Task{N: i}, jobs.ConcurrencyKey(fmt.Sprintf("key-%d", i%6))))
	}
	_, err := jobs.EnqueueBatch(b.Ctx, b.Pool, entries)
	require.NoError(t, err)
	startFlowHelper(t, b, "lossy", "lossy")
	testdb.WaitFor(t, "the lossy worker to be running a job", func() bool {
		return b.count(t, "SELECT count(*) FROM flow_ledger WHERE worker = 'lossy'") > 0
	})
	// The victim claims before the steady workers start (the lossy one
	// holds a key or two at a time), and its runs hold their keys until it
	// dies: it is killed mid-run, however fast the others drain the queue.
	victim := startFlowHelper(t, b, "victim", "victim")
	testdb.WaitFor(t, "the victim to be running a job", func() bool {
		return b.count(t, "SELECT count(*) FROM flow_ledger WHERE worker = 'victim' AND ended_at IS NULL") > 0
	})
	startFlowHelper(t, b, "keys", "steady-1")
	startFlowHelper(t, b, "keys", "steady-2")
	victim.kill(t, b)
	startFlowHelper(t, b, "keys", "replacement")
	testdb.WaitFor(t, "every job done, every run's outcome recorded", func() bool {
		live, _ := b.Totals(t)
		victim.closeRuns(t, b)
		return live == 0 && b.count(t, "SELECT count(*) FROM flow_ledger WHERE outcome IS NULL") == 0
	})
	require.Positive(t, b.count(t, "SELECT count(*) FROM flow_ledger WHERE outcome = 'refused'"), "the lossy worker lost leases")
	require.Positive(t, b.count(t, "SELECT count(*) FROM flow_ledger WHERE outcome = 'killed'"))
	require.Equal(t, 120, b.count(t, "SELECT count(DISTINCT id) FROM flow_ledger WHERE outcome = 'done'"))
	// Overlapping runs of one key, neither of which lost its lease.
	var overlaps int
	var example string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `
		SELECT count(*), coalesce(min(format('%s: job %s attempt %s (%s, %s) and job %s attempt %s (%s, %s)',
		       a.key, a.id, a.attempt, a.worker, a.outcome, c.id, c.attempt, c.worker, c.outcome)), '')
		FROM flow_ledger AS a
		JOIN flow_ledger AS c ON a.key = c.key AND (a.id, a.attempt) < (c.id, c.attempt)
		WHERE a.outcome IS DISTINCT FROM 'refused' AND c.outcome IS DISTINCT FROM 'refused'
		  AND a.started_at < c.ended_at AND c.started_at < a.ended_at`).Scan(&overlaps, &example))
	require.Zero(t, overlaps, example)
	require.Zero(t, b.count(t, "SELECT count(*) FROM flow_ledger WHERE ended_at IS NULL"))
}

// TestRateLimitAcrossProcesses: three worker processes share a limit of
// 20 jobs per 500ms. The claim times (the database's clock) never put more
// than 20 claims in any 500ms window, and every job runs.
func TestRateLimitAcrossProcesses(t *testing.T) {
	b := setup(t)
	createLedger(t, b)
	k := kind(t, "flow")
	// The jobs come once every process is connected, so that all three
	// claim from the first window on, however slowly they started.
	var ids []string
	for i := range 3 {
		ids = append(ids, fmt.Sprintf("%s-rate-%d", b.Schema, i))
		startFlowHelper(t, b, "rate", ids[i])
	}
	testdb.WaitFor(t, "the three processes connected", func() bool {
		return b.count(t, "SELECT count(DISTINCT application_name) FROM pg_stat_activity WHERE application_name = ANY($1)", ids) == 3
	})
	_, err := k.EnqueueMany(b.Ctx, b.Pool, jobs.Items(make([]Task, 70)...))
	require.NoError(t, err)
	testdb.WaitFor(t, "every job done", func() bool {
		live, _ := b.Totals(t)
		return live == 0
	})
	require.Equal(t, 70, b.count(t, "SELECT count(*) FROM flow_ledger"))
	require.Greater(t, b.count(t, "SELECT count(DISTINCT worker) FROM flow_ledger"), 1, "the processes shared the work")
	most := b.count(t, `SELECT max(n) FROM (
		SELECT count(*) OVER (ORDER BY claimed_at RANGE BETWEEN interval '499.999 milliseconds' PRECEDING AND CURRENT ROW) AS n
		FROM flow_ledger) AS w`)
	require.LessOrEqual(t, most, 20)
	require.Equal(t, 20, most, "the limit, not the workers, bounds the rate")
}
