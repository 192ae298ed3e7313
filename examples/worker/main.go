// Command worker is a small, complete Hopper program: it migrates the
// database, enqueues a batch of welcome emails (some of which fail once and
// are retried), runs a worker until every job is done or Ctrl-C, and shuts
// down cleanly.
//
//	go run ./examples/worker            # uses DATABASE_URL or the libpq defaults
//	go run ./examples/worker -jobs 5000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/worker"
)

// Welcome is the payload of a welcome email job.
type Welcome struct {
	UserID int64 `json:"user_id"`
}

var welcomeEmail = jobs.MustDefine[Welcome]("welcome_email", jobs.Defaults(jobs.Queue("email")))

func main() {
	n := flag.Int("jobs", 1000, "how many jobs to enqueue")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(n int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := schema.Up(ctx, pool); err != nil {
		return err
	}

	batch := make([]Welcome, n)
	for i := range batch {
		batch[i] = Welcome{UserID: int64(i + 1)}
	}
	if _, err := welcomeEmail.EnqueueMany(ctx, pool, jobs.Items(batch...)); err != nil {
		return err
	}

	w, err := worker.New(pool, worker.Config{
		Queues:       map[string]int{"email": 20},
		RetryBackoff: worker.Backoff{Base: 100 * time.Millisecond, Max: time.Second},
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return err
	}
	// Stop once every job this program enqueued has succeeded (other jobs
	// in the schema are none of its business); Run then records the last
	// results before it returns.
	runCtx, done := context.WithCancel(ctx)
	defer done()
	var sent, failed atomic.Int64
	var succeeded sync.Map // user id → true: a job can run twice (at least once)
	err = worker.Handle(w, welcomeEmail, func(ctx context.Context, job *jobs.Job[Welcome]) error {
		if job.Payload.UserID%10 == 0 && job.Attempt == 1 {
			failed.Add(1)
			return errors.New("mail server busy") // retried after a backoff
		}
		// A real handler sends the email here; it must be idempotent.
		if _, again := succeeded.LoadOrStore(job.Payload.UserID, true); !again && sent.Add(1) == int64(n) {
			done()
		}
		return nil
	}, worker.Timeout(10*time.Second))
	if err != nil {
		return err
	}
	began := time.Now()
	if err := w.Run(runCtx); err != nil {
		return err
	}
	fmt.Printf("sent %d emails in %v (%d first attempts failed and were retried)\n",
		sent.Load(), time.Since(began).Round(time.Millisecond), failed.Load())
	return nil
}
