package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// holdFor is a handler that records its run in the ledger under its key
// and takes d: long enough for runs of a key to meet, were they allowed to.
func holdFor(l *keyLedger, d time.Duration) func(context.Context, *jobs.Job[Task]) error {
	return func(ctx context.Context, j *jobs.Job[Task]) error {
		l.enter(j.ConcurrencyKey)
		defer l.leave(j.ConcurrencyKey)
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		return nil
	}
}

// TestKeyLimitTable: three workers of 10 slots share a queue whose
// KeyLimit is 1; hopper_key_limits gives key premium 4 and key gold 2. No
// key ever runs more jobs at once than its own limit, premium runs more
// than the queue's one at once, and every job runs, strict and fair.
func TestKeyLimitTable(t *testing.T) {
	for _, tc := range []struct {
		name string
		flow worker.FlowControl
	}{
		{"strict", worker.FlowControl{KeyLimit: 1}},
		{"fair", worker.FlowControl{KeyLimit: 1, Fair: true}},
		{"table only", worker.FlowControl{Fair: true}}, // no KeyLimit: the rows limit their keys, other keys run free
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			client := hopper.NewClient(b.Pool)
			require.NoError(t, client.SetKeyLimit(b.Ctx, "default", "premium", 4))
			require.NoError(t, client.SetKeyLimit(b.Ctx, "default", "gold", 2))
			keys := []string{"premium", "gold", "free-1", "free-2"}
			tiered := kind(t, "tiered", jobs.KeyBy(func(p Task) string { return keys[p.N%len(keys)] }))
			ledger := newKeyLedger()
			for i := range 3 {
				start(t, b, worker.Config{
					ID:          fmt.Sprintf("w%d", i),
					Queues:      map[string]int{"default": 10},
					FlowControl: map[string]worker.FlowControl{"default": tc.flow},
				}, func(w *worker.Worker) {
					require.NoError(t, worker.Handle(w, tiered, holdFor(ledger, 10*time.Millisecond)))
				})
			}
			items := make([]jobs.Item[Task], 160)
			for i := range items {
				items[i] = jobs.Item[Task]{Payload: Task{N: i}}
			}
			_, err := tiered.EnqueueMany(b.Ctx, b.Pool, items)
			require.NoError(t, err)
			testdb.WaitFor(t, "every job to run", func() bool { return ledger.finished() == len(items) })
			most := ledger.mostByKey()
			require.LessOrEqual(t, most["premium"], 4)
			require.Greater(t, most["premium"], 1, "premium's row raises it over the queue's limit")
			require.LessOrEqual(t, most["gold"], 2)
			if tc.flow.KeyLimit == 1 {
				require.Equal(t, 1, most["free-1"])
				require.Equal(t, 1, most["free-2"])
			}
		})
	}
}

// TestKeyLimitChangesAtRunTime: a key's limit set, raised and removed
// while the workers run holds from their next claim: one run at the
// queue's limit, three once its row says 3, and one again once the row
// is gone.
func TestKeyLimitChangesAtRunTime(t *testing.T) {
	b := setup(t)
	client := hopper.NewClient(b.Pool)
	k := kind(t, "changing")
	var mu sync.Mutex
	running := 0
	gates := make(chan chan struct{}, 100)
	start(t, b, worker.Config{
		Queues:      map[string]int{"default": 10},
		FlowControl: map[string]worker.FlowControl{"default": {KeyLimit: 1}},
	}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, _ *jobs.Job[Task]) error {
			gate := make(chan struct{})
			mu.Lock()
			running++
			mu.Unlock()
			gates <- gate
			select {
			case <-gate:
			case <-ctx.Done():
			}
			mu.Lock()
			running--
			mu.Unlock()
			return nil
		}))
	})
	runningNow := func() int {
		mu.Lock()
		defer mu.Unlock()
		return running
	}
	for i := range 8 {
		_, err := k.Enqueue(b.Ctx, b.Pool, Task{N: i}, jobs.ConcurrencyKey("tenant"))
		require.NoError(t, err)
	}
	testdb.WaitFor(t, "one run, the queue's limit", func() bool { return runningNow() == 1 })

	require.NoError(t, client.SetKeyLimit(b.Ctx, "default", "tenant", 3))
	// A claim comes on the next poll: the row lets two more run.
	testdb.WaitFor(t, "three runs, the row's limit", func() bool { return runningNow() == 3 })
	limits, err := client.ListKeyLimits(b.Ctx, "default", 0)
	require.NoError(t, err)
	require.Len(t, limits, 1)
	require.Equal(t, hopper.KeyLimit{Queue: "default", Key: "tenant", MaxRunning: 3, UpdatedAt: limits[0].UpdatedAt, Running: 3}, limits[0])

	had, err := client.DeleteKeyLimit(b.Ctx, "default", "tenant")
	require.NoError(t, err)
	require.True(t, had)
	// Two runs end: with the row gone, the key is at the queue's limit
	// with the one left, and no other run starts until it ends.
	(<-gates) <- struct{}{}
	(<-gates) <- struct{}{}
	testdb.WaitFor(t, "two runs to end", func() bool { return runningNow() == 1 })
	var pending int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT count(*) FROM hopper_jobs WHERE state = 'pending'").Scan(&pending))
	require.Equal(t, 5, pending, "no run started beyond the queue's limit")
	(<-gates) <- struct{}{}
	for range 5 {
		testdb.WaitFor(t, "the next run alone", func() bool { return len(gates) == 1 && runningNow() == 1 })
		(<-gates) <- struct{}{}
	}
}

