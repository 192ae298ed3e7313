package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/worker/detached"
	"github.com/hopperq/hopper/jobs"
)

// Step runs fn once for the job: its first success records its result,
// and when the job runs again (after a failure, a crash, a lost lease, a
// deploy) Step returns the recorded result without calling fn. Steps are
// told apart by their order in the run and their name: a run whose calls
// differ from the records of an earlier run fails the job for good, with
// ErrNonDeterministic. fn's effects outside the database happen at least
// once: a crash between fn's return and the record makes the next run
// call fn again. Use StepTx for effects in the database, which then
// happen exactly once. The result must marshal to JSON of at most
// MaxRecordSize bytes; a failed fn records nothing and returns its error.
func Step[R, T any](ctx context.Context, job *jobs.Job[T], name string, fn func(context.Context) (R, error)) (R, error) {
	if detached.From(ctx) != nil { // hoppertest.Work: nothing to record
		return fn(ctx)
	}
	c, err := durableJob(ctx, job.ID, "step", name)
	if err != nil {
		var zero R
		return zero, err
	}
	what := fmt.Sprintf("step %q of job %d", name, job.ID)
	return replayStep(ctx, c, name, what, func() (R, error) {
		var zero R
		out, err := fn(ctx)
		if err != nil {
			return zero, err
		}
		raw, err := encodeStep(c, name, out, what)
		if err != nil {
			return zero, err
		}
		rctx, cancel := recordContext(ctx, c)
		defer cancel()
		if err := c.durable.record(rctx, c.held.q, c, db.RecordStepParams{Name: name, Kind: recordStep, State: "done", Result: raw}); err != nil {
			return zero, err
		}
		return out, nil
	})
}

// StepTx is Step for work in the database: fn runs in a transaction on
// the worker's pool, in which the step's result is recorded, so fn's
// writes and the record commit together, exactly once. When two runs of
// the job race (a lease lost while fn ran), the second record is refused
// and its transaction, fn's writes with it, rolls back; StepTx then
// returns the first run's result. Recording costs one statement in the
// transaction. fn must not commit or roll back tx.
func StepTx[R, T any](ctx context.Context, job *jobs.Job[T], name string, fn func(context.Context, pgx.Tx) (R, error)) (R, error) {
	var zero R
	if detached.From(ctx) != nil {
		return zero, fmt.Errorf("step %q of job %d: %w: StepTx needs a worker's database", name, job.ID, ErrInvalidDurableCall)
	}
	c, err := durableJob(ctx, job.ID, "step", name)
	if err != nil {
		return zero, err
	}
	what := fmt.Sprintf("step %q of job %d", name, job.ID)
	return replayStep(ctx, c, name, what, func() (R, error) {
		return runStepTx(ctx, c, &c.durable, name, what, fn)
	})
}

// replayStep returns the result recorded at the step's position or,
// where there is none, the result of run, which records it. When another
// run of the job recorded the position first (run fails with
// errRecordTaken), that run's result wins.
func replayStep[R any](ctx context.Context, c *heldJob, name, what string, run func() (R, error)) (R, error) {
	var zero R
	d := &c.durable
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.afterSuspension(what); err != nil {
		return zero, err
	}
	for {
		rec, err := d.at(ctx, c)
		if err != nil {
			return zero, err
		}
		if rec != nil {
			if err := d.check(c, rec, recordStep, name); err != nil {
				return zero, err
			}
			d.next++
			return decodeStep[R](c, name, rec.Result, what)
		}
		out, err := run()
		if errors.Is(err, errRecordTaken) {
			if _, err := d.reload(ctx, c); err != nil {
				return zero, err
			}
			continue
		}
		if err != nil {
			return zero, err
		}
		d.next++
		return out, nil
	}
}

