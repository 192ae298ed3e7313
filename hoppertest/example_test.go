package hoppertest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hopperq/hopper/hoppertest"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// The handler under test: it snoozes while the customer's account is
// locked, and otherwise sends.
func sendInvoiceHandler(ctx context.Context, job *jobs.Job[Invoice]) error {
	if job.Payload.Customer == "locked" {
		return worker.Snooze(10 * time.Minute)
	}
	if job.Payload.Cents <= 0 {
		return worker.Permanent(errors.New("nothing to bill"))
	}
	return nil
}

// Run a handler on one payload, without a worker or a database, and look
// at what the worker would record.
func ExampleWork() {
	ctx := context.Background()
	for _, inv := range []Invoice{{"c-1", 1200}, {"locked", 1200}, {"c-2", 0}} {
		res := hoppertest.Work(ctx, sendInvoice, sendInvoiceHandler, inv)
		fmt.Println(inv.Customer, res.Outcome)
		if res.Reason != "" {
			fmt.Println("  reason:", res.Reason)
		}
	}
	// Output:
	// c-1 done
	// locked snoozed
	// c-2 dead
	//   reason: permanent failure: nothing to bill
}

// exampleT stands for the *testing.T a real test would pass.
type exampleT struct{ fakeT }

func (t *exampleT) Fatalf(format string, args ...any) { fmt.Printf("FAIL: "+format+"\n", args...) }

// Assert what the code under test enqueued, in its own transaction,
// before it commits.
func ExampleRequireEnqueued() {
	t := &exampleT{}
	defer func() {
		for _, fn := range t.cleanups {
			fn()
		}
	}()
	pool := hoppertest.Schema(t, testdb.URL()) // in a test: hoppertest.Schema(t, "")
	ctx := context.Background()

	tx, _ := pool.Begin(ctx)
	defer tx.Rollback(ctx) //nolint:errcheck // nothing to keep
	// ... the code under test bills a customer in tx ...
	_, _ = sendInvoice.Enqueue(ctx, tx, Invoice{Customer: "c-1", Cents: 1200})

	found := hoppertest.RequireEnqueued(t, tx, sendInvoice,
		hoppertest.Where(func(i Invoice) bool { return i.Customer == "c-1" }))
	fmt.Println(found[0].Queue, found[0].Payload.Cents)
	hoppertest.RequireNotEnqueued(t, tx, sendInvoice, hoppertest.Queue("urgent"))
	hoppertest.RequireNotEnqueued(t, pool, sendInvoice) // not committed yet
	// Output:
	// billing 1200
}

// Give each test a freshly migrated schema of its own: tests that each
// take one run in parallel without seeing each other's jobs.
func ExampleSchema() {
	t := &exampleT{}
	a := hoppertest.Schema(t, testdb.URL()) // in a test: hoppertest.Schema(t, "") ($DATABASE_URL)
	b := hoppertest.Schema(t, testdb.URL())
	ctx := context.Background()
	_, _ = sendInvoice.Enqueue(ctx, a, Invoice{Customer: "c-1", Cents: 100})

	fmt.Println(len(hoppertest.RequireEnqueued(t, a, sendInvoice)))
	hoppertest.RequireNotEnqueued(t, b, sendInvoice)
	for _, drop := range t.cleanups { // the testing package runs these when the test ends
		drop()
	}
	// Output:
	// 1
}

// Run a workflow's steps in their order without a worker, and check what
// ran: a failed step's dependents are cancelled, as a worker would have
// them.
func ExampleRunWorkflow() {
	t := &exampleT{}
	defer func() {
		for _, fn := range t.cleanups {
			fn()
		}
	}()
	pool := hoppertest.Schema(t, testdb.URL()) // in a test: hoppertest.Schema(t, "")
	ctx := context.Background()
	bill := func(customer string, cents int) jobs.Entry {
		return sendInvoice.Entry(Invoice{Customer: customer, Cents: cents})
	}
	_, err := jobs.EnqueueWorkflow(ctx, pool, jobs.NewWorkflow("month-end").
		Add("open", bill("c-1", 100)).
		Add("charge", bill("c-1", 0), jobs.After("open")).
		Add("receipt", bill("c-1", 100), jobs.After("charge")).
		Add("audit", bill("c-1", 100), jobs.After("open")))
	if err != nil {
		fmt.Println(err)
		return
	}
	hoppertest.RequireWorkflow(t, pool, "month-end", "open", "charge", "receipt", "audit")

	ran := hoppertest.RunWorkflow(t, pool, "month-end", func(ctx context.Context, row jobs.Row) error {
		job, err := sendInvoice.Decode(row)
		if err != nil {
			return err
		}
		return sendInvoiceHandler(ctx, job)
	})
	fmt.Println(ran)
	// Steps RunWorkflow completed are gone (a worker keeps them in the
	// history); the cancelled ones stay, in the dead table.
	for _, s := range hoppertest.RequireWorkflow(t, pool, "month-end") {
		fmt.Println(s.Step, s.State)
	}
	// Output:
	// [open charge audit]
	// charge cancelled
	// receipt cancelled
}
