package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/jsonbtext"
	"github.com/hopperq/hopper/internal/worker/detached"
	"github.com/hopperq/hopper/jobs"
)

// Limits of what a durable handler records.
const (
	// MaxRecordSize is the largest a step's result or an event's payload
	// may be, as PostgreSQL stores it (jsonb's text: a space after every
	// ',' and ':', numbers in plain notation, '<', '>' and '&' as they
	// are): 64 KiB.
	MaxRecordSize = 64 << 10
	// MaxProgressSize is the largest a progress value may be, measured
	// the same way.
	MaxProgressSize = 4 << 10
	// MaxStepName is the longest a step's or an event's name may be, in
	// characters (as hopper.MaxEventName, and as the tables check).
	MaxStepName = 255
	// MaxCalls is the most durable calls (Step, StepTx, Sleep, AwaitEvent)
	// one job may record.
	MaxCalls = 10000
	// ProgressEvery is the most often SetProgress writes a job's progress:
	// a value set sooner after the last write is written when the interval
	// is over (the newest one only).
	ProgressEvery = time.Second
)

// The kinds of record a durable handler writes (hopper_job_steps.kind).
const (
	recordStep  = "step"
	recordSleep = "sleep"
	recordEvent = "event"
)

// markedDurable reports whether a job's stored metadata carries the mark
// of a job that recorded something ('hopper.durable', set by RecordStep
// and SetProgress). It looks for the key's text: jsonb prints it so, and
// a value that merely contains it costs one read of no records.
func markedDurable(meta json.RawMessage) bool {
	return bytes.Contains(meta, []byte(`"hopper.durable"`))
}

// durableCalls is what one run of a handler has recorded and replayed:
// the job's records, read at its first durable call, and the place of the
// next call. A handler's calls are sequential; the mutex only keeps a
// handler that makes them from several goroutines from corrupting it.
type durableCalls struct {
	mu      sync.Mutex
	loaded  bool
	records []durableRecord // by position, 0 first
	next    int32           // the position of the next call
	suspend *snoozeError    // a wait the run entered

	progressAt      time.Time       // the last progress write
	progressPending json.RawMessage // a value waiting for ProgressEvery to pass
	progressTimer   *time.Timer
}

// durableRecord is one record of the job, with the deadline of a sleep or
// a wait on this process's monotonic clock: the server's remaining time
// (remaining_ms) counted from when it was read. The server's clock is
// the one deadlines are compared with (the wake-up's run_at, an event's
// emit); the worker's wall clock, which may be off, is never used.
type durableRecord struct {
	db.ListStepsRow
	deadline time.Time
}

func readRecord(r db.ListStepsRow, readAt time.Time) durableRecord {
	return durableRecord{ListStepsRow: r, deadline: readAt.Add(time.Duration(r.RemainingMs) * time.Millisecond)}
}

// over reports whether the record's sleep or wait has reached its
// deadline.
func (r *durableRecord) over() bool { return r.Until == nil || !time.Now().Before(r.deadline) }

// afterSuspension refuses a durable call made after a sleep or a wait
// suspended the run (the handler dropped its error and went on): the
// call's position holds that wait's record, and replaying it as another
// call would fail the job as non-deterministic. The error wraps the
// suspension, so the job suspends as it should, whether the handler
// returns this error or nil. Under d.mu.
func (d *durableCalls) afterSuspension(what string) error {
	if d.suspend == nil {
		return nil
	}
	return fmt.Errorf("%s: called after the run was suspended (return the error Sleep or AwaitEvent gave, which wraps ErrSuspended): %w", what, d.suspend)
}

// pendingSuspension is the wait the handler's run entered, or nil.
func (d *durableCalls) pendingSuspension() *snoozeError {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.suspend
}

// at returns the record at the next position, loading the job's records
// at the run's first call.
func (d *durableCalls) at(ctx context.Context, c *heldJob) (*durableRecord, error) {
	if !d.loaded {
		rows, err := c.held.q.ListSteps(ctx, c.id)
		if err != nil {
			return nil, fmt.Errorf("read the records of job %d: %w", c.id, err)
		}
		// Counted from the answer: late by a round trip at most, never
		// early (an early wake-up would find the wait not over and
		// suspend again).
		read := time.Now()
		d.records = make([]durableRecord, len(rows))
		for i, r := range rows {
			d.records[i] = readRecord(r, read)
		}
		d.loaded = true
	}
	if int(d.next) < len(d.records) {
		return &d.records[d.next], nil
	}
	return nil, nil
}

