package hopper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/rows"
	"github.com/hopperq/hopper/jobs"
)

// JobUpdate says what UpdateJob changes in a job that has not started. A
// nil field, and RunNow false, keeps what the job has; the zero JobUpdate
// changes nothing (and still fails on a job that cannot be edited).
type JobUpdate struct {
	// Payload replaces the job's payload: PayloadOf(kind, value) for a
	// typed one, checked and encoded by the kind's definition; RawPayload
	// for JSON.
	Payload *Payload
	// RunAt moves the job to that time, by the database's clock: a time
	// ahead of it makes the job scheduled then (a pending job moves out of
	// the queue's ready jobs); a time at or before it (the zero time
	// included) makes the job ready now, as RunNow does. A time in the
	// year 9999 (UTC) or later is refused (jobs.ErrInvalidRunAt).
	RunAt *time.Time
	// RunNow makes the job ready now: a scheduled job becomes pending and
	// its queue's workers are woken; a job already due keeps its place in
	// line. It cannot be set with RunAt.
	RunNow bool
	// Priority, from 0 (runs first) to 9 (last).
	Priority *int
	// Queue moves the job to another queue, named by the rules of
	// jobs.Queue; the job keeps its unique and concurrency keys.
	Queue *string
	// MaxAttempts sets how many claims the job may have in all, the ones
	// it has had included: it must be more than Row.Attempt, so that the
	// job has one left at least.
	MaxAttempts *int
}

// Payload is a new payload for a job, for JobUpdate: made by PayloadOf
// from a typed value, or by RawPayload from JSON.
type Payload struct {
	kind     string  // "" for raw JSON
	version  int     // 0: the job's own
	sequence *string // the key the kind's SequenceBy derives, nil without one
	raw      json.RawMessage
	err      error
}

// PayloadOf is payload as the new payload of a job of kind k: checked and
// encoded as k.Enqueue would (jobs.ErrMarshal, jobs.ErrPayloadTooLarge),
// and stored at the kind's current version. UpdateJob refuses it, with
// ErrPayloadMismatch, for a job of another kind, and for a kind with
// jobs.SequenceBy when the new payload derives another sequence key than
// the job's (the key is fixed at enqueue: the payload would run in the
// wrong key's order). The job's concurrency key stays what it is: it is
// not derived again from the new payload (jobs.KeyBy), and no enqueue
// hook runs.
func PayloadOf[T any](k *jobs.Kind[T], payload T) *Payload {
	p := &Payload{kind: k.Name(), version: k.Version()}
	if err := k.Check(payload); err != nil {
		if inner := errors.Unwrap(err); inner != nil {
			err = inner // without Check's "enqueue KIND: "
		}
		p.err = fmt.Errorf("payload of %s: %w", k.Name(), err)
		return p
	}
	if key, derived, err := k.SequenceKey(payload); derived && err == nil {
		p.sequence = &key
	}
	// As stored: encrypted for a kind with jobs.Encrypted.
	raw, err := k.EncodePayload(payload)
	if err != nil { // Check encoded it already
		p.err = fmt.Errorf("payload of %s: %w", k.Name(), err)
	}
	p.raw = raw
	return p
}

// RawPayload is raw JSON as the new payload of a job, for callers without
// the kind's Go type (the hopper command, the dashboard): Hopper has no
// definition of the kind to check it against, so it checks what it can.
// The JSON must be valid (jobs.ErrMarshal), at most
// jobs.DefaultMaxPayloadBytes (jobs.ErrPayloadTooLarge), and of the JSON
// type the job's payload has (an object stays an object:
// ErrPayloadMismatch). version is the payload version it is written at: 0
// keeps the job's; any other must be from 1 to the job's own
// (ErrPayloadMismatch), since a build of the kind that runs the job as it
// is upgrades every older version, and none is known to read a newer one.
// A job whose payload is encrypted (jobs.Encrypted) refuses JSON in the
// clear (ErrPayloadMismatch): PayloadOf, with the kind's definition,
// encrypts.
func RawPayload(raw json.RawMessage, version int) *Payload {
	p := &Payload{version: version, raw: raw}
	switch {
	case !json.Valid(raw):
		p.err = fmt.Errorf("payload: %w: it is not valid JSON", jobs.ErrMarshal)
	case len(raw) > jobs.DefaultMaxPayloadBytes:
		p.err = fmt.Errorf("payload: %w: %d bytes, over the limit of %d", jobs.ErrPayloadTooLarge, len(raw), jobs.DefaultMaxPayloadBytes)
	case version < 0 || version > math.MaxInt32:
		p.err = fmt.Errorf("payload: %w: version %d is outside 1 to %d (0 keeps the job's)", ErrPayloadMismatch, version, math.MaxInt32)
	}
	return p
}

