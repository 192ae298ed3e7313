package hopper_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

type receipt struct {
	Sent string `json:"sent"`
}

// waitResult runs WaitJob for id in a goroutine, before any worker runs.
func (b *bundle) waitJob(id int64) <-chan jobs.Row {
	out := make(chan jobs.Row, 1)
	go func() {
		row, err := b.client.WaitJob(b.Ctx, id)
		if err != nil {
			row = jobs.Row{ID: -1, Reason: err.Error()}
		}
		out <- row
	}()
	return out
}

// waitMarked waits until the job carries WaitJob's mark, so the waiter is
// listening before the worker starts.
func (b *bundle) waitMarked(t *testing.T, id int64) {
	t.Helper()
	testdb.WaitFor(t, "job marked awaited", func() bool {
		row, err := b.client.GetJob(b.Ctx, id)
		require.NoError(t, err)
		_, ok := row.Meta["hopper.awaited"]
		return ok
	})
}

// TestWaitJob: WaitJob returns a job as it ended, woken by its end:
// completed with its result when kept, completed with only its id when
// not (whether it ended before or after the wait began), dead with its
// reason. An id no job was ever given is ErrNotFound.
func TestWaitJob(t *testing.T) {
	b := setup(t)
	kept := b.enqueue(t, email, "kept@example.com")
	gone := b.enqueue(t, report, "gone@example.com")
	dead := b.enqueue(t, report, "dead@example.com", jobs.MaxAttempts(1))
	waits := map[int64]<-chan jobs.Row{kept: b.waitJob(kept), gone: b.waitJob(gone), dead: b.waitJob(dead)}
	for id := range waits {
		b.waitMarked(t, id)
	}
	var got map[int64]jobs.Row = map[int64]jobs.Row{}
	b.runUntil(t, worker.Config{Queues: map[string]int{"mail": 2, "default": 2}}, func(w *worker.Worker) {
		require.NoError(t, worker.HandleWithResult(w, email, func(_ context.Context, j *jobs.Job[Email]) (receipt, error) {
			return receipt{Sent: j.Payload.To}, nil
		}, worker.KeepHistory(time.Hour)))
		require.NoError(t, worker.Handle(w, report, func(_ context.Context, j *jobs.Job[Email]) error {
			if j.ID == dead {
				return errors.New("no such report")
			}
			return nil
		}))
	}, "every wait returned", func() bool {
		for id, c := range waits {
			select {
			case row := <-c:
				got[id] = row
			default:
			}
		}
		return len(got) == 3
	})
	require.Equal(t, jobs.StateCompleted, got[kept].State)
	require.JSONEq(t, `{"sent": "kept@example.com"}`, string(got[kept].Result))
	require.Equal(t, jobs.Row{ID: gone, State: jobs.StateCompleted}, got[gone], "without history only the end is known")
	require.Equal(t, jobs.StateDead, got[dead].State)

	r, err := hopper.WaitJobResult[receipt](b.Ctx, b.client, kept)
	require.NoError(t, err, "an ended job returns at once")
	require.Equal(t, "kept@example.com", r.Sent)
	_, err = hopper.WaitJobResult[receipt](b.Ctx, b.client, dead)
	require.ErrorIs(t, err, hopper.ErrJobFailed)
	row, err := b.client.WaitJob(b.Ctx, gone)
	require.NoError(t, err, "a job that ended without history before the wait began")
	require.Equal(t, jobs.Row{ID: gone, State: jobs.StateCompleted}, row, "the same answer as when the wait began first")
	for _, never := range []int64{999999, 0, -1} {
		_, err = b.client.WaitJob(b.Ctx, never)
		require.ErrorIs(t, err, hopper.ErrNotFound, "no job was ever given id %d", never)
	}

	ctx, cancel := context.WithTimeout(b.Ctx, 50*time.Millisecond)
	defer cancel()
	live := b.enqueue(t, report, "never@example.com")
	_, err = b.client.WaitJob(ctx, live)
	require.ErrorIs(t, err, context.DeadlineExceeded, "a context deadline ends the wait")
}

// TestWaitJobNeedsAPool: a Client on a transaction cannot listen.
func TestWaitJobNeedsAPool(t *testing.T) {
	b := setup(t)
	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.Ctx) }()
	_, err = hopper.NewClient(tx).WaitJob(b.Ctx, 1)
	require.ErrorIs(t, err, hopper.ErrWaitUnsupported)
}

