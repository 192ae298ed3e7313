package worker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

type Signup struct {
	User string `json:"user"`
}

var onboard = jobs.MustDefine[Signup]("onboard")

// A durable handler: its steps run once per job, a retry replays what
// they recorded, and a wait for an event gives the worker back until the
// event comes. The first run fails after its steps; the second replays
// them, then waits for the user's confirmation, which a caller emits.
func ExampleStep() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx, stop := context.WithCancel(context.Background())
	if _, err := pool.Exec(ctx, "CREATE TABLE accounts (name text PRIMARY KEY)"); err != nil {
		panic(err)
	}
	res, err := onboard.Enqueue(ctx, pool, Signup{User: "ada"})
	if err != nil {
		panic(err)
	}
	w, _ := worker.New(pool, worker.Config{PollInterval: 50 * time.Millisecond})
	runs := 0
	err = worker.Handle(w, onboard, func(ctx context.Context, j *jobs.Job[Signup]) error {
		runs++
		// Exactly once: the insert and the step's record commit together.
		if _, err := worker.StepTx(ctx, j, "create account", func(ctx context.Context, tx pgx.Tx) (bool, error) {
			_, err := tx.Exec(ctx, "INSERT INTO accounts VALUES ($1)", j.Payload.User)
			return true, err
		}); err != nil {
			return err
		}
		mail, err := worker.Step(ctx, j, "welcome mail", func(context.Context) (string, error) {
			return "sent to " + j.Payload.User, nil // at least once: a mail server call goes here
		})
		if err != nil {
			return err
		}
		if runs == 1 {
			return errors.New("a failure after the steps: the retry replays them")
		}
		answer, err := worker.AwaitEvent[string](ctx, j, "confirmed-"+j.Payload.User, 7*24*time.Hour)
		if err != nil {
			return err // worker.ErrSuspended while it waits
		}
		fmt.Println(mail+";", "confirmation:", answer)
		stop()
		return nil
	})
	if err != nil {
		panic(err)
	}
	go func() {
		client := hopper.NewClient(pool)
		for {
			steps, _ := client.ListJobSteps(ctx, res.ID)
			row, _ := client.GetJob(ctx, res.ID)
			if hopper.SuspensionOf(row.State, steps, time.Now()).Event != "" {
				_, _ = client.EmitEvent(ctx, "confirmed-ada", "yes")
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	if err := w.Run(ctx); err != nil {
		panic(err)
	}
	var accounts int
	_ = pool.QueryRow(context.Background(), "SELECT count(*) FROM accounts").Scan(&accounts)
	fmt.Println("runs:", runs, "accounts:", accounts)
	// Output:
	// sent to ada; confirmation: yes
	// runs: 3 accounts: 1
}
