package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hopperq/hopper"
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
	stats, _ := hopper.NewClient(pool).Stats(context.Background())
	fmt.Println("sent:", sent, "left in the queue:", stats.Total.Live())
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
	stats, _ := hopper.NewClient(pool).Stats(context.Background())
	fmt.Println("invoice sent:", sent, "jobs left:", stats.Total.Live())
	// Output: invoice sent: true jobs left: 0
}

// A handler that cannot do its work yet snoozes: the job runs again later
// without being charged an attempt or recording an error. A handler for
// whom the work no longer makes sense cancels its job: it is kept as
// cancelled, not retried, not counted as failed.
func ExampleSnooze() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx, stop := context.WithCancel(context.Background())
	res, _ := sendInvoice.Enqueue(ctx, pool, Invoice{Number: 7}, jobs.MaxAttempts(1))

	w, _ := worker.New(pool, worker.Config{PollInterval: 10 * time.Millisecond})
	_ = worker.Handle(w, sendInvoice, func(ctx context.Context, job *jobs.Job[Invoice]) error {
		if job.Attempt < 3 {
			return worker.Snooze(10 * time.Millisecond) // the mail server is busy
		}
		defer stop()
		return worker.Cancel(errors.New("the customer closed the account"))
	})
	if err := w.Run(ctx); err != nil {
		panic(err)
	}
	row, _ := hopper.NewClient(pool).Job(context.Background(), res.ID)
	fmt.Println(row.State, "after", row.Attempt, "runs;", len(row.Errors), "entry:", row.Errors[0].Error)
	// Output: cancelled after 3 runs; 1 entry: cancelled: the customer closed the account
}

// A handler that returns a result, for a kind that keeps its completed
// jobs: the result is stored with the job and read back later.
func ExampleHandleWithResult() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx, stop := context.WithCancel(context.Background())
	res, _ := sendInvoice.Enqueue(ctx, pool, Invoice{Number: 42})

	type Receipt struct {
		MessageID string `json:"message_id"`
	}
	w, _ := worker.New(pool, worker.Config{})
	_ = worker.HandleWithResult(w, sendInvoice, func(ctx context.Context, job *jobs.Job[Invoice]) (Receipt, error) {
		defer stop()
		return Receipt{MessageID: fmt.Sprintf("invoice-%d@mail", job.Payload.Number)}, nil
	}, worker.KeepHistory(7*24*time.Hour))
	if err := w.Run(ctx); err != nil {
		panic(err)
	}
	row, _ := hopper.NewClient(pool).Job(context.Background(), res.ID)
	fmt.Println(row.State, string(row.Result))
	// Output: completed {"message_id": "invoice-42@mail"}
}