// TestEmitEventAndWakeJob: EmitEvent validates its input and wakes a job
// awaiting the event; WakeJob ends a sleep at once, and says when a job
// is in no wait. The records and the suspension are readable meanwhile.
func TestEmitEventAndWakeJob(t *testing.T) {
	b := setup(t)
	_, err := b.client.EmitEvent(b.Ctx, "", nil)
	require.ErrorIs(t, err, hopper.ErrInvalidEvent)
	_, err = b.client.EmitEvent(b.Ctx, "big", make([]byte, hopper.MaxEventPayload))
	require.ErrorIs(t, err, hopper.ErrInvalidEvent)
	_, err = b.client.EmitEvent(b.Ctx, "bad", func() {})
	require.ErrorIs(t, err, hopper.ErrInvalidEvent)

	sleeper := b.enqueue(t, report, "sleeper")
	waiter := b.enqueue(t, email, "waiter")
	wakes := map[int64]<-chan jobs.Row{sleeper: b.waitJob(sleeper), waiter: b.waitJob(waiter)}
	b.waitMarked(t, sleeper)
	b.waitMarked(t, waiter)
	got := map[int64]jobs.Row{}
	scheduled := func(id int64) bool { // a job gone meanwhile is not
		row, err := b.client.GetJob(b.Ctx, id)
		return err == nil && row.State == jobs.StateScheduled
	}
	b.runUntil(t, worker.Config{Queues: map[string]int{"mail": 2, "default": 2}}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, report, func(ctx context.Context, j *jobs.Job[Email]) error {
			return worker.Sleep(ctx, j, "a week", 7*24*time.Hour)
		}))
		require.NoError(t, worker.HandleWithResult(w, email, func(ctx context.Context, j *jobs.Job[Email]) (receipt, error) {
			p, err := worker.AwaitEvent[receipt](ctx, j, "confirmed", 24*time.Hour)
			return p, err
		}, worker.KeepHistory(time.Hour)))
	}, "both ended", func() bool {
		for id, c := range wakes {
			select {
			case row := <-c:
				got[id] = row
			default:
			}
		}
		if _, ok := got[sleeper]; !ok && scheduled(sleeper) {
			steps, err := b.client.ListJobSteps(b.Ctx, sleeper)
			require.NoError(t, err)
			s := hopper.SuspensionOf(jobs.StateScheduled, steps, time.Now())
			if s.Wait == hopper.StepKindSleep {
				require.WithinDuration(t, time.Now().Add(7*24*time.Hour), s.Until, time.Minute)
				kind, err := b.client.WakeJob(b.Ctx, sleeper)
				require.NoError(t, err)
				require.Equal(t, hopper.StepKindSleep, kind)
			}
		}
		if _, ok := got[waiter]; !ok && scheduled(waiter) {
			steps, err := b.client.ListJobSteps(b.Ctx, waiter)
			require.NoError(t, err)
			if s := hopper.SuspensionOf(jobs.StateScheduled, steps, time.Now()); s.Event == "confirmed" {
				n, err := b.client.EmitEvent(b.Ctx, "confirmed", receipt{Sent: "yes"})
				require.NoError(t, err)
				require.Equal(t, 1, n)
			}
		}
		return len(got) == 2
	})
	require.Equal(t, jobs.StateCompleted, got[sleeper].State)
	require.Equal(t, jobs.StateCompleted, got[waiter].State)
	var r receipt
	require.NoError(t, json.Unmarshal(got[waiter].Result, &r))
	require.Equal(t, "yes", r.Sent)

	live := b.enqueue(t, report, "not waiting")
	_, err = b.client.WakeJob(b.Ctx, live)
	require.ErrorIs(t, err, hopper.ErrNotWaiting)
	_, err = b.client.WakeJob(b.Ctx, 999999)
	require.ErrorIs(t, err, hopper.ErrNotFound)
}

// TestGetJobProgress: GetJob carries a live durable job's progress; a job
// that recorded none, and a plain job, carry none; the job's end takes it.
// GetJobProgress answers the zero Progress for a job that is there with
// none (it said "not found" for a live job), ErrNotFound for no job.
func TestGetJobProgress(t *testing.T) {
	b := setup(t)
	until := time.Now().Add(time.Hour)
	id := testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{State: testfactory.Scheduled, RunAt: &until}).ID
	plain := testfactory.Job(b.Ctx, t, b.Pool, nil).ID
	row, err := b.client.GetJob(b.Ctx, id)
	require.NoError(t, err)
	require.Nil(t, row.Progress)

	testfactory.Progress(b.Ctx, t, b.Pool, id, json.RawMessage(`{"done": 3, "of": 10}`))
	row, err = b.client.GetJob(b.Ctx, id)
	require.NoError(t, err)
	require.NotNil(t, row.Progress)
	require.JSONEq(t, `{"done": 3, "of": 10}`, string(row.Progress.Value))
	require.WithinDuration(t, time.Now(), row.Progress.UpdatedAt, time.Minute)
	p, err := b.client.GetJobProgress(b.Ctx, id)
	require.NoError(t, err)
	require.Equal(t, *row.Progress, p)
	row, err = b.client.GetJob(b.Ctx, plain)
	require.NoError(t, err)
	require.Nil(t, row.Progress)
	p, err = b.client.GetJobProgress(b.Ctx, plain)
	require.NoError(t, err, "a live job that recorded no progress is there")
	require.Equal(t, jobs.Progress{}, p)
	_, err = b.client.GetJobProgress(b.Ctx, 1<<40)
	require.ErrorIs(t, err, hopper.ErrNotFound, "no such job")

	require.NoError(t, b.client.CancelJob(b.Ctx, id))
	row, err = b.client.GetJob(b.Ctx, id)
	require.NoError(t, err)
	require.Nil(t, row.Progress, "an ended job's progress went with it")
	_, err = b.client.GetJobProgress(b.Ctx, id)
	require.NoError(t, err, "a cancelled job is still there, in the dead table")
}

