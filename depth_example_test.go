package hopper_test

import (
	"context"
	"fmt"
	"time"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

// A producer that keeps a queue at a target depth: it reads the queue's
// depth, cheaply enough to do so several times a second, and tops the
// queue up to the target. Each count stops at the limit (here 100), so the
// read costs the same with a million jobs waiting.
func ExampleClient_GetQueueDepth() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	client := hopper.NewClient(pool)
	_, _ = remind.Enqueue(ctx, pool, Reminder{UserID: 1}, jobs.Delay(time.Hour))

	const target = 5
	for range 3 { // a real producer loops until it stops, every 200 ms or so
		d, err := client.GetQueueDepth(ctx, "reminders", 100)
		if err != nil {
			panic(err)
		}
		fmt.Println("ready", d.Ready, "scheduled", d.Scheduled, "running", d.Running, "capped", d.Capped())
		for i := d.Ready; i < target; i++ {
			_, _ = remind.Enqueue(ctx, pool, Reminder{UserID: 100 + i})
		}
	}
	// Output:
	// ready 0 scheduled 1 running 0 capped false
	// ready 5 scheduled 1 running 0 capped false
	// ready 5 scheduled 1 running 0 capped false
}