// reload reads the records again, after another run of the job recorded
// the position this one tried to.
func (d *durableCalls) reload(ctx context.Context, c *heldJob) (*durableRecord, error) {
	d.loaded = false
	return d.at(ctx, c)
}

// check refuses a record that another call made at this position: the
// handler's calls changed between runs.
func (d *durableCalls) check(c *heldJob, r *durableRecord, kind, name string) error {
	if r.Kind == kind && r.Name == name {
		return nil
	}
	if isPatchMarker(r) {
		return d.unknownPatch(c, r, kind, name)
	}
	// The job is dead with this error, its records kept: the message is
	// what an operator reads, so it says the two ways back.
	return Permanent(fmt.Errorf("%w: call %d is %s %q, but the job's record of it is %s %q "+
		"(to recover: deploy again the handler that made the records and retry the dead job, "+
		"or retry it once the handler makes the recorded calls first, in their order: hopper dead retry ID, or Client.RetryDeadJobs)",
		ErrNonDeterministic, d.next+1, kind, name, r.Kind, r.Name))
}

// record writes a record at the next position, fenced by the claim. It
// returns errRecordTaken when a record is there already.
func (d *durableCalls) record(ctx context.Context, q *db.Queries, c *heldJob, p db.RecordStepParams) error {
	if d.next >= MaxCalls {
		return Permanent(fmt.Errorf("record %s %q of job %d: %w: more than %d calls", p.Kind, p.Name, c.id, ErrRecordTooLarge, MaxCalls))
	}
	p.JobID, p.Attempt, p.Position = c.id, c.attempt, d.next
	r, err := q.RecordStep(ctx, p)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation:
		return errRecordTaken
	case jsonbtext.Refused(err):
		return Permanent(fmt.Errorf("record %s %q of job %d: %w: %w", p.Kind, p.Name, c.id, ErrInvalidRecord, err))
	case err != nil:
		return fmt.Errorf("record %s %q of job %d: %w", p.Kind, p.Name, c.id, err)
	case !r.Held:
		return fmt.Errorf("record %s %q of job %d: %w", p.Kind, p.Name, c.id, ErrLeaseLost)
	}
	d.records = append(d.records[:d.next], readRecord(db.ListStepsRow{Position: p.Position, Name: p.Name, Kind: p.Kind,
		State: p.State, Result: p.Result, Until: r.Until, CreatedAt: time.Now(), RemainingMs: r.RemainingMs}, time.Now()))
	return nil
}

// errRecordTaken: another run of the job recorded this position first.
var errRecordTaken = errors.New("hopper: record taken by another run")

// durableJob returns the claim of the job the handler runs, checking the
// name of the call.
func durableJob(ctx context.Context, id int64, what, name string) (*heldJob, error) {
	if p := nameProblem(name); p != "" {
		return nil, invalidCall(what, id, p)
	}
	if what == "step" && strings.HasPrefix(name, PatchMarkerPrefix) {
		return nil, invalidCall(what, id, fmt.Sprintf("name %q: names beginning %q are Patched's", name, PatchMarkerPrefix))
	}
	return heldJobFrom(ctx, id)
}

// nameProblem says what is wrong with a step's or an event's name, or "".
func nameProblem(name string) string {
	if name == "" || utf8.RuneCountInString(name) > MaxStepName || !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
		return fmt.Sprintf("name %q: want 1 to %d characters of UTF-8 text", name, MaxStepName)
	}
	return ""
}

// invalidCall is the error of a durable call with bad arguments, naming
// every problem found: permanent, as the same call fails on every run
// (retrying it with backoff only delays the fix).
func invalidCall(what string, id int64, problems ...string) error {
	var named []string
	for _, p := range problems {
		if p != "" {
			named = append(named, p)
		}
	}
	return Permanent(fmt.Errorf("%s of job %d: %w: %s", what, id, ErrInvalidDurableCall, strings.Join(named, "; ")))
}

