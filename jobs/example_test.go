package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

type SignupEmail struct {
	UserID int64 `json:"user_id"`
}

// Define a kind once, at package level, with its payload type and the
// defaults its jobs get.
var signupEmail = jobs.MustDefine[SignupEmail]("signup_email",
	jobs.Defaults(jobs.Queue("email"), jobs.MaxAttempts(5)),
)

// Enqueue a job in the same transaction as the business write: both commit,
// or neither does.
func ExampleKind_Enqueue() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()

	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback(ctx)
	// ... insert the user with tx ...
	res, err := signupEmail.Enqueue(ctx, tx, SignupEmail{UserID: 7}, jobs.Delay(time.Minute))
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}
	fmt.Println("enqueued:", res.ID > 0, "duplicate:", res.Duplicate)

	// A unique key makes a second enqueue a no-op while the first job lives.
	first, _ := signupEmail.Enqueue(ctx, pool, SignupEmail{UserID: 8}, jobs.UniqueKey("signup:8"))
	again, _ := signupEmail.Enqueue(ctx, pool, SignupEmail{UserID: 8}, jobs.UniqueKey("signup:8"))
	fmt.Println("second is a duplicate of the first:", again.Duplicate && again.ID == first.ID)
	// Output:
	// enqueued: true duplicate: false
	// second is a duplicate of the first: true
}

// Enqueue many jobs in one round trip (COPY).
func ExampleKind_EnqueueMany() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()

	var batch []SignupEmail
	for id := int64(1); id <= 5000; id++ {
		batch = append(batch, SignupEmail{UserID: id})
	}
	res, err := signupEmail.EnqueueMany(ctx, pool, jobs.Items(batch...), jobs.Priority(5))
	if err != nil {
		panic(err)
	}
	fmt.Println("inserted:", res.Inserted)
	// Output: inserted: 5000
}

// Enqueue jobs of several kinds in one call: all or nothing, one result
// per entry, in order.
func ExampleEnqueueBatch() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	type Invoice struct {
		Number int `json:"number"`
	}
	invoice := jobs.MustDefine[Invoice]("invoice", jobs.Defaults(jobs.Queue("billing")))

	res, err := jobs.EnqueueBatch(ctx, pool, []jobs.Entry{
		signupEmail.Entry(SignupEmail{UserID: 7}),
		invoice.Entry(Invoice{Number: 42}, jobs.UniqueKey("invoice-42")),
		invoice.Entry(Invoice{Number: 42}, jobs.UniqueKey("invoice-42")),
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("inserted:", res.Inserted, "duplicates:", res.Duplicates)
	fmt.Println("the third names the second:", res.Results[2].Duplicate && res.Results[2].ID == res.Results[1].ID)
	// Output:
	// inserted: 2 duplicates: 1
	// the third names the second: true
}

// Version 1 of this kind stored one "name"; version 2 splits it. Old jobs
// still in the table are upgraded when a worker decodes them.
func ExampleUpgrade() {
	type greetingV1 struct {
		Name string `json:"name"`
	}
	type Greeting struct {
		First string `json:"first"`
		Last  string `json:"last"`
	}
	greeting := jobs.MustDefine[Greeting]("greeting",
		jobs.Version(2),
		jobs.Upgrade(1, jobs.Convert(func(old greetingV1) (Greeting, error) {
			first, last, _ := strings.Cut(old.Name, " ")
			return Greeting{First: first, Last: last}, nil
		})),
	)

	// A job a version-1 deploy enqueued ...
	row := jobs.Row{ID: 1, Kind: "greeting", Version: 1, Payload: json.RawMessage(`{"name":"Grace Hopper"}`)}
	// ... is handled by this deploy as a version-2 payload.
	job, err := greeting.Decode(row)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%+v (stored as version %d)\n", job.Payload, job.Version)
	// Output: {First:Grace Last:Hopper} (stored as version 1)
}

// Name the schema in Go when the pool cannot set search_path, as through
// PgBouncer in transaction mode (which also needs pgx's exec mode). Pass
// what InSchema returns wherever Hopper takes a DBTX.
func ExampleInSchema() {
	pool, drop := testdb.ForExample() // Hopper's tables, in a schema of their own
	defer drop()
	ctx := context.Background()
	jobsSchema := pool.Config().ConnConfig.RuntimeParams["search_path"]

	// A pool like one through PgBouncer: exec mode, no search_path.
	cfg := pool.Config()
	delete(cfg.ConnConfig.RuntimeParams, "search_path")
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	bouncer, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	defer bouncer.Close()

	jobsDB, err := jobs.InSchema(bouncer, jobsSchema)
	if err != nil {
		panic(err)
	}
	res, err := signupEmail.Enqueue(ctx, jobsDB, SignupEmail{UserID: 9})
	if err != nil {
		panic(err)
	}
	fmt.Println("enqueued:", res.ID > 0)

	_, err = jobs.InSchema(bouncer, "")
	fmt.Println(errors.Is(err, jobs.ErrInvalidSchema))
	// Output:
	// enqueued: true
	// true
}

// Enqueue many small workflows in one call: every step of every workflow
// in one insert and every edge in one more, all or nothing. Each result
// maps its workflow's step names to job ids.
func ExampleEnqueueWorkflows() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	type Order struct {
		ID int `json:"id"`
	}
	charge := jobs.MustDefine[Order]("charge")
	ship := jobs.MustDefine[Order]("ship")
	receipt := jobs.MustDefine[Order]("receipt")

	var ws []*jobs.Workflow
	for id := 1; id <= 1000; id++ {
		o := Order{ID: id}
		ws = append(ws, jobs.NewWorkflow(fmt.Sprintf("order-%d", id)).
			Add("charge", charge.Entry(o)).
			Add("ship", ship.Entry(o), jobs.After("charge")).
			Add("receipt", receipt.Entry(o), jobs.After("charge")))
	}
	res, err := jobs.EnqueueWorkflows(ctx, pool, ws)
	if err != nil {
		panic(err)
	}
	fmt.Println("workflows:", len(res), "the last:", res[999].ID, "steps:", len(res[999].Steps), "waiting:", res[999].Waiting)
	// Output: workflows: 1000 the last: order-1000 steps: 3 waiting: 2
}
