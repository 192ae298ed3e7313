package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// The reliability suite: whole worker processes run against a real
// PostgreSQL while faults are injected, and the verdict comes from a ledger
// and the queue tables, never from logs. Every handler run is recorded in
// chaos_runs (committed at once, so duplicates show) and every completion
// in chaos_ledger, in the same transaction as the job's acknowledgement
// (worker.AckTx): a stale run whose ack was refused leaves no ledger row.
//
// `make chaos` runs every scenario at full size (HOPPER_CHAOS=full);
// `make test` runs them at CI size.

const chaosEnv = "HOPPER_CHAOS_WORKER_URL"

var chaosTask = jobs.MustDefine[Chore]("chaos.task")

func chaosFull() bool { return os.Getenv("HOPPER_CHAOS") == "full" }

// runChaosWorker is the worker process: the test binary run again with
// chaosEnv set.
func runChaosWorker() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv(chaosEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer pool.Close()
	lease, _ := time.ParseDuration(os.Getenv("HOPPER_CHAOS_LEASE"))
	heartbeat, _ := time.ParseDuration(os.Getenv("HOPPER_CHAOS_HEARTBEAT"))
	slowFirst, _ := time.ParseDuration(os.Getenv("HOPPER_CHAOS_SLOW_FIRST"))
	work, _ := time.ParseDuration(os.Getenv("HOPPER_CHAOS_WORK"))
	var keep map[string]time.Duration
	if os.Getenv("HOPPER_CHAOS_HISTORY") != "" {
		keep = map[string]time.Duration{jobs.DefaultQueue: time.Hour}
	}
	cfg := worker.Config{
		KeepHistoryByQueue: keep,
		ID:                 os.Getenv("HOPPER_CHAOS_ID"),
		Queues:             map[string]int{jobs.DefaultQueue: 16},
		LeaseDuration:      lease,
		ExtendInterval:     heartbeat,
		PollInterval:       100 * time.Millisecond,
		SweepInterval:      200 * time.Millisecond,
		// Long enough for the last results and the give-back under load
		// (its last quarter); the handlers finish within it.
		ShutdownTimeout: 5 * time.Second,
		RetryBackoff:    worker.Backoff{Base: 10 * time.Millisecond, Max: 100 * time.Millisecond},
		Logger:          quietLog,
	}
	if os.Getenv("HOPPER_CHAOS_DEFAULTS") != "" {
		// Every setting at its default, the ID too, as a new user runs it
		// (recovery_test.go).
		cfg = worker.Config{Queues: map[string]int{jobs.DefaultQueue: 16}, Logger: quietLog}
	}
	// Every outcome the worker reports, for tests of what it was told.
	cfg.OnOutcome = []worker.OutcomeHook{func(job *jobs.Row, o worker.Outcome, _ error) {
		_, _ = pool.Exec(context.WithoutCancel(ctx), "INSERT INTO chaos_outcomes (job_id, attempt, outcome) VALUES ($1, $2, $3)",
			job.ID, job.Attempt, string(o))
	}}
	w, err := worker.New(pool, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	id := os.Getenv("HOPPER_CHAOS_ID")
	err = worker.Handle(w, chaosTask, func(ctx context.Context, job *jobs.Job[Chore]) error {
		if _, err := pool.Exec(ctx, "INSERT INTO chaos_runs (job_id, attempt, worker) VALUES ($1, $2, $3)", job.ID, job.Attempt, id); err != nil {
			return err
		}
		pause := work
		if job.Attempt == 1 && slowFirst > 0 {
			pause = slowFirst // outlives the lease: heartbeat is off in that scenario
		}
		if pause > 0 {
			time.Sleep(pause)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
		if _, err := tx.Exec(ctx, "INSERT INTO chaos_ledger (job_id, attempt, worker) VALUES ($1, $2, $3)", job.ID, job.Attempt, id); err != nil {
			return err
		}
		if err := worker.AckTx(ctx, tx, job); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
	if err != nil {
		return 4
	}
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	return 0
}

// chaosBed is one scenario's database and worker processes.
type chaosBed struct {
	*processBed
	url string // for workers: a bigger pool, tagged with application_name
	env []string
}

func newChaosBed(t *testing.T, env ...string) *chaosBed {
	t.Helper()
	pb := newProcessBed(t, 10*time.Minute,
		"CREATE TABLE chaos_runs (job_id bigint NOT NULL, attempt int NOT NULL, worker text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())",
		"CREATE TABLE chaos_ledger (job_id bigint NOT NULL, attempt int NOT NULL, worker text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())",
		"CREATE TABLE chaos_outcomes (job_id bigint NOT NULL, attempt int NOT NULL, outcome text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())")
	url := pb.db.URL
	if strings.Contains(url, "://") {
		url += "&pool_max_conns=24&application_name=" + pb.db.Schema
	} else {
		url += " pool_max_conns=24 application_name=" + pb.db.Schema
	}
	b := &chaosBed{processBed: pb, url: url, env: env}
	pb.explain = func() string {
		return fmt.Sprintf("ledger %d, dead %d, live %d",
			b.count("SELECT count(*) FROM chaos_ledger"), b.count("SELECT count(*) FROM hopper_dead_jobs"), b.count("SELECT count(*) FROM hopper_jobs"))
	}
	return b
}

func (b *chaosBed) start(id string) {
	b.t.Helper()
	b.spawn(id, append([]string{chaosEnv + "=" + b.url, "HOPPER_CHAOS_ID=" + id}, b.env...)...)
}

func (b *chaosBed) enqueue(n int) {
	b.t.Helper()
	for left := n; left > 0; left -= 5000 {
		_, err := chaosTask.EnqueueMany(b.ctx, b.db.Pool, jobs.Items(make([]Chore, min(5000, left))...))
		require.NoError(b.t, err)
	}
}

// done says whether every job is in the ledger (or dead).
func (b *chaosBed) done(n int) bool {
	b.t.Helper()
	return b.count("SELECT (SELECT count(DISTINCT job_id) FROM chaos_ledger) + (SELECT count(*) FROM hopper_dead_jobs)") >= int64(n)
}

// waitDone waits until every job is in the ledger (or dead).
func (b *chaosBed) waitDone(n int, limit time.Duration) {
	b.t.Helper()
	b.waitWithin("every job done", limit, func() bool { return b.done(n) })
}

// waitLedger waits until the ledger holds at least n completions.
func (b *chaosBed) waitLedger(n int) {
	b.t.Helper()
	b.waitWithin(fmt.Sprintf("%d completions", n), 3*time.Minute, func() bool {
		return b.count("SELECT count(*) FROM chaos_ledger") >= int64(n)
	})
}

// verdict checks the ledger and prints the scenario's figures.
func (b *chaosBed) verdict(name string, n int, recovery time.Duration) {
	b.t.Helper()
	completed := b.count("SELECT count(DISTINCT job_id) FROM chaos_ledger")
	ledgerRows := b.count("SELECT count(*) FROM chaos_ledger")
	dead := b.count("SELECT count(*) FROM hopper_dead_jobs")
	live := b.count("SELECT count(*) FROM hopper_jobs")
	runs := b.count("SELECT count(*) FROM chaos_runs")
	duplicated := b.count("SELECT count(*) FROM (SELECT job_id FROM chaos_runs GROUP BY job_id HAVING count(*) > 1) d")
	claimsRunTwice := b.count("SELECT count(*) FROM (SELECT 1 FROM chaos_runs GROUP BY job_id, attempt HAVING count(*) > 1) d")
	lost := int64(n) - completed - dead - live
	b.t.Logf("%s: enqueued %d, completed %d, dead %d, duplicated %d (runs %d, %d of them never completed: killed, failed or refused), lost %d, recovery %v",
		name, n, completed, dead, duplicated, runs, runs-ledgerRows, lost, recovery.Round(time.Millisecond))
	require.Zero(b.t, lost, "lost jobs")
	require.Equal(b.t, completed, ledgerRows, "a completion was recorded twice: a stale ack was accepted")
	require.Zero(b.t, claimsRunTwice, "one claim ran twice: a job ran again without its lease expiring")
	require.EqualValues(b.t, n, completed+dead)
	if b.history() {
		// Every completed job is in the history exactly once (the primary
		// key allows no more), under the attempt whose completion
		// committed; no refused run left a row.
		kept := b.count("SELECT count(*) FROM hopper_job_history")
		matching := b.count("SELECT count(*) FROM hopper_job_history AS h JOIN chaos_ledger AS l ON l.job_id = h.id AND l.attempt = h.attempt")
		b.t.Logf("%s: history holds %d completed jobs, %d of them under the ledger's attempt", name, kept, matching)
		require.Equal(b.t, completed, kept, "every completed job kept, once")
		require.Equal(b.t, completed, matching, "kept under the attempt that completed it")
	} else {
		require.Zero(b.t, b.count("SELECT count(*) FROM hopper_job_history"), "history is off")
	}
}

// history says whether the bed's workers keep history.
func (b *chaosBed) history() bool {
	for _, e := range b.env {
		if strings.HasPrefix(e, "HOPPER_CHAOS_HISTORY=") {
			return true
		}
	}
	return false
}

// TestChaosWorkerCrashes: 4 worker processes, keeping history; every ~2s a
// random one gets SIGKILL and is restarted under its stable ID.
func TestChaosWorkerCrashes(t *testing.T) {
	testdb.Slow(t, "worker processes killed and restarted")
	n := 20_000
	if chaosFull() {
		n = 100_000
	}
	b := newChaosBed(t, "HOPPER_CHAOS_LEASE=2s", "HOPPER_CHAOS_WORK=1ms", "HOPPER_CHAOS_HISTORY=1")
	b.enqueue(n)
	ids := []string{"w1", "w2", "w3", "w4"}
	for _, id := range ids {
		b.start(id)
	}
	var lastKill time.Time
	deadline := time.Now().Add(5 * time.Minute)
	for !b.done(n) && time.Now().Before(deadline) {
		time.Sleep(time.Duration(1500+rand.IntN(1000)) * time.Millisecond) // the kill cadence
		victim := ids[rand.IntN(len(ids))]
		b.stop(victim, syscall.SIGKILL)
		lastKill = time.Now()
		b.start(victim)
	}
	b.waitDone(n, 2*time.Minute)
	b.verdict("worker crashes", n, time.Since(lastKill))
}

// TestChaosConnectionsKilled: every backend of the worker processes is
// killed with pg_terminate_backend, several times.
func TestChaosConnectionsKilled(t *testing.T) {
	testdb.Slow(t, "worker processes killed and restarted")
	n := 10_000
	if chaosFull() {
		n = 50_000
	}
	b := newChaosBed(t, "HOPPER_CHAOS_LEASE=5s", "HOPPER_CHAOS_WORK=1ms")
	b.enqueue(n)
	b.start("w1")
	b.start("w2")
	var lastKill time.Time
	workerBackends := "FROM pg_stat_activity WHERE application_name = '" + b.db.Schema + "' AND pid <> pg_backend_pid()"
	for round := 1; round <= 5; round++ {
		// Progress, and connections to kill: the workers have reconnected.
		b.waitWithin(fmt.Sprintf("round %d", round), 3*time.Minute, func() bool {
			return b.count("SELECT count(*) FROM chaos_ledger") >= int64(round*n/8) && b.count("SELECT count(*) "+workerBackends) > 0
		})
		killed := b.count("SELECT count(pg_terminate_backend(pid)) " + workerBackends)
		require.Positive(t, killed)
		lastKill = time.Now()
	}
	b.waitDone(n, 3*time.Minute)
	b.verdict("connections killed", n, time.Since(lastKill))
}

// TestChaosDatabaseRestart: PostgreSQL itself is restarted mid-run. It
// disturbs every other test using the server, so it runs only when asked
// (HOPPER_CHAOS_RESTART=1, as `make chaos` and CI's chaos step do, alone),
// and only where the test can restart the local cluster.
func TestChaosDatabaseRestart(t *testing.T) {
	testdb.Slow(t, "worker processes killed and restarted")
	if os.Getenv("HOPPER_CHAOS_RESTART") != "1" {
		t.Skip("set HOPPER_CHAOS_RESTART=1 to restart PostgreSQL mid-run (make chaos does)")
	}
	versions, _ := os.ReadDir("/etc/postgresql")
	if _, err := exec.LookPath("pg_ctlcluster"); err != nil || len(versions) == 0 {
		t.Skip("no local cluster this test can restart (pg_ctlcluster)")
	}
	n := 10_000
	if chaosFull() {
		n = 50_000
	}
	b := newChaosBed(t, "HOPPER_CHAOS_LEASE=10s", "HOPPER_CHAOS_WORK=1ms")
	b.enqueue(n)
	b.start("w1")
	b.start("w2")
	b.waitLedger(n / 4)
	version := versions[len(versions)-1].Name()
	before := b.count("SELECT count(*) FROM chaos_ledger")
	restarting := time.Now()
	out, err := exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart").CombinedOutput()
	if err != nil {
		t.Skipf("cannot restart the cluster here: %v: %s", err, out)
	}
	t.Logf("restarted PostgreSQL in %v with %d of %d jobs done", time.Since(restarting).Round(time.Millisecond), before, n)
	require.Less(t, before, int64(n), "the restart came mid-run")
	b.waitDone(n, 3*time.Minute)
	b.verdict("database restart", n, time.Since(restarting))
}

// TestChaosLeaseExpiry: with the heartbeat off, first attempts outlive
// their lease; they are run again elsewhere, and their late acks refused
// (history is kept: a refused ack keeps nothing).
func TestChaosLeaseExpiry(t *testing.T) {
	testdb.Slow(t, "worker processes killed and restarted")
	n := 300
	b := newChaosBed(t, "HOPPER_CHAOS_LEASE=300ms", "HOPPER_CHAOS_HEARTBEAT=-1s", "HOPPER_CHAOS_SLOW_FIRST=1s", "HOPPER_CHAOS_HISTORY=1")
	b.enqueue(n)
	b.start("w1")
	b.start("w2")
	b.waitDone(n, 3*time.Minute)
	b.verdict("lease expiry", n, 0)
	require.Positive(t, b.count("SELECT count(*) FROM chaos_runs WHERE attempt = 1")-b.count("SELECT count(*) FROM chaos_ledger WHERE attempt = 1"),
		"some first attempts were refused: fencing under load")
}

// TestChaosGracefulShutdown: SIGTERM to every worker while jobs are in
// flight; nothing is left running (no job waits for a lease to expire), and
// a new worker finishes everything.
func TestChaosGracefulShutdown(t *testing.T) {
	testdb.Slow(t, "worker processes killed and restarted")
	n := 2000
	b := newChaosBed(t, "HOPPER_CHAOS_LEASE=1m", "HOPPER_CHAOS_WORK=20ms")
	b.enqueue(n)
	for _, id := range []string{"w1", "w2", "w3", "w4"} {
		b.start(id)
	}
	b.waitLedger(200)
	for _, id := range []string{"w1", "w2", "w3", "w4"} {
		b.stop(id, syscall.SIGTERM)
	}
	require.Zero(t, b.count("SELECT count(*) FROM hopper_jobs WHERE state = 'running'"), "every unfinished job was given back")
	began := time.Now()
	b.start("w5")
	b.waitDone(n, 2*time.Minute) // with a 1-minute lease, a stranded job would show here
	b.verdict("graceful shutdown", n, time.Since(began))
}

// TestChaosLongTransaction: a transaction held open in another session for
// the whole run (holding back vacuum); the run still completes.
func TestChaosLongTransaction(t *testing.T) {
	testdb.Slow(t, "worker processes killed and restarted")
	n := 5000
	throughput := func(hold bool) float64 {
		b := newChaosBed(t, "HOPPER_CHAOS_LEASE=30s")
		if hold {
			conn, err := pgx.Connect(b.ctx, b.db.URL)
			require.NoError(t, err)
			defer conn.Close(context.Background())
			tx, err := conn.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
			require.NoError(t, err)
			defer tx.Rollback(context.Background())                     //nolint:errcheck
			_, err = tx.Exec(b.ctx, "SELECT count(*) FROM hopper_jobs") // takes the snapshot
			require.NoError(t, err)
		}
		b.enqueue(n)
		began := time.Now()
		b.start("w1")
		b.start("w2")
		b.waitDone(n, 3*time.Minute)
		elapsed := time.Since(began)
		b.verdict("long transaction="+strconv.FormatBool(hold), n, 0)
		return float64(n) / elapsed.Seconds()
	}
	without, with := throughput(false), throughput(true)
	t.Logf("long transaction: %.0f jobs/s without it, %.0f jobs/s with it", without, with)
}
