package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// TestDurableRecordLimitsAsStored: a step's result is measured as the
// table measures it, jsonb's text. Go's JSON of 25,000 ones is 50,001
// bytes, jsonb's 75,000: the table refused it (23514) as a retryable
// error and the step's function ran on every attempt. 15,000 '<' are
// 90,002 bytes as Go escapes them, 15,002 stored: refused by Go, though
// the table takes them. A NUL character, legal in Go, jsonb cannot hold
// (22P05): retried too. Each case runs with three attempts: the
// function runs once, and the job ends done or dead with the documented
// error.
func TestDurableRecordLimitsAsStored(t *testing.T) {
	ones := make([]int, 25_000)
	for i := range ones {
		ones[i] = 1
	}
	for _, tc := range []struct {
		name    string
		result  any
		wantErr error // nil: recorded, the job done
	}{
		{"under 64 KiB as Go's JSON, over it as stored", ones, worker.ErrRecordTooLarge},
		{"over 64 KiB as Go's JSON, under it as stored", strings.Repeat("<", 15_000), nil},
		{"a NUL character", "a\x00b", worker.ErrInvalidRecord},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			k := kind(t, "durable_limits")
			res, err := k.Enqueue(b.Ctx, b.Pool, Task{}, jobs.MaxAttempts(3))
			require.NoError(t, err)
			var calls atomic.Int32
			errs := make(chan error, 3)
			start(t, b, worker.Config{}, func(w *worker.Worker) {
				require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
					_, err := worker.Step(ctx, j, "charge", func(context.Context) (any, error) {
						calls.Add(1)
						return tc.result, nil
					})
					errs <- err
					return err
				}))
			})
			err = <-errs
			if tc.wantErr == nil {
				require.NoError(t, err)
				testdb.WaitFor(t, "the job done", func() bool { return b.jobState(t, res.ID) == "gone" })
				_, dead := b.Totals(t)
				require.Zero(t, dead)
			} else {
				require.ErrorIs(t, err, tc.wantErr)
				testdb.WaitFor(t, "the job dead", func() bool { _, dead := b.Totals(t); return dead == 1 })
			}
			require.EqualValues(t, 1, calls.Load(), "the step's function ran once")
		})
	}
}

// TestDurableProgressLimitsAsStored: SetProgress measures as the table
// does too, and refuses what jsonb cannot hold before sending it.
func TestDurableProgressLimitsAsStored(t *testing.T) {
	b := setup(t)
	k := kind(t, "durable_progress_limits")
	_, err := k.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	errs := make(chan [3]error, 1)
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			errs <- [3]error{
				worker.SetProgress(ctx, j, strings.Repeat("&", 1_000)), // 6,002 bytes as Go's JSON, 1,002 stored
				worker.SetProgress(ctx, j, make([]int, 1_500)),         // 3,001 as Go's, 4,501 stored
				worker.SetProgress(ctx, j, "\x00"),
			}
			return nil
		}))
	})
	got := <-errs
	require.NoError(t, got[0])
	require.ErrorIs(t, got[1], worker.ErrRecordTooLarge)
	require.ErrorIs(t, got[2], worker.ErrInvalidRecord)
}

// TestDurableStepRecordedAfterItsDeadline: a step whose function returns
// as its run's timeout cancels the handler's context still records its
// result (the record outlives the handler's context while the claim is
// held): the next run replays it and the function ran once. The record
// was written with the handler's context and failed ("context deadline
// exceeded"): the charge ran on every attempt.
func TestDurableStepRecordedAfterItsDeadline(t *testing.T) {
	b := setup(t)
	k := kind(t, "durable_deadline")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{}, jobs.MaxAttempts(3))
	require.NoError(t, err)
	var charges, runs atomic.Int32
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			runs.Add(1)
			v, err := worker.Step(ctx, j, "charge", func(ctx context.Context) (int, error) {
				charges.Add(1)
				<-ctx.Done() // the charge's reply comes as the deadline passes
				return 42, nil
			})
			if err != nil {
				return err
			}
			if v != 42 {
				return worker.Permanent(errors.New("a wrong replay"))
			}
			return ctx.Err() // the first run ends by its timeout; the replay returns at once
		}, worker.Timeout(200*time.Millisecond)))
	})
	testdb.WaitFor(t, "the job done", func() bool { return b.jobState(t, res.ID) == "gone" })
	_, dead := b.Totals(t)
	require.Zero(t, dead)
	require.EqualValues(t, 1, charges.Load(), "the charge ran once")
	require.EqualValues(t, 2, runs.Load(), "the second run replayed it")
}

