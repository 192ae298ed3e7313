package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/jsonbtext"
)

// A job's durable records as the calls (durable.go, patch.go) read, check
// and write them: one at each position, fenced by the claim, encrypted with
// the kind's keyring, checked as PostgreSQL stores them.

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

// A patch's marker is a record like the others: a replay that meets one
// its handler does not ask for gives the run back (unknownPatch).

// PatchMarkerPrefix begins the name of the record Patched writes (a step
// named "hopper.patch:NAME" whose result is true): the name no Step,
// Sleep or AwaitEvent may take, and the one hopper.Client.ListPatches
// counts.
const PatchMarkerPrefix = "hopper.patch:"

// UnknownPatchDelay is how long a run waits, uncharged, when this build
// meets a patch marker its handler does not call Patched for: the run
// was started by a newer build (a rolling deploy), and a worker of that
// build should take it.
const UnknownPatchDelay = time.Minute

// isPatchMarker reports whether a record is a patch's marker.
func isPatchMarker(r *durableRecord) bool {
	return r.Kind == recordStep && strings.HasPrefix(r.Name, PatchMarkerPrefix)
}

// unknownPatch is the answer of a call that finds a patch marker at its
// place, of a patch this build's handler does not call Patched for: a
// newer build started the run. The run is given back for
// UnknownPatchDelay, uncharged, whether the handler returns the error
// or not (as a durable wait is). Under d.mu.
func (d *durableCalls) unknownPatch(c *heldJob, r *durableRecord, kind, name string) error {
	d.suspend = &snoozeError{until: time.Now().Add(UnknownPatchDelay)}
	patch := strings.TrimPrefix(r.Name, PatchMarkerPrefix)
	// One line a run: a fleet rolled back past a patch keeps giving such
	// runs back, and this says why.
	c.held.log.Warn("a newer build started this run (its records hold a patch this build does not know): given back",
		"job_id", c.id, "patch", patch, "delay", UnknownPatchDelay)
	return fmt.Errorf("%w: call %d is %s %q, but the job's record of it is patch %q, which this build does not know "+
		"(a newer build started the run): given back for %v, for a worker of that build: %w",
		ErrUnknownPatch, d.next+1, kind, name, patch, UnknownPatchDelay, d.suspend)
}
