package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// TestJobsBehindTheCursorRun: a queue claims from just past the last job it
// claimed, so a job that becomes ready before that place must move the
// cursor back through its wake-up. The full scan is an hour away here, so
// each case fails (the job never runs) if the wake-up does not.
func TestJobsBehindTheCursorRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before enqueues the jobs that run first; after makes the job that
		// must run next become ready behind them (the cursor is at cursor,
		// the run_at of the last job claimed), and returns its id.
		before func(t *testing.T, b *bundle, k *jobs.Kind[Task]) (after func(cursor time.Time) int64)
	}{
		{
			name: "an enqueue that commits after later jobs ran",
			before: func(t *testing.T, b *bundle, k *jobs.Kind[Task]) func(time.Time) int64 {
				tx, err := b.Pool.Begin(b.Ctx)
				require.NoError(t, err)
				t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
				late, err := k.Enqueue(b.Ctx, tx, Task{N: -1}) // run_at: the transaction's start
				require.NoError(t, err)
				enqueueMany(t, b, k, 20)
				return func(time.Time) int64 {
					require.NoError(t, tx.Commit(b.Ctx))
					return late.ID
				}
			},
		},
		{
			name: "a more urgent job after less urgent ones ran",
			before: func(t *testing.T, b *bundle, k *jobs.Kind[Task]) func(time.Time) int64 {
				enqueueMany(t, b, k, 20, jobs.Priority(5))
				return func(time.Time) int64 {
					urgent, err := k.Enqueue(b.Ctx, b.Pool, Task{N: -1}, jobs.Priority(0))
					require.NoError(t, err)
					return urgent.ID
				}
			},
		},
		{
			name: "a promoted job due before later jobs ran",
			before: func(t *testing.T, b *bundle, k *jobs.Kind[Task]) func(time.Time) int64 {
				due, err := k.Enqueue(b.Ctx, b.Pool, Task{N: -1}, jobs.Delay(time.Hour))
				require.NoError(t, err)
				enqueueMany(t, b, k, 20)
				return func(cursor time.Time) int64 {
					// Due just before the last job claimed: behind the
					// cursor, and recent enough for the next promotion,
					// which only looks back to shortly before the last
					// one (a full pass comes every minute). The worker's
					// promotion wakes the queue.
					_, err := b.Pool.Exec(b.Ctx, "UPDATE hopper_jobs SET run_at = $2 WHERE id = $1", due.ID, cursor.Add(-time.Microsecond))
					require.NoError(t, err)
					return due.ID
				}
			},
		},
	} {
		for _, limited := range []bool{false, true} {
			name := tc.name
			cfg := worker.Config{FullScanInterval: time.Hour, Queues: map[string]int{"default": 4}}
			if limited { // DequeueLimited's cursor
				name += ", under a key limit"
				cfg.FlowControl = map[string]worker.FlowControl{"default": {KeyLimit: 5}}
			}
			t.Run(name, func(t *testing.T) { jobBehindTheCursorRuns(t, cfg, tc.before) })
		}
	}
}

// jobBehindTheCursorRuns runs one case of TestJobsBehindTheCursorRun on a
// worker configured by cfg.
func jobBehindTheCursorRuns(t *testing.T, cfg worker.Config, before func(t *testing.T, b *bundle, k *jobs.Kind[Task]) (after func(cursor time.Time) int64)) {
	b := setup(t)
	k := kind(t, "cursor")
	ran := newRanSet()
	r := start(t, b, cfg, func(w *worker.Worker) { require.NoError(t, worker.Handle(w, k, ran.handler)) })
	testdb.WaitFor(t, "the wake-up listener", func() bool { return worker.Listening(r.w) })

	after := before(t, b, k)
	testdb.WaitFor(t, "the first jobs run", func() bool { return ran.count() >= 20 })
	p, cursor, _ := worker.CursorAt(r.w, "default")
	require.GreaterOrEqual(t, p, int16(0), "the queue claims from its cursor")

	id := after(cursor)
	testdb.WaitFor(t, "the job behind the cursor runs", func() bool { return ran.has(id) })
}

// TestFullScanFindsWhatNoWakeUpAnnounced: a row made ready by hand sends
// no wake-up; the periodic scan from the start finds it.
func TestFullScanFindsWhatNoWakeUpAnnounced(t *testing.T) {
	b := setup(t)
	k := kind(t, "cursor")
	ran := newRanSet()
	r := start(t, b, worker.Config{FullScanInterval: 100 * time.Millisecond},
		func(w *worker.Worker) { require.NoError(t, worker.Handle(w, k, ran.handler)) })
	testdb.WaitFor(t, "the wake-up listener", func() bool { return worker.Listening(r.w) })
	enqueueMany(t, b, k, 5)
	testdb.WaitFor(t, "the first jobs run", func() bool { return ran.count() >= 5 })

	hidden, err := k.Enqueue(b.Ctx, b.Pool, Task{N: -1}, jobs.Delay(time.Hour))
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, "UPDATE hopper_jobs SET state = 'pending', run_at = now() - interval '1 hour' WHERE id = $1", hidden.ID)
	require.NoError(t, err)
	testdb.WaitFor(t, "the job made ready by hand runs", func() bool { return ran.has(hidden.ID) })
}

func enqueueMany(t *testing.T, b *bundle, k *jobs.Kind[Task], n int, opts ...jobs.EnqueueOption) {
	t.Helper()
	for i := range n {
		_, err := k.Enqueue(b.Ctx, b.Pool, Task{N: i}, opts...)
		require.NoError(t, err)
	}
}

// ranSet records the ids of the jobs a handler ran.
type ranSet struct {
	mu  sync.Mutex
	ids map[int64]bool
}

func newRanSet() *ranSet { return &ranSet{ids: map[int64]bool{}} }

func (s *ranSet) handler(_ context.Context, j *jobs.Job[Task]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids[j.ID] = true
	return nil
}

func (s *ranSet) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

func (s *ranSet) has(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[id]
}