// TestDurableNamesInCharacters: a step's or an event's name is at most
// MaxStepName characters, as the tables and EmitEvent count, not bytes: a
// 200-character name of two-byte letters is awaited and received.
func TestDurableNamesInCharacters(t *testing.T) {
	b := setup(t)
	k := kind(t, "durable_names")
	name := strings.Repeat("é", 200)
	got := make(chan error, 1)
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			if _, err := worker.Step(ctx, j, name, func(context.Context) (int, error) { return 1, nil }); err != nil {
				got <- err
				return worker.Permanent(err)
			}
			_, err := worker.AwaitEvent[int](ctx, j, name, time.Hour)
			if errors.Is(err, worker.ErrSuspended) {
				return err
			}
			got <- err
			return err
		}))
	})
	_, err := b.Pool.Exec(b.Ctx, `SELECT hopper_emit_event($1, '7')`, name)
	require.NoError(t, err)
	_, err = k.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	require.NoError(t, <-got)
	_, err = worker.AwaitEvent[int](context.Background(), &jobs.Job[Task]{}, strings.Repeat("é", worker.MaxStepName+1), time.Hour)
	require.ErrorIs(t, err, worker.ErrInvalidDurableCall)
}

// enqueueAtMetaLimit enqueues a job of k through hopper_enqueue with the
// largest metadata it accepts: one byte more is refused (it measures as
// Go's enqueue does, which bounds jobs.MaxMetaBytes as stored).
func enqueueAtMetaLimit(t *testing.T, b *bundle, k *jobs.Kind[Task]) int64 {
	t.Helper()
	for pad := jobs.MaxMetaBytes - len(`{"k": ""}`); pad > 0; pad-- {
		meta := `{"k": "` + strings.Repeat("x", pad) + `"}`
		var id int64
		err := b.Pool.QueryRow(b.Ctx, `SELECT id FROM hopper_enqueue(kind => $1, payload => '{}', meta => $2::jsonb)`,
			k.Name(), meta).Scan(&id)
		if err != nil {
			require.ErrorContains(t, err, "over the limit of 8192")
			continue
		}
		var stored int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT octet_length(meta::text) FROM hopper_jobs WHERE id = $1`, id).Scan(&stored))
		require.GreaterOrEqual(t, stored, jobs.MaxMetaBytes-2, "at the limit")
		return id
	}
	t.Fatal("no metadata accepted")
	return 0
}

// TestDurableAtTheMetaLimit: a job whose metadata is exactly at
// jobs.MaxMetaBytes records steps and progress, sleeps uncharged and
// completes: Hopper's own keys ('hopper.durable', 'hopper.uncharged')
// have room in the table (migration 28). The table's check was at the
// same 8,192 bytes: every record failed it, the step ran again on each
// attempt, and the job died.
func TestDurableAtTheMetaLimit(t *testing.T) {
	b := setup(t)
	k := kind(t, "durable_meta_limit")
	id := enqueueAtMetaLimit(t, b, k)
	var calls atomic.Int32
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			if _, err := worker.Step(ctx, j, "charge", func(context.Context) (int, error) { calls.Add(1); return 1, nil }); err != nil {
				return err
			}
			if err := worker.SetProgress(ctx, j, 50); err != nil {
				return err
			}
			return worker.Sleep(ctx, j, "nap", 10*time.Millisecond)
		}))
	})
	testdb.WaitFor(t, "the job done", func() bool { return b.jobState(t, id) == "gone" })
	_, dead := b.Totals(t)
	require.Zero(t, dead)
	require.EqualValues(t, 1, calls.Load())
}

// TestDurableCallAfterADroppedSuspension: a handler that drops Sleep's
// error and calls Step gets an error that wraps ErrSuspended (the call's
// position holds the sleep's record), and the job suspends and runs on
// after the sleep. It died with ErrNonDeterministic.
func TestDurableCallAfterADroppedSuspension(t *testing.T) {
	b := setup(t)
	k := kind(t, "durable_dropped_then_step")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	errs := make(chan error, 4)
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			_ = worker.Sleep(ctx, j, "nap", 50*time.Millisecond)
			_, err := worker.Step(ctx, j, "after", func(context.Context) (int, error) { return 1, nil })
			errs <- err
			return err
		}))
	})
	require.ErrorIs(t, <-errs, worker.ErrSuspended)
	require.NoError(t, <-errs, "after the sleep, the step runs")
	testdb.WaitFor(t, "the job done", func() bool { return b.jobState(t, res.ID) == "gone" })
	_, dead := b.Totals(t)
	require.Zero(t, dead)
}

// TestDurableEventAfterItsDeadline: a job that runs only after its wait's
// deadline (its worker was away) times out, even though the event was
// emitted meanwhile, after the deadline. It received the event.
func TestDurableEventAfterItsDeadline(t *testing.T) {
	b := setup(t)
	k := kind(t, "durable_event_late")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	got := make(chan error, 2)
	handler := func(ctx context.Context, j *jobs.Job[Task]) error {
		_, err := worker.AwaitEvent[int](ctx, j, "late-event", 200*time.Millisecond)
		if errors.Is(err, worker.ErrSuspended) {
			return err
		}
		got <- err
		return nil
	}
	r := start(t, b, worker.Config{}, func(w *worker.Worker) { require.NoError(t, worker.Handle(w, k, handler)) })
	testdb.WaitFor(t, "the job waiting", func() bool { return b.jobState(t, res.ID) == "scheduled" && b.records(t, res.ID) == 1 })
	r.stop()
	var passed bool
	for !passed { // the deadline passes by the server's clock
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT until < now() FROM hopper_job_steps WHERE job_id = $1`, res.ID).Scan(&passed))
		time.Sleep(20 * time.Millisecond)
	}
	_, err = b.Pool.Exec(b.Ctx, `SELECT hopper_emit_event('late-event', '7')`)
	require.NoError(t, err)
	start(t, b, worker.Config{}, func(w *worker.Worker) { require.NoError(t, worker.Handle(w, k, handler)) })
	require.ErrorIs(t, <-got, worker.ErrEventTimeout)
}