// runStepTx runs fn and records its result in one transaction.
func runStepTx[R any](ctx context.Context, c *heldJob, d *durableCalls, name, what string,
	fn func(context.Context, pgx.Tx) (R, error)) (out R, err error) {
	tx, err := c.held.begin(ctx)
	if err != nil {
		return out, fmt.Errorf("%s: begin: %w", what, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if out, err = fn(ctx, tx); err != nil {
		return out, err
	}
	raw, err := encodeStep(c, name, out, what)
	if err != nil {
		return out, err
	}
	q := db.New(c.held.dbtx(tx))
	// fn's work is done: its record and commit outlive the handler's
	// context, as Step's record does.
	rctx, cancel := recordContext(ctx, c)
	defer cancel()
	if err = d.record(rctx, q, c, db.RecordStepParams{Name: name, Kind: recordStep, State: "done", Result: raw}); err != nil {
		d.records = d.records[:min(int(d.next), len(d.records))]
		return out, err
	}
	if err = tx.Commit(rctx); err != nil {
		// Whether it committed is unknown: read the records again at the
		// next call (the job runs again; its replay tells).
		d.records, d.loaded = nil, false
		var zero R
		return zero, fmt.Errorf("%s: commit: %w", what, err)
	}
	return out, nil
}

// Sleep suspends the job for d: the handler must return the error it
// gets (it wraps ErrSuspended), and the job gives up its slot and its
// lease, uncharged, until d has passed; the next run replays the job's
// records up to the sleep, which then returns nil. The wake time is
// recorded at the first call, so the sleep survives restarts and deploys
// and is never shortened or restarted. d is at most MaxSnooze. An operator
// may end the sleep early (hopper.Client.WakeJob, `hopper jobs wake`).
// Under hoppertest.Work it returns nil at once.
func Sleep[T any](ctx context.Context, job *jobs.Job[T], name string, d time.Duration) error {
	if d <= 0 || d > MaxSnooze {
		return invalidCall(fmt.Sprintf("sleep %q", name), job.ID, fmt.Sprintf("duration %v: want a positive one of at most %v", d, MaxSnooze), nameProblem(name))
	}
	ms := max(d.Milliseconds(), 1)
	return sleepUntil(ctx, job.ID, name, db.RecordStepParams{WaitMs: &ms})
}

// SleepUntil is Sleep until t (at most MaxSnooze away); a t in the past
// returns nil at once, recorded as a sleep that is over.
func SleepUntil[T any](ctx context.Context, job *jobs.Job[T], name string, t time.Time) error {
	if time.Until(t) > MaxSnooze {
		return invalidCall(fmt.Sprintf("sleep %q", name), job.ID, fmt.Sprintf("%s is more than %v away", t.Format(time.RFC3339), MaxSnooze), nameProblem(name))
	}
	at := t.UTC().Round(time.Microsecond)
	return sleepUntil(ctx, job.ID, name, db.RecordStepParams{Until: &at})
}

// sleepUntil sleeps until the deadline that wake gives: a wait from the
// server's now (WaitMs), or an absolute time (Until).
func sleepUntil(ctx context.Context, id int64, name string, wake db.RecordStepParams) error {
	if detached.From(ctx) != nil {
		return nil
	}
	c, err := durableJob(ctx, id, "sleep", name)
	if err != nil {
		return err
	}
	d := &c.durable
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.afterSuspension(fmt.Sprintf("sleep %q of job %d", name, id)); err != nil {
		return err
	}
	for {
		rec, err := d.at(ctx, c)
		if err != nil {
			return err
		}
		if rec == nil {
			p := wake
			p.Name, p.Kind, p.State = name, recordSleep, "waiting"
			err = d.record(ctx, c.held.q, c, p)
			if errors.Is(err, errRecordTaken) {
				if _, err := d.reload(ctx, c); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return err
			}
			rec = &d.records[d.next]
		}
		if err := d.check(c, rec, recordSleep, name); err != nil {
			return err
		}
		if rec.over() {
			d.next++
			return nil
		}
		d.suspend = &snoozeError{until: rec.deadline, wait: recordSleep}
		return d.suspend
	}
}

// AwaitEvent waits for the event name (hopper.Client.EmitEvent, or
// hopper_emit_event in SQL) for at most timeout, and returns its payload
// decoded into R. An event emitted before the wait counts. While it has
// not come, the handler must return the error it gets (it wraps
// ErrSuspended): the job gives up its slot and its lease, uncharged, and
// runs again when the event is emitted or the timeout passes, replaying
// its records up to the wait. Once the event came, its payload is the
// call's record: every later run returns the same payload. When the
// timeout passes first, the error wraps ErrEventTimeout; the handler may
// go on. The deadline is recorded at the first call. timeout is at most
// MaxSnooze. Under hoppertest.Work it returns ErrEventTimeout at once.
func AwaitEvent[R, T any](ctx context.Context, job *jobs.Job[T], name string, timeout time.Duration) (R, error) {
	var zero R
	if timeout <= 0 || timeout > MaxSnooze {
		return zero, invalidCall(fmt.Sprintf("await event %q", name), job.ID,
			fmt.Sprintf("timeout %v: want a positive one of at most %v", timeout, MaxSnooze), nameProblem(name))
	}
	if detached.From(ctx) != nil {
		return zero, fmt.Errorf("await event %q in job %d: %w", name, job.ID, ErrEventTimeout)
	}
	c, err := durableJob(ctx, job.ID, "await event", name)
	if err != nil {
		return zero, err
	}
	d := &c.durable
	d.mu.Lock()
	defer d.mu.Unlock()
	what := fmt.Sprintf("event %q of job %d", name, job.ID)
	if err := d.afterSuspension(what); err != nil {
		return zero, err
	}
	for {
		rec, err := d.at(ctx, c)
		if err != nil {
			return zero, err
		}
		if rec == nil {
			ms := max(timeout.Milliseconds(), 1)
			err = d.record(ctx, c.held.q, c, db.RecordStepParams{Name: name, Kind: recordEvent, State: "waiting", WaitMs: &ms})
			if errors.Is(err, errRecordTaken) {
				if _, err := d.reload(ctx, c); err != nil {
					return zero, err
				}
				continue
			}
			if err != nil {
				return zero, err
			}
			rec = &d.records[d.next]
		}
		if err := d.check(c, rec, recordEvent, name); err != nil {
			return zero, err
		}
		if rec.State == "waiting" {
			settled, err := c.held.q.SettleEvent(ctx, db.SettleEventParams{JobID: c.id, Position: d.next, Attempt: c.attempt, Name: name})
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				d.suspend = &snoozeError{until: rec.deadline, wait: recordEvent, event: name}
				return zero, d.suspend
			case err != nil:
				return zero, fmt.Errorf("%s: %w", what, err)
			}
			rec.State, rec.Result = settled.State, settled.Result
		}
		d.next++
		if rec.State == "timed_out" {
			return zero, fmt.Errorf("%s: %w", what, ErrEventTimeout)
		}
		return decodeEvent[R](c, name, rec.Result, what)
	}
}

// SetProgress records v as the job's progress: a small JSON value (at most
// MaxProgressSize bytes) that hopper.Client.GetJob, `hopper jobs
// show` and the dashboard's job page show while the job lives. Writes are
// throttled to one per ProgressEvery; a value set sooner is written when
// the interval is over, unless a newer one replaces it. It returns
// ErrLeaseLost when the job is no longer this worker's.
func SetProgress[T any](ctx context.Context, job *jobs.Job[T], v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("progress of job %d: %w", job.ID, err)
	}
	if err := checkStored(raw, MaxProgressSize, fmt.Sprintf("progress of job %d", job.ID)); err != nil {
		return err
	}
	if detached.From(ctx) != nil {
		return nil
	}
	c, err := heldJobFrom(ctx, job.ID)
	if err != nil {
		return err
	}
	d := &c.durable
	d.mu.Lock()
	defer d.mu.Unlock()
	if wait := ProgressEvery - time.Since(d.progressAt); wait > 0 {
		if d.progressPending == nil {
			d.progressTimer = time.AfterFunc(wait, func() { d.flushProgress(c) })
		}
		d.progressPending = raw
		return nil
	}
	return d.writeProgress(ctx, c, raw)
}