// lastRunAt is the first run time refused, as jobs.RunAt refuses it.
var lastRunAt = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// params checks u and turns it into the statement's parameters.
func (u JobUpdate) params(id int64) (db.UpdateJobParams, error) {
	p := db.UpdateJobParams{ID: id}
	if u.RunNow && u.RunAt != nil {
		return p, fmt.Errorf("%w: RunNow and RunAt both set", jobs.ErrInvalidRunAt)
	}
	if u.RunNow {
		p.RunAt = &time.Time{} // any time before now is now
	} else if u.RunAt != nil {
		at := *u.RunAt
		switch {
		case !at.Before(lastRunAt):
			// As jobs.RunAt: a time Go's JSON writes in any time zone,
			// which the check on hopper_jobs (migration 16) holds to.
			return p, fmt.Errorf("%w: run_at is in the year 9999 or later", jobs.ErrInvalidRunAt)
		case at.Before(time.Unix(0, 0)):
			at = time.Time{} // now; a time far back would overflow pgx's encoding into one far ahead
		}
		p.RunAt = &at
	}
	if u.Priority != nil {
		if *u.Priority < jobs.MinPriority || *u.Priority > jobs.MaxPriority {
			return p, fmt.Errorf("%w: %d is outside %d (first) to %d (last)", jobs.ErrInvalidPriority, *u.Priority, jobs.MinPriority, jobs.MaxPriority)
		}
		v := int16(*u.Priority)
		p.Priority = &v
	}
	if u.Queue != nil {
		if err := jobs.ValidateQueue(*u.Queue); err != nil {
			return p, err
		}
		p.Queue = u.Queue
	}
	if u.MaxAttempts != nil {
		if *u.MaxAttempts < 1 || *u.MaxAttempts > 1<<30 {
			return p, fmt.Errorf("%w: %d (must be 1 or more)", jobs.ErrInvalidMaxAttempts, *u.MaxAttempts)
		}
		v := int32(*u.MaxAttempts)
		p.MaxAttempts = &v
	}
	if u.Payload != nil {
		if u.Payload.err != nil {
			return p, u.Payload.err
		}
		p.Payload = u.Payload.raw
		if u.Payload.kind != "" {
			p.Kind = &u.Payload.kind
		}
		p.SequenceKey = u.Payload.sequence
		if u.Payload.version != 0 {
			v := int32(u.Payload.version)
			p.Version = &v
		}
	}
	return p, nil
}

// UpdateJob changes a job that has not started (pending or scheduled):
// its payload, run time, priority, queue or max attempts, as u says, and
// returns the job as changed. One statement locks the job and checks its
// state under the lock, so a worker's claim comes either before it (the
// job is running, and the update fails with ErrRunning) or after it (the
// worker runs the job as changed); never both. A job made ready by the
// update (RunNow, or a new place in line) wakes its queue's workers.
//
// The error wraps ErrNotFound, ErrRunning or ErrFinished for a job that
// cannot be edited; ErrHasRecords for a new payload (or version) of a job
// whose durable handler has recorded calls; ErrPayloadMismatch, or the sentinel of package jobs
// that Enqueue would return (jobs.ErrInvalidPriority,
// jobs.ErrInvalidQueue, jobs.ErrInvalidMaxAttempts, jobs.ErrInvalidRunAt,
// jobs.ErrMarshal, jobs.ErrPayloadTooLarge), for a change that cannot be
// made; jobs.ErrInvalidMaxAttempts also when MaxAttempts is not more than
// the attempts the job has made.
func (c *Client) UpdateJob(ctx context.Context, id int64, u JobUpdate) (jobs.Row, error) {
	return c.UpdateJobTx(ctx, c.db, id, u)
}