// TestDurableEventKeptForTheJobItWoke: an event that woke a job is kept
// by the pruner until the job has read it, however old (a paused queue, a
// backlog): the job receives the payload. It was pruned, and the job
// waited again for an event already emitted.
func TestDurableEventKeptForTheJobItWoke(t *testing.T) {
	b := setup(t)
	k := kind(t, "durable_event_pruned")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	got := make(chan int, 1)
	handler := func(ctx context.Context, j *jobs.Job[Task]) error {
		v, err := worker.AwaitEvent[int](ctx, j, "kept-event", time.Hour)
		if err != nil {
			return err
		}
		got <- v
		return nil
	}
	r := start(t, b, worker.Config{}, func(w *worker.Worker) { require.NoError(t, worker.Handle(w, k, handler)) })
	testdb.WaitFor(t, "the job waiting", func() bool { return b.jobState(t, res.ID) == "scheduled" && b.records(t, res.ID) == 1 })
	r.stop()
	_, err = b.Pool.Exec(b.Ctx, `SELECT hopper_emit_event('kept-event', '7')`)
	require.NoError(t, err)
	// Long past any retention by the time the job runs.
	_, err = b.Pool.Exec(b.Ctx, `UPDATE hopper_events SET emitted_at = now() - interval '30 days', created_at = now() - interval '30 days'`)
	require.NoError(t, err)
	pruned, err := b.Queries.PruneEvents(b.Ctx, db.PruneEventsParams{KeepMs: 0, MaxEvents: 100})
	require.NoError(t, err)
	require.Zero(t, pruned, "the woken job has not read it")
	start(t, b, worker.Config{}, func(w *worker.Worker) { require.NoError(t, worker.Handle(w, k, handler)) })
	require.Equal(t, 7, <-got)
	testdb.WaitFor(t, "the job done", func() bool { return b.jobState(t, res.ID) == "gone" })
	// Read, it goes: by this prune, or by the running worker's pruner
	// first (it is older than any retention).
	_, err = b.Queries.PruneEvents(b.Ctx, db.PruneEventsParams{KeepMs: 0, MaxEvents: 100})
	require.NoError(t, err)
	var left int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT count(*) FROM hopper_events WHERE name = 'kept-event'`).Scan(&left))
	require.Zero(t, left, "read: it goes")
}

// TestDurableInvalidCallIsPermanent: a durable call with bad arguments
// fails the job at once, naming every problem of the call; it was retried
// with backoff on every attempt.
func TestDurableInvalidCallIsPermanent(t *testing.T) {
	b := setup(t)
	k := kind(t, "durable_invalid_call")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{}, jobs.MaxAttempts(5))
	require.NoError(t, err)
	var runs atomic.Int32
	errs := make(chan error, 5)
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			runs.Add(1)
			_, err := worker.AwaitEvent[int](ctx, j, "", 0)
			errs <- err
			return err
		}))
	})
	err = <-errs
	require.ErrorIs(t, err, worker.ErrInvalidDurableCall)
	require.ErrorContains(t, err, "timeout 0s")
	require.ErrorContains(t, err, `name ""`)
	testdb.WaitFor(t, "the job dead", func() bool { _, dead := b.Totals(t); return dead == 1 })
	require.EqualValues(t, 1, runs.Load(), "not retried")
	_ = res
}

// TestDurableEventReEmittedAfterItWoke: an emit wakes a waiting job
// before its deadline; the job runs only after the deadline (its worker
// was away), by when the name was emitted again: the job received it in
// time, and gets the newest payload.
func TestDurableEventReEmittedAfterItWoke(t *testing.T) {
	b := setup(t)
	k := kind(t, "durable_event_again")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	got := make(chan int, 1)
	handler := func(ctx context.Context, j *jobs.Job[Task]) error {
		v, err := worker.AwaitEvent[int](ctx, j, "again-event", time.Hour)
		if err != nil && !errors.Is(err, worker.ErrEventTimeout) {
			return err
		}
		got <- v // 0: timed out
		return nil
	}
	r := start(t, b, worker.Config{}, func(w *worker.Worker) { require.NoError(t, worker.Handle(w, k, handler)) })
	testdb.WaitFor(t, "the job waiting", func() bool { return b.jobState(t, res.ID) == "scheduled" && b.records(t, res.ID) == 1 })
	r.stop()
	_, err = b.Pool.Exec(b.Ctx, `SELECT hopper_emit_event('again-event', '1')`)
	require.NoError(t, err)
	require.Equal(t, "pending", b.jobState(t, res.ID), "woken before its deadline")
	// The deadline passes while the worker is away: moved to just after
	// the wake-up rather than waited for, so that a loaded machine cannot
	// let it pass before the first emit.
	_, err = b.Pool.Exec(b.Ctx, `UPDATE hopper_job_steps SET until = (SELECT run_at FROM hopper_jobs WHERE id = $1) + interval '1 millisecond' WHERE job_id = $1`, res.ID)
	require.NoError(t, err)
	var passed bool
	for !passed {
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT until < now() FROM hopper_job_steps WHERE job_id = $1`, res.ID).Scan(&passed))
		time.Sleep(20 * time.Millisecond)
	}
	_, err = b.Pool.Exec(b.Ctx, `SELECT hopper_emit_event('again-event', '2')`)
	require.NoError(t, err)
	start(t, b, worker.Config{}, func(w *worker.Worker) { require.NoError(t, worker.Handle(w, k, handler)) })
	require.Equal(t, 2, <-got)
}

