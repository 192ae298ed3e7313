package hopper_test

import (
	"context"
	"fmt"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

type Transfer struct {
	Account string `json:"account"`
	Cents   int    `json:"cents"`
}

// Postings of one account apply in order: the kind takes each job's
// sequence key from its payload.
var transfer = jobs.MustDefine[Transfer]("transfer",
	jobs.SequenceBy(func(t Transfer) string { return "account:" + t.Account }))

// Jobs of one sequence run one at a time, in the order they were
// enqueued: the first is ready, the rest wait. A head cancelled (or dead)
// blocks its sequence until an operator retries or skips it.
func ExampleClient_SkipSequence() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	client := hopper.NewClient(pool)

	var ids []int64
	for _, cents := range []int{500, -200, 300} {
		res, err := transfer.Enqueue(ctx, pool, Transfer{Account: "42", Cents: cents})
		if err != nil {
			panic(err)
		}
		ids = append(ids, res.ID)
	}
	seq, _ := client.GetSequence(ctx, "account:42")
	fmt.Println("head", seq.HeadID, seq.HeadState, "waiting", seq.Waiting)

	_ = client.CancelJob(ctx, ids[0])
	blocked, _ := client.ListBlockedSequences(ctx, hopper.SequencePage{})
	fmt.Println("blocked", blocked[0].Key, "by", blocked[0].JobID, blocked[0].State, "waiting", blocked[0].Waiting)

	next, _ := client.SkipSequence(ctx, "account:42")
	seq, _ = client.GetSequence(ctx, "account:42")
	fmt.Println("skipped; head", next, seq.HeadState, "waiting", seq.Waiting)
	// Output:
	// head 1 pending waiting 2
	// blocked account:42 by 1 cancelled waiting 2
	// skipped; head 2 pending waiting 1
}
