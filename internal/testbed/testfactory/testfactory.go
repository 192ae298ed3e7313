// Package testfactory writes jobs straight into Hopper's tables, in any
// state, attempt, lease or age, so a test starts from the state it is
// about instead of reaching it through enqueue, claim and an expired
// lease.
//
// Its statements live in factory.sql, compiled by sqlc into factorydb
// (see sqlc.yaml): test-only SQL stays out of queries/, which package db
// and `hopper sql export` ship to users.
package testfactory

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testfactory/factorydb"
)

// The states Job writes. Pending, scheduled and running jobs are live
// (hopper_jobs); dead and cancelled ones are in hopper_dead_jobs;
// completed ones in hopper_job_history.
const (
	Pending   = "pending"
	Scheduled = "scheduled"
	Running   = "running"
	Dead      = "dead"
	Cancelled = "cancelled"
	Completed = "completed"
)

// JobOpts describes the job to write. The zero value is a pending job of
// kind "k" in queue "default", payload {}, attempt 0 of 25, created and
// due now.
type JobOpts struct {
	State    string // Pending unless set
	Queue    string // "default" unless set
	Kind     string // "k" unless set
	Version  int32  // 1 unless set
	Priority int16
	Payload  json.RawMessage // {} unless set
	Meta     json.RawMessage // NULL unless set

	// Attempt is the number of claims so far; a running, dead or
	// completed job has had at least one, so 0 means 1 for them.
	Attempt     int32
	MaxAttempts int32           // 25 unless set
	Errors      json.RawMessage // [] unless set: the failed attempts

	// CreatedAt and RunAt are the database's now() unless set: a job's
	// age is CreatedAt, a scheduled job's due time RunAt.
	CreatedAt *time.Time
	RunAt     *time.Time

	// LeaseOwner and LeaseUntil are a running job's claim: "testfactory"
	// and 30 seconds from the database's now() unless set. A LeaseUntil
	// in the past is a lease that ran out (the sweep's work).
	LeaseOwner string
	LeaseUntil *time.Time

	UniqueKey      string // none unless set
	ConcurrencyKey string // none unless set

	// FinishedAt is when a dead, cancelled or completed job ended (now()
	// unless set); Reason a dead or cancelled job's ("testfactory" unless
	// set); Result a completed job's; KeepUntil how long a completed job
	// stays in the history (a day from now unless set).
	FinishedAt *time.Time
	Reason     string
	Result     json.RawMessage
	KeepUntil  *time.Time
}

// Job writes one job as opts describe and returns it as every state's
// view (hopper_all_jobs) shows it. It fails the test on any error.
func Job(ctx context.Context, t testing.TB, exec db.DBTX, opts *JobOpts) db.HopperAllJob {
	t.Helper()
	if opts == nil {
		opts = &JobOpts{}
	}
	o := *opts
	def(&o.State, Pending)
	def(&o.Queue, "default")
	def(&o.Kind, "k")
	def(&o.Version, 1)
	def(&o.MaxAttempts, 25)
	if o.Payload == nil {
		o.Payload = json.RawMessage(`{}`)
	}
	if o.Errors == nil {
		o.Errors = json.RawMessage(`[]`)
	}
	if o.Attempt == 0 && o.State != Pending && o.State != Scheduled && o.State != Cancelled {
		o.Attempt = 1
	}
	if o.LeaseOwner != "" && o.State != Running || o.LeaseUntil != nil && o.State != Running {
		t.Fatalf("testfactory: a %s job has no lease", o.State)
	}

	q := factorydb.New(exec)
	var id int64
	var err error
	switch o.State {
	case Pending, Scheduled, Running:
		id, err = q.FactoryInsertLive(ctx, factorydb.FactoryInsertLiveParams{
			Queue: o.Queue, Kind: o.Kind, Version: o.Version, Payload: o.Payload, State: o.State,
			Priority: o.Priority, RunAt: o.RunAt, Attempt: o.Attempt, MaxAttempts: o.MaxAttempts,
			LeaseOwner: opt(o.LeaseOwner), LeaseUntil: o.LeaseUntil, UniqueKey: opt(o.UniqueKey),
			Errors: o.Errors, CreatedAt: o.CreatedAt, Meta: o.Meta, ConcurrencyKey: opt(o.ConcurrencyKey),
		})
	case Dead, Cancelled:
		def(&o.Reason, "testfactory")
		id, err = q.FactoryInsertDead(ctx, factorydb.FactoryInsertDeadParams{
			Queue: o.Queue, Kind: o.Kind, Version: o.Version, Payload: o.Payload, Priority: o.Priority,
			Attempt: o.Attempt, MaxAttempts: o.MaxAttempts, UniqueKey: opt(o.UniqueKey), Errors: o.Errors,
			Reason: o.Reason, CreatedAt: o.CreatedAt, FinishedAt: o.FinishedAt, State: o.State,
			RunAt: o.RunAt, Meta: o.Meta, ConcurrencyKey: opt(o.ConcurrencyKey),
		})
	case Completed:
		id, err = q.FactoryInsertCompleted(ctx, factorydb.FactoryInsertCompletedParams{
			Queue: o.Queue, Kind: o.Kind, Version: o.Version, Payload: o.Payload, Priority: o.Priority,
			Attempt: o.Attempt, MaxAttempts: o.MaxAttempts, UniqueKey: opt(o.UniqueKey), Errors: o.Errors,
			RunAt: o.RunAt, Result: o.Result, CreatedAt: o.CreatedAt, FinishedAt: o.FinishedAt,
			KeepUntil: o.KeepUntil, Meta: o.Meta, ConcurrencyKey: opt(o.ConcurrencyKey),
		})
	default:
		t.Fatalf("testfactory: no state %q", o.State)
	}
	if err != nil {
		t.Fatalf("testfactory: insert a %s job: %v", o.State, err)
	}
	j, err := db.New(exec).FindJob(ctx, id)
	if err != nil {
		t.Fatalf("testfactory: read job %d back: %v", id, err)
	}
	return j
}

