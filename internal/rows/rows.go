// Package rows turns the rows sqlc generates (package db) into the typed
// job row of package jobs: the one place where the public API and the
// generated code meet.
package rows

import (
	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
)

// Live converts a row of hopper_jobs (a claim, or GetJob). The error
// (from a malformed error history) wraps jobs.ErrUndecodable.
func Live(r db.HopperJob) (jobs.Row, error) {
	history, err := jobs.ParseErrors(r.Errors)
	return jobs.Row{
		ID: r.ID, Queue: r.Queue, Kind: r.Kind, Version: int(r.Version), Payload: r.Payload,
		State: jobs.State(r.State), Priority: int(r.Priority), RunAt: r.RunAt,
		Attempt: int(r.Attempt), MaxAttempts: int(r.MaxAttempts),
		LeaseOwner: deref(r.LeaseOwner), LeaseUntil: r.LeaseUntil, UniqueKey: deref(r.UniqueKey),
		Errors: history, CreatedAt: r.CreatedAt,
	}, err
}

// Any converts a row of hopper_all_jobs: a job in any state.
func Any(r db.HopperAllJob) (jobs.Row, error) {
	history, err := jobs.ParseErrors(r.Errors)
	return jobs.Row{
		ID: r.ID, Queue: r.Queue, Kind: r.Kind, Version: int(r.Version), Payload: r.Payload,
		State: jobs.State(r.State), Priority: int(r.Priority), RunAt: r.RunAt,
		Attempt: int(r.Attempt), MaxAttempts: int(r.MaxAttempts),
		LeaseOwner: deref(r.LeaseOwner), LeaseUntil: r.LeaseUntil, UniqueKey: deref(r.UniqueKey),
		Errors: history, CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt, Reason: deref(r.Reason),
		Result: r.Result,
	}, err
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
