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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/worker"
)

// Welcome is the payload of a welcome email job.
type Welcome struct {
	UserID int64 `json:"user_id"`
}

var welcomeEmail = jobs.Define[Welcome]("welcome_email", jobs.Defaults(jobs.Queue("email")))

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
		Queues:  map[string]int{"email": 20},
		Backoff: worker.Backoff{Base: 100 * time.Millisecond, Max: time.Second},
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return err
	}
	var sent, failed atomic.Int64
	err = worker.Handle(w, welcomeEmail, func(ctx context.Context, job *jobs.Job[Welcome]) error {
		if job.Payload.UserID%10 == 0 && job.Attempt == 1 {
			failed.Add(1)
			return errors.New("mail server busy") // retried after a backoff
		}
		sent.Add(1) // a real handler sends the email here; it must be idempotent
		return nil
	}, worker.Timeout(10*time.Second))
	if err != nil {
		return err
	}

	// Stop once the queue is empty.
	runCtx, done := context.WithCancel(ctx)
	go func() {
		defer done()
		for runCtx.Err() == nil {
			stats, err := db.New(pool).Stats(runCtx)
			live := int64(0)
			for _, s := range stats {
				live += s.Ready + s.Scheduled + s.Running
			}
			if err == nil && live == 0 {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	began := time.Now()
	if err := w.Run(runCtx); err != nil {
		return err
	}
	fmt.Printf("sent %d emails in %v (%d first attempts failed and were retried)\n",
		sent.Load(), time.Since(began).Round(time.Millisecond), failed.Load())
	return nil
}
