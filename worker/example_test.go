package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

type Invoice struct {
	Number int `json:"number"`
}

var sendInvoice = jobs.MustDefine[Invoice]("send_invoice")

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
	stats, _ := hopper.NewClient(pool).GetStats(context.Background())
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
	stats, _ := hopper.NewClient(pool).GetStats(context.Background())
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
	row, _ := hopper.NewClient(pool).GetJob(context.Background(), res.ID)
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
	row, _ := hopper.NewClient(pool).GetJob(context.Background(), res.ID)
	fmt.Println(row.State, string(row.Result))
	// Output: completed {"message_id": "invoice-42@mail"}
}

// A periodic job: every worker that defines the schedule takes part in
// firing it, and each slot becomes exactly one job, whose payload is made
// from the slot and whose unique key names it.
func ExampleSchedule() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx, stop := context.WithCancel(context.Background())

	w, _ := worker.New(pool, worker.Config{})
	err := worker.Schedule(w, "every-second", tick, "@every 1s",
		func(slot time.Time) Tick { return Tick{Slot: slot} },
		worker.OnMissed(worker.SkipMissed()), // default: worker.FireOnce()
		worker.EnqueueOptions(jobs.Priority(5)))
	if err != nil {
		panic(err) // a bad expression, zone or option: worker.ErrInvalidSchedule
	}
	client := hopper.NewClient(pool)
	var fired *jobs.Job[Tick]
	var key string
	_ = worker.Handle(w, tick, func(ctx context.Context, job *jobs.Job[Tick]) error {
		defer stop()
		fired = job
		row, err := client.GetJob(ctx, job.ID) // the running job's row
		key = row.UniqueKey
		return err
	})
	if err := w.Run(ctx); err != nil {
		panic(err)
	}

	fmt.Println("slot on a whole second:", fired.Payload.Slot.Equal(fired.Payload.Slot.Truncate(time.Second)))
	fmt.Println("unique key names the slot:", key == worker.SlotKey("every-second", fired.Payload.Slot))
	schedules, _ := client.ListSchedules(context.Background())
	s := schedules[0]
	fmt.Println(s.Name, s.Expression, s.Policy, "next after last:", s.NextFireAt.After(*s.LastSlot))
	// Output:
	// slot on a whole second: true
	// unique key names the slot: true
	// every-second @every 1s skip next after last: true
}

type Sync struct {
	Customer string `json:"customer"`
}

// Flow control: at most one sync per customer at a time, across every
// worker process, and customers served in turn, so one customer's backlog
// does not hold the others back. The key comes from the payload (KeyBy).
func ExampleFlowControl() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx, stop := context.WithCancel(context.Background())
	syncAccount := jobs.MustDefine[Sync]("sync_account",
		jobs.KeyBy(func(s Sync) string { return "customer:" + s.Customer }))
	var entries []jobs.Entry
	for _, customer := range []string{"acme", "acme", "acme", "globex"} {
		entries = append(entries, syncAccount.Entry(Sync{Customer: customer}))
	}
	if _, err := jobs.EnqueueBatch(ctx, pool, entries); err != nil {
		panic(err)
	}

	w, err := worker.New(pool, worker.Config{
		Queues:      map[string]int{"default": 1},
		FlowControl: map[string]worker.FlowControl{"default": {KeyLimit: 1, Fair: true}},
	})
	if err != nil {
		panic(err)
	}
	var order []string
	err = worker.Handle(w, syncAccount, func(ctx context.Context, job *jobs.Job[Sync]) error {
		order = append(order, job.Payload.Customer) // one slot: one handler at a time
		if len(order) == 4 {
			stop()
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	if err := w.Run(ctx); err != nil {
		panic(err)
	}
	fmt.Println(order)
	// Output: [acme globex acme acme]
}

// A rate limit for an API that counts calls: at most 2 calls per 100ms
// across every worker process, counted by when each handler started
// (ExactStarts), not only by when its job was claimed.
func ExampleRate() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx, stop := context.WithCancel(context.Background())
	callAPI := jobs.MustDefine[Sync]("call_api")
	if _, err := callAPI.EnqueueMany(ctx, pool, jobs.Items(Sync{"a"}, Sync{"b"}, Sync{"c"}, Sync{"d"})); err != nil {
		panic(err)
	}

	w, err := worker.New(pool, worker.Config{
		Queues: map[string]int{"default": 10},
		FlowControl: map[string]worker.FlowControl{"default": {
			Rate: worker.Rate{Limit: 2, Per: 100 * time.Millisecond, ExactStarts: true},
		}},
	})
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	calls := 0
	err = worker.Handle(w, callAPI, func(ctx context.Context, job *jobs.Job[Sync]) error {
		mu.Lock()
		defer mu.Unlock()
		if calls++; calls == 4 {
			stop()
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	if err := w.Run(ctx); err != nil {
		panic(err)
	}
	fmt.Println("calls:", calls)
	// Output: calls: 4
}
