package hopper_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

type Reminder struct {
	UserID int64 `json:"user_id"`
}

var remind = jobs.MustDefine[Reminder]("remind", jobs.Defaults(jobs.Queue("reminders")))

// Look a job up by id, whatever became of it, and decode its payload with
// its kind.
func ExampleClient_GetJob() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	client := hopper.NewClient(pool)

	res, _ := remind.Enqueue(ctx, pool, Reminder{UserID: 7}, jobs.Delay(time.Hour))
	row, err := client.GetJob(ctx, res.ID)
	if err != nil {
		panic(err)
	}
	job, _ := remind.Decode(row)
	fmt.Println(row.State, row.Queue, job.Payload.UserID)

	_, err = client.GetJob(ctx, 424242)
	fmt.Println(errors.Is(err, hopper.ErrNotFound))
	// Output:
	// scheduled reminders 7
	// true
}

// List jobs newest first, a page at a time: each page's Next is the
// cursor of the one after it.
func ExampleClient_ListJobs() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	client := hopper.NewClient(pool)
	for user := int64(1); user <= 5; user++ {
		_, _ = remind.Enqueue(ctx, pool, Reminder{UserID: user})
	}

	p := hopper.ListParams{Queue: "reminders", States: []jobs.State{jobs.StatePending}, Limit: 2}
	for {
		page, err := client.ListJobs(ctx, p)
		if err != nil {
			panic(err)
		}
		for _, row := range page.Jobs {
			job, _ := remind.Decode(row)
			fmt.Print(job.Payload.UserID, " ")
		}
		fmt.Println("|")
		if page.Next == "" {
			break
		}
		p.After = page.Next
	}
	// Output:
	// 5 4 |
	// 3 2 |
	// 1 |
}

// Cancel jobs, running ones included: each is kept as cancelled, and a
// running job's worker stops its handler.
func ExampleClient_CancelJobs() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	client := hopper.NewClient(pool)
	res, _ := remind.Enqueue(ctx, pool, Reminder{UserID: 7})

	results, err := client.CancelJobs(ctx, res.ID, 424242)
	if err != nil {
		panic(err)
	}
	for _, r := range results {
		switch {
		case r.Err == nil:
			fmt.Println("cancelled; it was", r.Was)
		case errors.Is(r.Err, hopper.ErrNotFound):
			fmt.Println("no such job")
		}
	}
	row, _ := client.GetJob(ctx, res.ID)
	fmt.Println(row.State, row.Reason)
	fmt.Println(errors.Is(client.CancelJob(ctx, res.ID), hopper.ErrFinished))
	// Output:
	// cancelled; it was pending
	// no such job
	// cancelled cancelled
	// true
}

// Pause a queue: from the moment it commits no worker process claims its
// jobs, until it is resumed. Pausing twice is not an error.
func ExampleClient_PauseQueue() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	client := hopper.NewClient(pool)
	_, _ = remind.Enqueue(ctx, pool, Reminder{UserID: 7})

	first, _ := client.PauseQueue(ctx, "reminders")
	again, _ := client.PauseQueue(ctx, "reminders")
	fmt.Println(first.Changed, again.Changed)
	queues, _ := client.ListQueues(ctx)
	for _, q := range queues {
		fmt.Println(q.Name, q.Paused(), q.Ready)
	}
	resumed, _ := client.ResumeQueue(ctx, "reminders")
	fmt.Println(resumed.Changed)

	_, err := client.PauseQueue(ctx, "remindres")
	fmt.Println(errors.Is(err, hopper.ErrUnknownQueue))
	// Output:
	// true false
	// reminders true 1
	// true
	// true
}

// Retry dead jobs of a kind, and purge those that died long ago. A filter
// that names no job, kind, queue or time must say All.
func ExampleClient_RetryDeadJobs() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	client := hopper.NewClient(pool)
	// A job cancelled by an operator is kept with the dead ones.
	res, _ := remind.Enqueue(ctx, pool, Reminder{UserID: 7})
	_ = client.CancelJob(ctx, res.ID)

	retried, err := client.RetryDeadJobs(ctx, hopper.DeadFilter{Kind: "remind", States: []jobs.State{jobs.StateCancelled}})
	if err != nil {
		panic(err)
	}
	fmt.Println("retried", len(retried.Retried))
	row, _ := client.GetJob(ctx, res.ID)
	fmt.Println(row.State)

	_, err = client.PurgeDeadJobs(ctx, hopper.DeadFilter{})
	fmt.Println(errors.Is(err, hopper.ErrInvalidFilter))
	n, _ := client.PurgeDeadJobs(ctx, hopper.DeadFilter{DiedBefore: time.Now().AddDate(0, 0, -30)})
	fmt.Println("purged", n)
	// Output:
	// retried 1
	// pending
	// true
	// purged 0
}

// Read the queue's counts by queue and kind, with totals.
func ExampleClient_GetStats() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	client := hopper.NewClient(pool)
	_, _ = remind.Enqueue(ctx, pool, Reminder{UserID: 1})
	_, _ = remind.Enqueue(ctx, pool, Reminder{UserID: 2}, jobs.Delay(time.Hour))

	stats, err := client.GetStats(ctx)
	if err != nil {
		panic(err)
	}
	for _, r := range stats.Rows {
		fmt.Println(r.Queue, r.Kind, "ready", r.Ready, "scheduled", r.Scheduled)
	}
	fmt.Println("live", stats.Total.Live())
	// Output:
	// reminders remind ready 1 scheduled 1
	// live 2
}

type Digest struct {
	Slot time.Time `json:"slot"`
}

var digest = jobs.MustDefine[Digest]("digest")

// Pause a periodic job, ask for one fire of it anyway, and resume it.
// Schedules are defined by workers (worker.Schedule); the client operates
// on the rows they keep.
func ExampleClient_TriggerSchedule() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx, stop := context.WithCancel(context.Background())
	client := hopper.NewClient(pool)

	w, _ := worker.New(pool, worker.Config{Queues: map[string]int{"default": 1}})
	_ = worker.Schedule(w, "digest", digest, "@every 1s", func(slot time.Time) Digest { return Digest{Slot: slot} })
	var triggeredAt time.Time
	_ = worker.Handle(w, digest, func(ctx context.Context, job *jobs.Job[Digest]) error {
		switch {
		case triggeredAt.IsZero(): // the first slot: pause the schedule, then ask for one fire
			if _, err := client.PauseSchedule(ctx, "digest"); err != nil {
				return err
			}
			at, err := client.TriggerSchedule(ctx, "digest")
			triggeredAt = at
			return err
		case job.Payload.Slot.Equal(triggeredAt): // the triggered fire: its slot is the trigger's time
			stop()
		}
		return nil
	})
	if err := w.Run(ctx); err != nil {
		panic(err)
	}

	ctx = context.Background()
	schedules, _ := client.ListSchedules(ctx)
	fmt.Println(schedules[0].Name, "paused:", schedules[0].PausedAt != nil)
	resumed, _ := client.ResumeSchedule(ctx, "digest") // at its next slot; missed ones do not fire
	fmt.Println("resumed a paused schedule:", resumed.Changed)
	_, err := client.TriggerSchedule(ctx, "no-such-schedule")
	fmt.Println(errors.Is(err, hopper.ErrUnknownSchedule))
	// Output:
	// digest paused: true
	// resumed a paused schedule: true
	// true
}