// TestDurableEventNamesAreSchemaWide states the events' model as
// docs/durable.md gives it: a name is the schema's, not a kind's (one
// emit wakes the waiting jobs of every kind); an emit of a name again
// replaces its payload for jobs that have not received it, while a job
// that received it keeps what it got (its record); and a job that awaits
// a name already emitted, within the retention, receives the last
// payload at once, however old: the reason to name each occurrence.
func TestDurableEventNamesAreSchemaWide(t *testing.T) {
	b := setup(t)
	ka, kb := kind(t, "durable_event_wide_a"), kind(t, "durable_event_wide_b")
	got := make(chan string, 4)
	handler := func(ctx context.Context, j *jobs.Job[Task]) error {
		v, err := worker.AwaitEvent[int](ctx, j, "order-ready", time.Hour)
		if err != nil {
			return err
		}
		got <- fmt.Sprintf("%s %d: %d", j.Kind, j.Payload.N, v)
		return nil
	}
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, ka, handler))
		require.NoError(t, worker.Handle(w, kb, handler))
	})
	a, err := ka.Enqueue(b.Ctx, b.Pool, Task{N: 1})
	require.NoError(t, err)
	bb, err := kb.Enqueue(b.Ctx, b.Pool, Task{N: 2})
	require.NoError(t, err)
	for _, id := range []int64{a.ID, bb.ID} {
		testdb.WaitFor(t, "both jobs waiting", func() bool { return b.jobState(t, id) == "scheduled" && b.records(t, id) == 1 })
	}
	var woken int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT hopper_emit_event('order-ready', '1')`).Scan(&woken))
	require.Equal(t, 2, woken, "one emit wakes the jobs of both kinds")
	require.ElementsMatch(t, []string{"durable_event_wide_a 1: 1", "durable_event_wide_b 2: 1"}, []string{<-got, <-got})

	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT hopper_emit_event('order-ready', '2')`).Scan(&woken))
	require.Zero(t, woken, "the jobs that received the event wait no more")
	late, err := ka.Enqueue(b.Ctx, b.Pool, Task{N: 3})
	require.NoError(t, err)
	require.Equal(t, "durable_event_wide_a 3: 2", <-got, "a name reused later delivers its last payload at once")
	testdb.WaitFor(t, "the late job ended", func() bool { return b.jobState(t, late.ID) == "gone" })
}

