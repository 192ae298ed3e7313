package worker_test

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

type Invoice struct {
	Number int `json:"number"`
}

var sendInvoice = jobs.Define[Invoice]("send_invoice")

// Register a typed handler and run a worker; cancelling Run's context
// shuts it down cleanly.
func ExampleHandle() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx, stop := context.WithCancel(context.Background())

	for n := 1; n <= 3; n++ {
		if _, err := sendInvoice.Enqueue(ctx, pool, Invoice{Number: n}); err != nil {
			panic(err)
		}
	}

	w, err := worker.New(pool, worker.Config{Queues: map[string]int{"default": 2}})
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	var sent []int
	err = worker.Handle(w, sendInvoice, func(ctx context.Context, job *jobs.Job[Invoice]) error {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, job.Payload.Number)
		if len(sent) == 3 {
			stop() // a real program stops on a signal instead
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	if err := w.Run(ctx); err != nil { // blocks until stop()
		panic(err)
	}
	sort.Ints(sent)
	stats, _ := db.New(pool).Stats(context.Background())
	fmt.Println("sent:", sent, "left in the queue:", len(stats))
	// Output: sent: [1 2 3] left in the queue: 0
}

// A handler that writes to the same database acknowledges its job in its
// own transaction: the write and the completion commit together, or
// neither does and the job is retried.
func ExampleAckTx() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx, stop := context.WithCancel(context.Background())
	if _, err := pool.Exec(ctx, "CREATE TABLE invoices (number int PRIMARY KEY, sent bool NOT NULL DEFAULT false)"); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO invoices (number) VALUES (42)"); err != nil {
		panic(err)
	}
	if _, err := sendInvoice.Enqueue(ctx, pool, Invoice{Number: 42}); err != nil {
		panic(err)
	}

	w, _ := worker.New(pool, worker.Config{})
	_ = worker.Handle(w, sendInvoice, func(ctx context.Context, job *jobs.Job[Invoice]) error {
		defer stop()
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "UPDATE invoices SET sent = true WHERE number = $1", job.Payload.Number); err != nil {
			return err
		}
		if err := worker.AckTx(ctx, tx, job); err != nil {
			return err // worker.ErrLeaseLost: another worker has the job now
		}
		return tx.Commit(ctx)
	})
	if err := w.Run(ctx); err != nil {
		panic(err)
	}
	var sent bool
	_ = pool.QueryRow(context.Background(), "SELECT sent FROM invoices WHERE number = 42").Scan(&sent)
	stats, _ := db.New(pool).Stats(context.Background())
	fmt.Println("invoice sent:", sent, "jobs left:", len(stats))
	// Output: invoice sent: true jobs left: 0
}