// TestEmitEventLimitsAsStored: an event's payload is measured as the
// table measures it (jsonb's text), and whatever the database refuses
// comes back wrapping ErrInvalidEvent. 25,000 ones are 50,001 bytes as
// Go's JSON and 75,000 stored: the server refused them with an error
// that did not wrap ErrInvalidEvent. 15,000 '<' are 90,002 bytes as Go
// escapes them and 15,002 stored: Go refused them. A NUL is refused
// before it is sent. Names count characters: 200 two-byte letters pass.
func TestEmitEventLimitsAsStored(t *testing.T) {
	b := setup(t)
	ones := make([]int, 25_000)
	for i := range ones {
		ones[i] = 1
	}
	_, err := b.client.EmitEvent(b.Ctx, "big", ones)
	require.ErrorIs(t, err, hopper.ErrInvalidEvent)
	_, err = b.client.EmitEvent(b.Ctx, "escaped", strings.Repeat("<", 15_000))
	require.NoError(t, err)
	_, err = b.client.EmitEvent(b.Ctx, "nul", "a\x00b")
	require.ErrorIs(t, err, hopper.ErrInvalidEvent)
	_, err = b.client.EmitEvent(b.Ctx, strings.Repeat("é", 200), 1)
	require.NoError(t, err)
	_, err = b.client.EmitEvent(b.Ctx, strings.Repeat("é", hopper.MaxEventName+1), 1)
	require.ErrorIs(t, err, hopper.ErrInvalidEvent)
}

// TestWaitJobAtTheMetaLimit: a job enqueued with the largest metadata Go
// accepts is marked for WaitJob (the table keeps room for Hopper's own
// keys, migration 28), so its end is announced. Over about 8,160 bytes
// the mark was skipped while the job was reported live, and WaitJob
// heard of the end only at its 30-second read.
func TestWaitJobAtTheMetaLimit(t *testing.T) {
	b := setup(t)
	meta := jobs.Meta{"k": strings.Repeat("x", jobs.MaxMetaBytes-10)} // 8,191 bytes stored: one more is refused
	_, err := report.Enqueue(b.Ctx, b.Pool, Email{}, jobs.Metadata(jobs.Meta{"k": meta["k"] + "x"}))
	require.ErrorIs(t, err, jobs.ErrInvalidMeta, "the largest metadata an enqueue takes")
	id := b.enqueue(t, report, "big@example.com", jobs.Metadata(meta))
	wait := b.waitJob(id)
	b.waitMarked(t, id)
	b.runUntil(t, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, report, func(context.Context, *jobs.Job[Email]) error { return nil }))
	}, "the wait returned", func() bool { return len(wait) == 1 })
	require.Equal(t, jobs.StateCompleted, (<-wait).State)
}

// TestWaitWorkflowMarksStepsAddedLater: a step a handler adds to its own
// running workflow after WaitWorkflow began is marked too (the wait marks
// again at each notification), so its end is announced. It was never
// marked: its end was seen only by the 30-second read.
func TestWaitWorkflowMarksStepsAddedLater(t *testing.T) {
	b := setup(t)
	res, err := jobs.EnqueueWorkflow(b.Ctx, b.Pool, jobs.NewWorkflow("grows").Add("root", step("root")))
	require.NoError(t, err)
	done := make(chan []hopper.WorkflowStep, 1)
	go func() {
		steps, err := b.client.WaitWorkflow(b.Ctx, "grows")
		if err != nil {
			steps = nil
		}
		done <- steps
	}()
	b.waitMarked(t, res.Steps["root"])
	var late atomic.Int64
	release := make(chan struct{})
	b.runUntil(t, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, stepKind, func(ctx context.Context, job *jobs.Job[Step]) error {
			if job.Payload.Name == "late" {
				select { // ends once the test saw it marked
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			tx, err := b.Pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
			r, err := jobs.EnqueueWorkflow(ctx, tx, jobs.NewWorkflow(job.Workflow()).Add("late", step("late"), jobs.AfterJobs(job.ID)))
			if err != nil {
				return err
			}
			late.Store(r.Steps["late"])
			if err := worker.AckTx(ctx, tx, job); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}))
	}, "the wait returned", func() bool {
		if id := late.Load(); id != 0 {
			if row, err := b.client.GetJob(b.Ctx, id); err == nil {
				if _, marked := row.Meta["hopper.awaited"]; marked {
					select {
					case <-release:
					default:
						close(release)
					}
				}
			}
		}
		return len(done) == 1
	})
	steps := <-done
	require.Len(t, steps, 2)
	for _, s := range steps {
		require.Equal(t, jobs.StateCompleted, s.State)
	}
}
