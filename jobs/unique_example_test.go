package jobs_test

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

type AccountSync struct {
	AccountID int64  `json:"account_id"`
	Region    string `json:"region"`
	Reason    string `json:"reason"`
}

// At most one sync per account an hour: the key comes from the payload,
// and a job that already ran (or died, or was cancelled) within the hour
// still holds it. (A completed job is seen only where history is kept.)
func ExampleUniquePeriod() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	syncAccount := jobs.MustDefine[AccountSync]("example.sync_account",
		jobs.UniqueBy(func(s AccountSync) string { return strconv.FormatInt(s.AccountID, 10) }),
		jobs.Defaults(jobs.UniquePeriod(time.Hour)),
	)

	first, _ := syncAccount.Enqueue(ctx, pool, AccountSync{AccountID: 7, Reason: "signup"})
	// Whether the first job still waits, runs, or has finished since:
	again, _ := syncAccount.Enqueue(ctx, pool, AccountSync{AccountID: 7, Reason: "settings changed"})
	other, _ := syncAccount.Enqueue(ctx, pool, AccountSync{AccountID: 8})
	fmt.Println("first:", first.Outcome())
	fmt.Println("again within the hour:", again.Outcome(), again.ID == first.ID)
	fmt.Println("another account:", other.Outcome())
	// Output:
	// first: inserted
	// again within the hour: kept true
	// another account: inserted
}

// Keep a key held by a job that died, so that nobody enqueues it again
// until an operator looks: live jobs always hold it, and dead ones too.
func ExampleUniqueStates() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	migrate := jobs.MustDefine[AccountSync]("example.migrate_account",
		jobs.UniqueFields("account_id"),
		jobs.Defaults(jobs.UniqueStates(jobs.StateDead)),
	)

	first, _ := migrate.Enqueue(ctx, pool, AccountSync{AccountID: 7})
	fmt.Println(migrate.Entry(AccountSync{AccountID: 7}).UniqueKey())
	again, _ := migrate.Enqueue(ctx, pool, AccountSync{AccountID: 7, Reason: "retry"})
	fmt.Println("while it waits:", again.Outcome(), again.ID == first.ID)
	// Output:
	// example.migrate_account:[7]
	// while it waits: kept true
}

// Debounce a burst of changes into one job that runs a while after the
// last of them, with the latest payload.
func ExampleDebounce() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	reindex := jobs.MustDefine[AccountSync]("example.reindex",
		jobs.UniqueFields("account_id"),
		jobs.Defaults(jobs.Debounce(30*time.Second)),
	)

	var last jobs.Result
	for _, reason := range []string{"rename", "new logo", "new address"} {
		last, _ = reindex.Enqueue(ctx, pool, AccountSync{AccountID: 7, Reason: reason})
		fmt.Println(reason+":", last.Outcome())
	}
	var payload string
	_ = pool.QueryRow(ctx, "SELECT payload->>'reason' FROM hopper_jobs WHERE id = $1", last.ID).Scan(&payload)
	fmt.Println("the job will run with:", payload)
	// Output:
	// rename: inserted
	// new logo: replaced
	// new address: replaced
	// the job will run with: new address
}

// Replace the payload of a job that has not started, keeping its run
// time: the caller learns which happened.
func ExampleReplaceWaiting() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	notify := jobs.MustDefine[AccountSync]("example.notify")

	opts := []jobs.EnqueueOption{jobs.UniqueKey("notify:7"), jobs.ReplaceWaiting()}
	first, _ := notify.Enqueue(ctx, pool, AccountSync{AccountID: 7, Reason: "draft"}, opts...)
	second, _ := notify.Enqueue(ctx, pool, AccountSync{AccountID: 7, Reason: "final"}, opts...)
	fmt.Println(first.Outcome(), second.Outcome(), second.ID == first.ID, second.Duplicate)
	// Output: inserted replaced true true
}

// Derive the unique key from the payload with a function: the key is the
// kind's name, a colon, and what the function returns.
func ExampleUniqueBy() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	welcome := jobs.MustDefine[AccountSync]("example.welcome",
		jobs.UniqueBy(func(s AccountSync) string { return "account-" + strconv.FormatInt(s.AccountID, 10) }),
	)

	fmt.Println(welcome.Entry(AccountSync{AccountID: 7}).UniqueKey())
	first, _ := welcome.Enqueue(ctx, pool, AccountSync{AccountID: 7, Reason: "signup"})
	again, _ := welcome.Enqueue(ctx, pool, AccountSync{AccountID: 7, Reason: "clicked twice"})
	fmt.Println(first.Outcome(), again.Outcome())
	// Output:
	// example.welcome:account-7
	// inserted kept
}

// Derive the unique key from named fields of the payload.
func ExampleUniqueFields() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	export := jobs.MustDefine[AccountSync]("example.export", jobs.UniqueFields("account_id", "region"))

	fmt.Println(export.Entry(AccountSync{AccountID: 7, Region: "eu"}).UniqueKey())
	res, _ := export.EnqueueMany(ctx, pool, jobs.Items(
		AccountSync{AccountID: 7, Region: "eu", Reason: "a"},
		AccountSync{AccountID: 7, Region: "eu", Reason: "b"}, // the same key
		AccountSync{AccountID: 7, Region: "us"},
	))
	fmt.Println("inserted:", res.Inserted, "duplicates:", res.Duplicates)
	// Output:
	// example.export:[7,"eu"]
	// inserted: 2 duplicates: 1
}
