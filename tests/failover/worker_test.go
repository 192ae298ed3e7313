package failover

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// The worker process: the test binary run again with workerEnv set to the
// connection string it is to use (both nodes, through their proxies).
const workerEnv = "HOPPER_FAILOVER_WORKER_URL"

// Task is every job of the suite: an order's job, a workflow's step or a
// sequence's job, told apart by which fields are set.
type Task struct {
	Order int64  `json:"order,omitempty"`
	WF    string `json:"wf,omitempty"`
	Step  string `json:"step,omitempty"`
	Seq   string `json:"seq,omitempty"`
	Pos   int    `json:"pos,omitempty"`
}

// Tick is the payload of the schedule every worker defines.
type Tick struct {
	Slot time.Time `json:"slot"`
}

var (
	task = jobs.MustDefine[Task]("failover.task")
	tick = jobs.MustDefine[Tick]("failover.tick")
)

// The suite's tables. Every run is recorded as it starts (fo_runs,
// committed at once, so duplicate runs show) and every completion in the
// transaction that acknowledges the job (fo_ledger, with worker.AckTx): a
// run whose acknowledgement the fence refused leaves no ledger row. Each
// row records the port of the server that took it: which node was primary.
var tables = []string{
	`CREATE TABLE fo_orders (id bigserial PRIMARY KEY, producer int NOT NULL, jobs int NOT NULL, plain boolean NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp(),
		port int NOT NULL DEFAULT inet_server_port())`,
	`CREATE TABLE fo_runs (id bigserial PRIMARY KEY, job_id bigint NOT NULL, attempt int NOT NULL, worker text NOT NULL,
		at timestamptz NOT NULL DEFAULT clock_timestamp(), port int NOT NULL DEFAULT inet_server_port())`,
	`CREATE TABLE fo_ledger (id bigserial PRIMARY KEY, job_id bigint NOT NULL, attempt int NOT NULL, worker text NOT NULL,
		order_id bigint, wf text, step text, seq text, pos int, slot timestamptz,
		at timestamptz NOT NULL DEFAULT clock_timestamp(), port int NOT NULL DEFAULT inet_server_port())`,
	`CREATE INDEX ON fo_runs (job_id)`,
	`CREATE INDEX ON fo_ledger (job_id)`,
	`CREATE INDEX ON fo_ledger (order_id)`,
	`CREATE INDEX ON fo_orders (at)`,
}

// Timings of the worker processes: a short lease, so that jobs held by a
// connection that died are swept within seconds; the default poll.
const (
	lease   = 5 * time.Second
	tickKey = "failover.tick"
)

func runWorker() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	id := os.Getenv("HOPPER_FAILOVER_ID")
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("worker", id)
	if path := os.Getenv("HOPPER_FAILOVER_LOG"); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer f.Close()
		log = slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo})).With("worker", id)
	}
	cfg, err := pgxpool.ParseConfig(os.Getenv(workerEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	hopper.DetectSilentPeers(&cfg.ConnConfig.Config)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer pool.Close()
	w, err := worker.New(pool, worker.Config{
		ID:              id,
		Queues:          map[string]int{jobs.DefaultQueue: 8},
		LeaseDuration:   lease,
		ShutdownTimeout: 5 * time.Second,
		Logger:          log,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	// Every slot fires, the ones due while no primary answered included.
	if err := worker.Schedule(w, tickKey, tick, "@every 1s", func(slot time.Time) Tick { return Tick{Slot: slot} },
		worker.OnMissed(worker.CatchUp(1000))); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	if err := worker.Handle(w, task, func(ctx context.Context, job *jobs.Job[Task]) error {
		p := job.Payload
		return record(ctx, pool, job.ID, job.Attempt, id, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO fo_ledger (job_id, attempt, worker, order_id, wf, step, seq, pos)
				VALUES ($1, $2, $3, NULLIF($4, 0), NULLIF($5, ''), NULLIF($6, ''), NULLIF($7, ''), NULLIF($8, 0))`,
				job.ID, job.Attempt, id, p.Order, p.WF, p.Step, p.Seq, p.Pos); err != nil {
				return err
			}
			return worker.AckTx(ctx, tx, job)
		})
	}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	if err := worker.Handle(w, tick, func(ctx context.Context, job *jobs.Job[Tick]) error {
		return record(ctx, pool, job.ID, job.Attempt, id, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO fo_ledger (job_id, attempt, worker, slot) VALUES ($1, $2, $3, $4)`,
				job.ID, job.Attempt, id, job.Payload.Slot); err != nil {
				return err
			}
			return worker.AckTx(ctx, tx, job)
		})
	}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	return 0
}

// record notes the run, then runs ack in a transaction it commits. Its
// statements get 10 s, as a handler's on an HA database should: a session
// on a primary gone silent then fails the run, and its retry runs on a new
// session, instead of hanging until the job's timeout.
func record(ctx context.Context, pool *pgxpool.Pool, jobID int64, attempt int, worker string,
	ack func(context.Context, pgx.Tx) error) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, "INSERT INTO fo_runs (job_id, attempt, worker) VALUES ($1, $2, $3)", jobID, attempt, worker); err != nil {
		return err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if err := ack(ctx, tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