// Ptr is &v, for JobOpts' times: testfactory.Ptr(time.Now().Add(-time.Hour)).
func Ptr[T any](v T) *T { return &v }

func def[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// WorkerOpts describes a row of the worker registry. Zero fields take the
// defaults each names.
type WorkerOpts struct {
	ID     string   // "testfactory-worker" unless set
	Host   string   // "testfactory-host" unless set
	PID    int32    // 1 unless set
	Queues []string // {"default"} unless set
	// Version is its hopper_version ('' unless set).
	Version string
	// StaleAfter is how long after its last beat it is gone (3s unless
	// set); LastBeatAgo how long ago that beat was (0: now). A LastBeatAgo
	// past StaleAfter is a gone worker.
	StaleAfter, LastBeatAgo time.Duration
}

// Worker writes one worker row as opts describe, for tests of what is done
// with live and gone workers without running them. It fails the test on
// any error.
func Worker(ctx context.Context, t testing.TB, exec db.DBTX, opts *WorkerOpts) {
	t.Helper()
	if opts == nil {
		opts = &WorkerOpts{}
	}
	o := *opts
	def(&o.ID, "testfactory-worker")
	def(&o.Host, "testfactory-host")
	def(&o.PID, 1)
	def(&o.StaleAfter, 3*time.Second)
	if o.Queues == nil {
		o.Queues = []string{"default"}
	}
	err := factorydb.New(exec).FactoryInsertWorker(ctx, factorydb.FactoryInsertWorkerParams{
		ID: o.ID, Host: o.Host, Pid: o.PID, HopperVersion: o.Version, Queues: o.Queues,
		StaleAfterMs: o.StaleAfter.Milliseconds(), LastSeenAgoMs: o.LastBeatAgo.Milliseconds(),
	})
	if err != nil {
		t.Fatalf("testfactory: insert worker %s: %v", o.ID, err)
	}
}

// StepOpts describes one record a durable handler left (worker.Step,
// Sleep, AwaitEvent). Zero fields take the defaults each names.
type StepOpts struct {
	Position int32  // 0 unless set
	Name     string // "step" unless set
	Kind     string // "step", "sleep" or "event"; "step" unless set
	// State is "done", "waiting" or "timed_out"; "done" unless set.
	State string
	// Result is a step's result or an event's payload (none unless set);
	// Until a sleep's wake time or an event wait's deadline.
	Result json.RawMessage
	Until  *time.Time
}

// Step writes one durable record of live job id as opts describe, and
// marks the job durable as the worker does, so that its end removes the
// record. It fails the test on any error.
func Step(ctx context.Context, t testing.TB, exec db.DBTX, id int64, opts *StepOpts) {
	t.Helper()
	if opts == nil {
		opts = &StepOpts{}
	}
	o := *opts
	def(&o.Name, "step")
	def(&o.Kind, "step")
	def(&o.State, "done")
	err := factorydb.New(exec).FactoryInsertStep(ctx, factorydb.FactoryInsertStepParams{
		JobID: id, Position: o.Position, Name: o.Name, Kind: o.Kind, State: o.State, Result: o.Result, Until: o.Until,
	})
	if err != nil {
		t.Fatalf("testfactory: insert step %d of job %d: %v", o.Position, id, err)
	}
}

// Progress records progress (JSON) for job id, as worker.SetProgress
// does. It fails the test on any error.
func Progress(ctx context.Context, t testing.TB, exec db.DBTX, id int64, progress json.RawMessage) {
	t.Helper()
	if err := factorydb.New(exec).FactorySetProgress(ctx, factorydb.FactorySetProgressParams{JobID: id, Progress: progress}); err != nil {
		t.Fatalf("testfactory: set progress of job %d: %v", id, err)
	}
}
