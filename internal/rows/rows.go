// Package rows turns the rows sqlc generates (package db) into the typed
// job row of package jobs: the one place where the public API and the
// generated code meet.
package rows

import (
	"errors"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
)

// Live converts a row of hopper_jobs (a claim, or GetJob). The error is
// from a malformed error history or metadata.
func Live(r db.HopperJob) (jobs.Row, error) {
	history, err := jobs.ParseErrors(r.Errors)
	meta, metaErr := jobs.ParseMeta(r.Meta)
	return jobs.Row{
		ID: r.ID, Queue: r.Queue, Kind: r.Kind, Version: int(r.Version), Payload: r.Payload,
		State: jobs.State(r.State), Priority: int(r.Priority), RunAt: r.RunAt,
		Attempt: int(r.Attempt), MaxAttempts: int(r.MaxAttempts),
		LeaseOwner: deref(r.LeaseOwner), LeaseUntil: r.LeaseUntil, UniqueKey: deref(r.UniqueKey),
		Errors: history, CreatedAt: r.CreatedAt, Meta: meta, ConcurrencyKey: deref(r.ConcurrencyKey),
	}, errors.Join(err, metaErr)
}

// Any converts a row of hopper_all_jobs: a job in any state.
func Any(r db.HopperAllJob) (jobs.Row, error) {
	history, err := jobs.ParseErrors(r.Errors)
	meta, metaErr := jobs.ParseMeta(r.Meta)
	return jobs.Row{
		ID: r.ID, Queue: r.Queue, Kind: r.Kind, Version: int(r.Version), Payload: r.Payload,
		State: jobs.State(r.State), Priority: int(r.Priority), RunAt: r.RunAt,
		Attempt: int(r.Attempt), MaxAttempts: int(r.MaxAttempts),
		LeaseOwner: deref(r.LeaseOwner), LeaseUntil: r.LeaseUntil, UniqueKey: deref(r.UniqueKey),
		Errors: history, CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt, Reason: deref(r.Reason),
		Result: r.Result, Meta: meta, ConcurrencyKey: deref(r.ConcurrencyKey),
	}, errors.Join(err, metaErr)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Updated converts the job as UpdateJob left it; ok is false when the
// statement changed nothing (its columns are NULL then).
func Updated(r db.UpdateJobRow) (row jobs.Row, ok bool, err error) {
	if r.ID == nil {
		return jobs.Row{}, false, nil
	}
	row, err = Live(db.HopperJob{
		ID: *r.ID, Queue: deref(r.Queue), Kind: deref(r.Kind), Version: derefOr(r.Version), Payload: r.Payload,
		State: deref(r.State), Priority: derefOr(r.Priority), RunAt: derefOr(r.RunAt),
		Attempt: derefOr(r.UpdatedAttempt), MaxAttempts: derefOr(r.MaxAttempts),
		LeaseOwner: r.LeaseOwner, LeaseUntil: r.LeaseUntil, UniqueKey: r.UniqueKey,
		Errors: r.Errors, CreatedAt: derefOr(r.CreatedAt), Meta: r.Meta, ConcurrencyKey: r.ConcurrencyKey,
	})
	return row, true, err
}

// Deleted converts the job as DeleteJob found it; ok is false when the
// statement deleted nothing.
func Deleted(r db.DeleteJobRow) (row jobs.Row, ok bool, err error) {
	if !r.Deleted || r.ID == nil {
		return jobs.Row{}, false, nil
	}
	row, err = Live(db.HopperJob{
		ID: *r.ID, Queue: deref(r.Queue), Kind: deref(r.Kind), Version: derefOr(r.Version), Payload: r.Payload,
		State: deref(r.State), Priority: derefOr(r.Priority), RunAt: derefOr(r.RunAt),
		Attempt: derefOr(r.Attempt), MaxAttempts: derefOr(r.MaxAttempts),
		LeaseOwner: r.LeaseOwner, LeaseUntil: r.LeaseUntil, UniqueKey: r.UniqueKey,
		Errors: r.Errors, CreatedAt: derefOr(r.CreatedAt), Meta: r.Meta, ConcurrencyKey: r.ConcurrencyKey,
	})
	return row, true, err
}

func derefOr[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
