package hopper_test

import (
	"context"
	"fmt"
	"log"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/worker"
)

// Welcome is the payload of a welcome email job.
type Welcome struct {
	UserID int64 `json:"user_id"`
}

// WelcomeEmail is a job kind: a stable name and a payload type.
var WelcomeEmail = jobs.MustDefine[Welcome]("welcome_email")

// The README's quickstart, run as a test: migrate, sign a user up and
// enqueue their welcome email in one transaction, run a worker until the
// job is done, stop. TestReadmeQuickstart keeps the README's copy the same
// program, but for where the pool comes from.
func Example_quickstart() {
	ctx := context.Background()
	pool, drop := testdb.ForExample() // the README opens a pool on DATABASE_URL
	defer drop()

	if err := schema.Up(ctx, pool); err != nil { // create Hopper's tables, or bring them up to date
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS users (id bigserial PRIMARY KEY, email text NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	// Sign a user up and enqueue their welcome email in one transaction:
	// the job exists if and only if the user does.
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) // a no-op once committed
	var userID int64
	if err := tx.QueryRow(ctx, `INSERT INTO users (email) VALUES ($1) RETURNING id`, "ada@example.com").Scan(&userID); err != nil {
		log.Fatal(err)
	}
	res, err := WelcomeEmail.Enqueue(ctx, tx, Welcome{UserID: userID})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("enqueued job", res.ID)

	// Run a worker until the job's outcome is recorded, then stop it.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	w, err := worker.New(pool, worker.Config{
		OnOutcome: []worker.OutcomeHook{func(job *jobs.Row, outcome worker.Outcome, err error) {
			fmt.Printf("job %d: %s\n", job.ID, outcome)
			stop() // a real program stops on a signal instead
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	err = worker.Handle(w, WelcomeEmail, func(ctx context.Context, job *jobs.Job[Welcome]) error {
		fmt.Println("sending the welcome email to user", job.Payload.UserID)
		return nil // nil: done; an error: retried with backoff
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil { // until stop(), then a clean shutdown
		log.Fatal(err)
	}
	fmt.Println("worker stopped")
	// Output:
	// enqueued job 1
	// sending the welcome email to user 1
	// job 1: done
	// worker stopped
}