// UpdateJobTx is UpdateJob on the caller's transaction: the change commits
// or rolls back with it. Until then the job is locked, and workers skip
// it.
func (c *Client) UpdateJobTx(ctx context.Context, tx jobs.DBTX, id int64, u JobUpdate) (jobs.Row, error) {
	fail := func(err error) (jobs.Row, error) { return jobs.Row{}, fmt.Errorf("update job %d: %w", id, err) }
	p, err := u.params(id)
	if err != nil {
		return fail(err)
	}
	if id < 1 {
		return fail(ErrNotFound)
	}
	var r db.UpdateJobRow
	for try := 0; ; try++ {
		r, err = c.queries(tx).UpdateJob(ctx, p)
		if err != nil {
			return fail(err)
		}
		// Held but neither changed nor refused: the row moved on (claimed
		// and given back) between the statement's snapshot and its lock,
		// and the UPDATE, reading the snapshot, matched nothing. Nothing
		// was written; a new snapshot settles it, as for a job not held.
		lost := r.Locked && r.ID == nil && r.Refused == ""
		if (r.Locked && !lost) || !editable(r.Was) {
			break
		}
		if try == changedTries-1 {
			return fail(changedMeanwhile(r.Was))
		}
	}
	row, ok, err := rows.Updated(r)
	switch {
	case err != nil:
		return fail(err)
	case ok:
		return row, nil
	}
	if err := notEditable(jobs.State(r.Was)); err != nil {
		return fail(err)
	}
	switch r.Refused {
	case "durable":
		return fail(fmt.Errorf("%w: its handler recorded steps for the payload it has, which its next run replays; "+
			"cancel it and enqueue another to start over", ErrHasRecords))
	case "kind":
		return fail(fmt.Errorf("%w: the payload is for kind %q, the job is of kind %q", ErrPayloadMismatch, *p.Kind, r.JobKind))
	case "payload_type":
		return fail(fmt.Errorf("%w: the job's payload is a JSON %s, the new one is not", ErrPayloadMismatch, r.PayloadType))
	case "encrypted":
		return fail(fmt.Errorf("%w: the job's payload is encrypted (jobs.Encrypted), the new one is not: "+
			"replace it with hopper.PayloadOf and the kind's definition, which encrypts", ErrPayloadMismatch))
	case "version":
		return fail(fmt.Errorf("%w: payload version %d is newer than the job's, %d (a worker that runs the job may not read it)", ErrPayloadMismatch, *p.Version, r.JobVersion))
	case "sequence":
		return fail(fmt.Errorf("%w: the payload is for sequence key %q, the job is in %q (a job's sequence key is fixed at enqueue)", ErrPayloadMismatch, *p.SequenceKey, r.JobSequence))
	case "max_attempts":
		return fail(fmt.Errorf("%w: %d is not more than the %d attempts the job has made (give %d or more)", jobs.ErrInvalidMaxAttempts, *p.MaxAttempts, r.Attempt, r.Attempt+1))
	}
	return fail(fmt.Errorf("it is %s, and the statement refused it (%q)", r.Was, r.Refused)) // no such reason
}

// changedTries bounds how many times UpdateJob and DeleteJob run their
// statement for a job that changed while the statement waited for its
// lock: each run after the first sees, in a snapshot of its own, what
// became of it (claimed, most often), and only a job claimed and handed
// back again and again in between needs a third.
const changedTries = 3

// editable reports whether a job in state was is one UpdateJob and
// DeleteJob change.
func editable(was string) bool {
	return was == string(jobs.StatePending) || was == string(jobs.StateScheduled) || was == string(jobs.StateWaiting)
}

// changedMeanwhile is the error for a job whose state changed under every
// try.
func changedMeanwhile(was string) error {
	return fmt.Errorf("%w: it was %s, and a worker claimed it while the change waited for it, %d times over", ErrRunning, was, changedTries)
}

// notEditable is the error for a job in state was that UpdateJob and
// DeleteJob leave alone ("" for no such job), or nil for one they change.
func notEditable(was jobs.State) error {
	switch was {
	case jobs.StatePending, jobs.StateScheduled, jobs.StateWaiting:
		return nil
	case "":
		return ErrNotFound
	case jobs.StateRunning:
		return fmt.Errorf("%w: a worker has claimed it (only pending, scheduled and waiting jobs can be changed; CancelJobs stops a running one)", ErrRunning)
	}
	return fmt.Errorf("%w: it is %s", ErrFinished, was)
}

// DeleteJob deletes a job that has not started (pending or scheduled) for
// good, without a trace, and returns it as it was: what CancelJobs does
// for a job it keeps, as cancelled, with the dead ones. Like UpdateJob it
// locks the job and checks its state under the lock: a job a worker
// claimed first is left running (ErrRunning). The error wraps ErrNotFound,
// ErrRunning or ErrFinished when there was nothing to delete.
func (c *Client) DeleteJob(ctx context.Context, id int64) (jobs.Row, error) {
	return c.DeleteJobTx(ctx, c.db, id)
}

// DeleteJobTx is DeleteJob on the caller's transaction.
func (c *Client) DeleteJobTx(ctx context.Context, tx jobs.DBTX, id int64) (jobs.Row, error) {
	fail := func(err error) (jobs.Row, error) { return jobs.Row{}, fmt.Errorf("delete job %d: %w", id, err) }
	if id < 1 {
		return fail(ErrNotFound)
	}
	var r db.DeleteJobRow
	for try := 0; ; try++ {
		var err error
		if r, err = c.queries(tx).DeleteJob(ctx, id); err != nil {
			return fail(err)
		}
		// Held but not deleted: as in UpdateJobTx, the row moved on
		// between the snapshot and the lock; nothing was written.
		lost := r.Deleted && r.ID == nil
		if (r.Deleted && !lost) || !editable(r.Was) {
			break
		}
		if try == changedTries-1 {
			return fail(changedMeanwhile(r.Was))
		}
	}
	row, ok, err := rows.Deleted(r)
	switch {
	case err != nil:
		return fail(err)
	case ok:
		return row, nil
	}
	if err := notEditable(jobs.State(r.Was)); err != nil {
		return fail(err)
	}
	return fail(fmt.Errorf("it is %s, and was not deleted", r.Was))
}