// TestDurableDeadlinesOnTheServersClock: a sleep's and a wait's deadline
// is the server's now() plus the duration, computed by the statement that
// records it (until - created_at is the duration exactly, both from one
// now()), so a worker whose clock is off by seconds neither wakes early
// and suspends again nor wakes late. A deadline computed from the
// worker's clock would differ from the record's created_at by the round
// trip and by the clocks' offset.
func TestDurableDeadlinesOnTheServersClock(t *testing.T) {
	b := setup(t)
	k := kind(t, "durable_server_clock")
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			if j.Payload.N == 1 {
				return worker.Sleep(ctx, j, "nap", 90*time.Minute)
			}
			_, err := worker.AwaitEvent[int](ctx, j, "clock-event", 2*time.Hour)
			return err
		}))
	})
	sleeper, err := k.Enqueue(b.Ctx, b.Pool, Task{N: 1})
	require.NoError(t, err)
	waiter, err := k.Enqueue(b.Ctx, b.Pool, Task{N: 2})
	require.NoError(t, err)
	for id, want := range map[int64]time.Duration{sleeper.ID: 90 * time.Minute, waiter.ID: 2 * time.Hour} {
		testdb.WaitFor(t, "the job suspended", func() bool { return b.jobState(t, id) == "scheduled" && b.records(t, id) == 1 })
		var exact bool
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT until - created_at = $2::interval FROM hopper_job_steps WHERE job_id = $1`,
			id, want).Scan(&exact))
		require.True(t, exact, "job %d: until is the server's now() + %v", id, want)
	}
}
