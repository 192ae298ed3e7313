package hopper_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

// Change a job that has not started: a typed payload, checked by its
// kind, and "run now"; then a raw payload, as the hopper command sends
// one. A job a worker has claimed, or one that has finished, is refused.
func ExampleClient_UpdateJob() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	client := hopper.NewClient(pool)

	res, _ := remind.Enqueue(ctx, pool, Reminder{UserID: 7}, jobs.Delay(time.Hour))
	priority := 1
	row, err := client.UpdateJob(ctx, res.ID, hopper.JobUpdate{
		Payload:  hopper.PayloadOf(remind, Reminder{UserID: 8}),
		RunNow:   true,
		Priority: &priority,
	})
	if err != nil {
		panic(err)
	}
	job, _ := remind.Decode(row)
	fmt.Println(row.State, row.Priority, job.Payload.UserID)

	row, _ = client.UpdateJob(ctx, res.ID, hopper.JobUpdate{Payload: hopper.RawPayload(json.RawMessage(`{"user_id": 9}`), 0)})
	fmt.Println(string(row.Payload))

	_, err = client.UpdateJob(ctx, res.ID, hopper.JobUpdate{Payload: hopper.RawPayload(json.RawMessage(`[9]`), 0)})
	fmt.Println(errors.Is(err, hopper.ErrPayloadMismatch))

	_, _ = client.CancelJobs(ctx, res.ID)
	_, err = client.DeleteJob(ctx, res.ID)
	fmt.Println(err)
	// Output:
	// pending 1 8
	// {"user_id": 9}
	// true
	// delete job 1: hopper: job already finished: it is cancelled
}