// TestSharedLimitAcrossWorkers: kinds mail_a (queue a) and mail_b (queue
// b) share the limit smtp of 3; one worker runs only mail_a, another only
// mail_b, a third both, 10 slots per queue each. Never more than 3 runs of
// the two kinds at once, across the queues and workers; a kind outside
// the limit runs beside them freely; every job runs.
func TestSharedLimitAcrossWorkers(t *testing.T) {
	b := setup(t)
	mailA := kind(t, "mail_a", jobs.Defaults(jobs.Queue("a")))
	mailB := kind(t, "mail_b", jobs.Defaults(jobs.Queue("b")))
	other := kind(t, "other", jobs.Defaults(jobs.Queue("a")))
	smtp, others := newKeyLedger(), newKeyLedger()
	run := func(l *keyLedger) func(context.Context, *jobs.Job[Task]) error {
		h := holdFor(l, 10*time.Millisecond)
		return func(ctx context.Context, j *jobs.Job[Task]) error {
			j.ConcurrencyKey = "all" // one count for every run of the ledger
			return h(ctx, j)
		}
	}
	limit := worker.SharedLimit("smtp", 3)
	queues := map[string]int{"a": 10, "b": 10}
	start(t, b, worker.Config{ID: "only-a", Queues: queues}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, mailA, run(smtp), limit))
		require.NoError(t, worker.Handle(w, other, run(others)))
	})
	start(t, b, worker.Config{ID: "only-b", Queues: queues}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, mailB, run(smtp), limit))
	})
	start(t, b, worker.Config{ID: "both", Queues: queues}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, mailA, run(smtp), limit))
		require.NoError(t, worker.Handle(w, mailB, run(smtp), limit))
		require.NoError(t, worker.Handle(w, other, run(others)))
	})
	items := make([]jobs.Item[Task], 60)
	for i := range items {
		items[i] = jobs.Item[Task]{Payload: Task{N: i}}
	}
	for _, k := range []*jobs.Kind[Task]{mailA, mailB, other} {
		_, err := k.EnqueueMany(b.Ctx, b.Pool, items)
		require.NoError(t, err)
	}
	testdb.WaitFor(t, "every job to run", func() bool { return smtp.finished() == 120 && others.finished() == 60 })
	require.LessOrEqual(t, smtp.mostByKey()["all"], 3)
	require.Greater(t, others.mostByKey()["all"], 3, "a kind outside the limit is not held to it")
}

// TestSharedLimitRejectsBadInput: a shared limit's name and size are
// checked by Handle, and one name has one size.
func TestSharedLimitRejectsBadInput(t *testing.T) {
	b := setup(t)
	for _, tc := range []struct {
		name string
		opt  worker.HandleOption
		want string
	}{
		{"empty name", worker.SharedLimit("", 3), "shared limit name"},
		{"zero", worker.SharedLimit("smtp", 0), "outside 1 to"},
		{"too many", worker.SharedLimit("smtp", worker.MaxSharedLimit+1), "outside 1 to"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := worker.New(b.Pool, worker.Config{})
			require.NoError(t, err)
			err = worker.Handle(w, kind(t, "k"), func(context.Context, *jobs.Job[Task]) error { return nil }, tc.opt)
			require.ErrorIs(t, err, worker.ErrInvalidConfig)
			require.ErrorContains(t, err, tc.want)
		})
	}
	w, err := worker.New(b.Pool, worker.Config{})
	require.NoError(t, err)
	nop := func(context.Context, *jobs.Job[Task]) error { return nil }
	require.NoError(t, worker.Handle(w, kind(t, "x"), nop, worker.SharedLimit("smtp", 3)))
	err = worker.Handle(w, kind(t, "y"), nop, worker.SharedLimit("smtp", 4))
	require.ErrorIs(t, err, worker.ErrInvalidConfig)
	require.ErrorContains(t, err, `shared limit "smtp" is 3 for x, not 4`)
}
