package chaos

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// Operating a queue that whole worker processes are working: an operator's
// cancel reaches the process running the job, and a pause holds in every
// process, at once and across restarts.

const operateEnv = "HOPPER_OPERATE_WORKER_URL"

var (
	blockKind = jobs.MustDefine[Chore]("op.block") // runs until cancelled
	quickKind = jobs.MustDefine[Chore]("op.quick") // records when it was claimed
)

// runOperateWorker is the worker process: the test binary run again with
// operateEnv set. It serves queues a and b.
func runOperateWorker() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv(operateEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer pool.Close()
	id := os.Getenv("HOPPER_OPERATE_ID")
	w, err := worker.New(pool, worker.Config{
		ID: id, Queues: map[string]int{"a": 4, "b": 4},
		PollInterval: 100 * time.Millisecond, ShutdownTimeout: 100 * time.Millisecond, Logger: quietLog,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	record := func(j *jobs.Job[Chore], cause, ackError string) error {
		_, err := pool.Exec(context.Background(), "INSERT INTO op_runs (job_id, attempt, worker, queue, cause, ack_error) VALUES ($1, $2, $3, $4, $5, $6)",
			j.ID, j.Attempt, id, j.Queue, cause, ackError)
		return err
	}
	err = worker.Handle(w, blockKind, func(ctx context.Context, j *jobs.Job[Chore]) error {
		if err := record(j, "", ""); err != nil {
			return err
		}
		<-ctx.Done()
		// Cancelled: try to complete anyway, as a handler unaware of the
		// cancel would, with a ledger row in the same transaction.
		ackErr := func() error {
			tx, err := pool.Begin(context.Background())
			if err != nil {
				return err
			}
			defer tx.Rollback(context.Background()) //nolint:errcheck
			if err := worker.AckTx(context.WithoutCancel(ctx), tx, j); err != nil {
				return err
			}
			if _, err := tx.Exec(context.Background(), "INSERT INTO chaos_ledger (job_id, attempt, worker) VALUES ($1, $2, $3)", j.ID, j.Attempt, id); err != nil {
				return err
			}
			return tx.Commit(context.Background())
		}()
		return record(j, fmt.Sprint(context.Cause(ctx)), fmt.Sprint(ackErr))
	})
	if err == nil {
		err = worker.Handle(w, quickKind, func(_ context.Context, j *jobs.Job[Chore]) error { return record(j, "", "") })
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	return 0
}

// operateBed is a schema and its worker processes.
type operateBed struct {
	*processBed
	client *hopper.Client
}

func newOperateBed(t *testing.T) *operateBed {
	t.Helper()
	t.Parallel()
	pb := newProcessBed(t, 5*time.Minute,
		`CREATE TABLE op_runs (job_id bigint NOT NULL, attempt int NOT NULL, worker text NOT NULL, queue text NOT NULL,
			cause text NOT NULL, ack_error text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`,
		"CREATE TABLE chaos_ledger (job_id bigint NOT NULL, attempt int NOT NULL, worker text NOT NULL)",
		// Every claim, with the time its statement began (now()): a claim
		// that began after a pause committed saw the pause.
		"CREATE TABLE op_claims (job_id bigint NOT NULL, queue text NOT NULL, claimed_at timestamptz NOT NULL)",
		`CREATE FUNCTION op_claimed() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN INSERT INTO op_claims VALUES (NEW.id, NEW.queue, now()); RETURN NULL; END $$`,
		`CREATE TRIGGER op_claimed AFTER UPDATE OF state ON hopper_jobs FOR EACH ROW
		 WHEN (OLD.state = 'pending' AND NEW.state = 'running') EXECUTE FUNCTION op_claimed()`)
	pb.explain = func() string {
		rows, _ := pb.db.Pool.Query(pb.ctx, "SELECT worker, queue, count(*), count(*) FILTER (WHERE cause <> '') FROM op_runs GROUP BY 1, 2 ORDER BY 1, 2")
		defer rows.Close()
		var runs []string
		for rows.Next() {
			var w, q string
			var n, cancelled int64
			_ = rows.Scan(&w, &q, &n, &cancelled)
			runs = append(runs, fmt.Sprintf("runs by %s of queue %s: %d (%d cancelled)", w, q, n, cancelled))
		}
		return strings.Join(runs, "; ")
	}
	return &operateBed{processBed: pb, client: hopper.NewClient(pb.db.Pool)}
}

func (b *operateBed) start(id string) {
	b.t.Helper()
	b.spawn(id, operateEnv+"="+b.db.URL, "HOPPER_OPERATE_ID="+id)
}

func (b *operateBed) kill(id string) {
	b.t.Helper()
	b.stop(id, syscall.SIGKILL)
}

func (b *operateBed) enqueue(k *jobs.Kind[Chore], queue string, n int) []int64 {
	b.t.Helper()
	res, err := k.EnqueueMany(b.ctx, b.db.Pool, jobs.Items(make([]Chore, n)...), jobs.Queue(queue))
	require.NoError(b.t, err)
	ids := make([]int64, n)
	for i, r := range res.Results {
		ids[i] = r.ID
	}
	return ids
}

// TestCancelRunningAcrossProcesses: two worker processes run eight
// blocking jobs; four are cancelled. Each cancelled handler sees the cause
// ErrCancelled, its attempt to complete anyway is refused (no ledger row),
// and the job is kept as cancelled; the others keep running until they are
// cancelled in turn.
func TestCancelRunningAcrossProcesses(t *testing.T) {
	b := newOperateBed(t)
	b.start("w1")
	b.start("w2")
	ids := b.enqueue(blockKind, "a", 8)
	b.waitFor("all eight running, on both workers", func() bool {
		return b.count("SELECT count(*) FROM op_runs") == 8 && b.count("SELECT count(DISTINCT worker) FROM op_runs") == 2
	})
	first, rest := ids[:4], ids[4:]
	results, err := b.client.CancelJobs(b.ctx, first...)
	require.NoError(t, err)
	for _, r := range results {
		require.NoError(t, r.Err)
		require.Equal(t, jobs.StateRunning, r.Was)
	}
	b.waitFor("the four handlers cancelled", func() bool {
		return b.count("SELECT count(*) FROM op_runs WHERE cause <> ''") == 4
	})
	require.EqualValues(t, 4, b.count(`SELECT count(*) FROM op_runs WHERE job_id = ANY($1) AND cause = $2 AND ack_error LIKE '%'||$3`,
		first, worker.ErrCancelled.Error(), worker.ErrCancelled.Error()), "the cause is ErrCancelled, and AckTx says so")
	require.Zero(t, b.count("SELECT count(*) FROM chaos_ledger"), "no late completion took effect")
	for _, id := range first {
		row, err := b.client.GetJob(b.ctx, id)
		require.NoError(t, err)
		require.Equal(t, jobs.StateCancelled, row.State)
		require.Equal(t, "cancelled", row.Reason)
	}
	for _, id := range rest {
		row, err := b.client.GetJob(b.ctx, id)
		require.NoError(t, err)
		require.Equal(t, jobs.StateRunning, row.State, "the others run on")
	}
	_, err = b.client.CancelJobs(b.ctx, rest...)
	require.NoError(t, err)
	b.waitFor("every handler cancelled", func() bool { return b.count("SELECT count(*) FROM op_runs WHERE cause <> ''") == 8 })
	require.Zero(t, b.count("SELECT count(*) FROM chaos_ledger"))
	require.EqualValues(t, 8, b.count("SELECT count(*) FROM hopper_dead_jobs WHERE state = 'cancelled'"))
}

// TestPauseAcrossProcesses: three worker processes work queue a while a
// producer feeds it. Once PauseQueue has committed, no process claims a
// job of queue a (a trigger logs every claim with its statement's start),
// while queue b goes on; a worker killed and restarted meanwhile respects
// the pause too; a resume drains the backlog.
func TestPauseAcrossProcesses(t *testing.T) {
	b := newOperateBed(t)
	for _, id := range []string{"w1", "w2", "w3"} {
		b.start(id)
	}
	produce, stopProducing := context.WithCancel(b.ctx)
	produced := make(chan error, 1)
	go func() {
		for produce.Err() == nil {
			if _, err := quickKind.EnqueueMany(b.ctx, b.db.Pool, jobs.Items(make([]Chore, 5)...), jobs.Queue("a")); err != nil {
				produced <- err
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		produced <- nil
	}()
	b.waitFor("queue a worked by all three", func() bool {
		return b.count("SELECT count(DISTINCT worker) FROM op_runs WHERE queue = 'a'") == 3
	})

	_, err := b.client.PauseQueue(b.ctx, "a")
	require.NoError(t, err)
	var committed time.Time // at or after the pause's commit
	require.NoError(t, b.db.Pool.QueryRow(b.ctx, "SELECT clock_timestamp()").Scan(&committed))

	// Queue b goes on, and the restarted worker takes part: b is fed until
	// the restarted w2 has run some of it (it takes a while to start).
	b.kill("w2")
	b.start("w2")
	b.waitFor("the restarted worker works queue b", func() bool {
		b.enqueue(quickKind, "b", 5)
		return b.count("SELECT count(*) FROM op_runs WHERE queue = 'b' AND worker = 'w2' AND at > $1", committed) > 0
	})
	b.waitFor("queue b drained", func() bool {
		return b.count("SELECT count(*) FROM hopper_jobs WHERE queue = 'b'") == 0
	})
	// Every process has polled queue a many times over meanwhile (100ms).
	b.waitFor("two seconds of polling", func() bool { return time.Since(committed) > 2*time.Second })
	stopProducing()
	require.NoError(t, <-produced)

	late := b.count("SELECT count(*) FROM op_claims WHERE queue = 'a' AND claimed_at > $1", committed)
	require.Positive(t, b.count("SELECT count(*) FROM op_claims WHERE queue = 'b' AND claimed_at > $1", committed), "the log sees claims after the pause")
	pending := b.count("SELECT count(*) FROM hopper_jobs WHERE queue = 'a' AND state = 'pending'")
	t.Logf("paused: %d jobs of queue a waiting, %d claimed after the pause committed", pending, late)
	require.Zero(t, late, "no claim of queue a after the pause committed, in any process")
	require.Positive(t, pending, "the producer kept enqueueing: jobs wait")

	resumed := time.Now()
	_, err = b.client.ResumeQueue(b.ctx, "a")
	require.NoError(t, err)
	b.waitFor("the backlog drained after the resume", func() bool {
		return b.count("SELECT count(*) FROM hopper_jobs WHERE queue = 'a'") == 0
	})
	t.Logf("resumed: %d jobs drained in %v", pending, time.Since(resumed).Round(time.Millisecond))
}