// encodeRecord marshals a result and checks it as the table does: its
// size as jsonb prints it, and whether jsonb can hold it at all.
func encodeRecord(v any, what string) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := checkStored(b, MaxRecordSize, what); err != nil {
		return nil, Permanent(err)
	}
	return b, nil
}

// checkStored checks JSON b against limit bytes as PostgreSQL stores it
// (jsonbtext): ErrRecordTooLarge or ErrInvalidRecord.
func checkStored(b []byte, limit int, what string) error {
	n, err := jsonbtext.Len(b)
	switch {
	case errors.Is(err, jsonbtext.ErrNotStorable):
		return fmt.Errorf("%s: %w: %w", what, ErrInvalidRecord, err)
	case err != nil:
		return fmt.Errorf("%s: %w", what, err)
	case n > limit:
		return fmt.Errorf("%s: %w: %d bytes as stored (jsonb's text), at most %d", what, ErrRecordTooLarge, n, limit)
	}
	return nil
}

// recordContext is the context a durable record is written with: the
// handler's values without its cancellation (a step whose function
// returns as its run's deadline passes, or as a graceful shutdown cancels
// it, still records its result, or the next run would repeat the
// effect), bounded by the statement timeout. The record is fenced by the
// claim, so it writes nothing once the job is no longer this run's.
func recordContext(ctx context.Context, c *heldJob) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), statementTimeout(c.held.lease))
}

// encodeStep is encodeRecord for a step's result, encrypted with the
// kind's keyring (jobs.Encrypted) and checked as stored, envelope and
// all: an encrypted result takes about a third more room.
func encodeStep(c *heldJob, name string, v any, what string) (json.RawMessage, error) {
	if c.keyring == nil {
		return encodeRecord(v, what)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if b, err = c.keyring.SealStep(c.id, name, b); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := checkStored(b, MaxRecordSize, what+" (encrypted)"); err != nil {
		return nil, Permanent(err)
	}
	return b, nil
}

// decodeStep decrypts a step's recorded result, when it is encrypted,
// then decodes it. A result that cannot be decrypted (its key gone from
// the keyring, or altered) fails the job for good: every run would fail
// alike.
func decodeStep[R any](c *heldJob, name string, raw json.RawMessage, what string) (R, error) {
	plain, err := c.keyring.OpenStep(c.id, name, raw)
	if err != nil {
		var zero R
		return zero, Permanent(fmt.Errorf("%s: %w", what, err))
	}
	return decodeRecord[R](plain, what)
}

// decodeEvent is decodeStep for the payload an event brought, which its
// emitter may have encrypted (hopper.Client.EmitEventEncrypted).
func decodeEvent[R any](c *heldJob, name string, raw json.RawMessage, what string) (R, error) {
	plain, err := c.keyring.OpenEvent(name, raw)
	if err != nil {
		var zero R
		return zero, Permanent(fmt.Errorf("%s: %w", what, err))
	}
	return decodeRecord[R](plain, what)
}

func decodeRecord[R any](raw json.RawMessage, what string) (R, error) {
	var out R
	if len(raw) == 0 {
		return out, nil
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, Permanent(fmt.Errorf("%s: decode its record: %w", what, err))
	}
	return out, nil
}

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

// writeProgress writes a progress value now, under d.mu.
func (d *durableCalls) writeProgress(ctx context.Context, c *heldJob, raw json.RawMessage) error {
	d.progressAt = time.Now()
	held, err := c.held.q.SetProgress(ctx, db.SetProgressParams{JobID: c.id, Attempt: c.attempt, Progress: raw})
	if err != nil {
		return fmt.Errorf("progress of job %d: %w", c.id, err)
	}
	if !held {
		return fmt.Errorf("progress of job %d: %w", c.id, ErrLeaseLost)
	}
	return nil
}

// flushProgress writes the value held back by the throttle, if the job
// is still held; a job that ended meanwhile has no progress to keep.
func (d *durableCalls) flushProgress(c *heldJob) {
	d.mu.Lock()
	defer d.mu.Unlock()
	raw := d.progressPending
	d.progressPending = nil
	if raw == nil || c.held.get(c.id, c.attempt) == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.held.lease/2)
	defer cancel()
	if err := d.writeProgress(ctx, c, raw); err != nil && !errors.Is(err, ErrLeaseLost) {
		c.held.log.Warn("writing a job's progress failed", "job_id", c.id, "error", err)
	}
}
