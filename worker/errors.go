package worker

import (
	"errors"

	"github.com/hopperq/hopper/internal/grants"
	"github.com/hopperq/hopper/internal/worker/commitfate"
	"github.com/hopperq/hopper/jobs"
)

// The worker's errors, to match with errors.Is. Each is wrapped with what
// was wrong; a handler's context names the cause of its cancellation with
// ErrLeaseLost, ErrCancelled or ErrShutdown (context.Cause). Run returns
// jobs.ErrNotMigrated when Hopper's tables are missing or older than this
// build needs.

// ErrIsolation is returned by Run when the pool's sessions default to an
// isolation level other than read committed (a role's or database's
// default_transaction_isolation): the claim under flow control would see
// a snapshot older than its lock. Give Hopper a pool whose sessions use
// read committed, for example with
// cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "read committed".
// AckTx returns it too, for a job of a sequence or a workflow acknowledged
// in a transaction that is not read committed. It is jobs.ErrIsolation.
var ErrIsolation = jobs.ErrIsolation

// ErrMissingGrants is returned by Run, before the worker claims anything,
// when the pool's role lacks a privilege a worker with its configuration
// needs on Hopper's schema: the least-privilege grants of
// docs/operating.md, hopper_rate_claims's only when a queue is flow
// controlled, hopper_schema_migrations's never (the version is checked
// another way when the role may not read it). The error names the GRANT
// statements to run as the schema's owner, or hopper grants ROLE --as
// worker --apply, which runs them all. It is schema.ErrMissingGrants.
var ErrMissingGrants = grants.ErrMissing

// ErrReadOnly is returned by Run when the worker's first write at start is
// refused as read-only (SQLSTATE 25006): its pool reaches a standby, or a
// primary a failover demoted. The message names the fix: a connection
// string that lists every node and sets target_session_attrs=read-write.
// Once started, the worker rides such refusals out instead (it replaces
// its pool's sessions and tries again; hopper_read_only_refusals_total
// counts them). AckTx returns it too. It is jobs.ErrReadOnly.
var ErrReadOnly = jobs.ErrReadOnly

// ErrLeaseBusy is returned by ExtendLease when the job's row stays locked
// by another transaction (for example one of the application's that
// selected it FOR UPDATE) through several tries: nothing was extended.
var ErrLeaseBusy = errors.New("hopper: job row locked by another transaction")

// ErrCommitUnknown is wrapped by the error of a write whose commit's
// outcome is unknown: the connection broke after the commit was sent and
// before its answer came (a lost reply), or Citus reported that a worker
// node's commit failed, which the node may have committed all the same.
// ExtendLease returns it when two extensions in a row had such an
// outcome: the lease may or may not have been extended. The worker's own
// claims and results never leave it unsettled: it reads what took effect
// and goes on from there (docs/guarantees.md). It is the error the
// worker's logs name for such a failure.
var ErrCommitUnknown = commitfate.ErrUnknown

// ErrLeaseLost is the cause of a handler context cancelled because its job's
// lease was lost (it expired and the job was swept or claimed again); the
// handler's result is then discarded. ExtendLease and AckTx return it too.
var ErrLeaseLost = errors.New("hopper: job lease lost")

// ErrShutdown is the cause of a handler context cancelled because the
// worker's shutdown deadline passed; the job is given back uncharged.
var ErrShutdown = errors.New("hopper: worker shutting down")

// ErrCancelled is the cause of a handler context cancelled because an
// operator cancelled the running job (hopper.Client.CancelJobs, `hopper jobs
// cancel`). The job is recorded as cancelled already; whatever the
// handler returns is discarded.
var ErrCancelled = errors.New("hopper: job cancelled")

// ErrInvalidSnooze is wrapped by the error Snooze and SnoozeUntil return
// for a time that is not in the future, or more than MaxSnooze away. A
// handler that returns it fails the attempt, with that message in the
// job's history, as for any error.
var ErrInvalidSnooze = errors.New("hopper: invalid snooze")

// ErrInvalidSchedule wraps every error of Schedule: a bad name, an
// expression that does not parse or never fires, an unknown time zone, a
// policy or enqueue option that makes no sense, or a second schedule of the
// same name.
var ErrInvalidSchedule = errors.New("hopper: invalid schedule")

// ErrWorkerIDInUse is returned by Run when Config.ID is held by another
// worker that still beats: two live workers with one ID would take each
// other's jobs away. The error names the holder's host and process id.
var ErrWorkerIDInUse = errors.New("hopper: worker ID in use by a live worker")

// ErrInvalidConfig wraps every configuration error.
var ErrInvalidConfig = errors.New("hopper: invalid worker config")

// ErrSuspended is wrapped by the error Sleep and AwaitEvent return while
// the job must wait: return it from the handler. The job gives up its
// slot and lease, uncharged, and runs again when its wait is over. A
// handler that returns nil instead is suspended all the same.
var ErrSuspended = errors.New("hopper: job suspended")

// ErrEventTimeout is wrapped by the error AwaitEvent returns when its
// timeout passed before the event was emitted (or an operator woke the
// job). The handler may go on: the timeout is recorded like a result.
var ErrEventTimeout = errors.New("hopper: event did not come in time")

// ErrUnknownPatch is wrapped by the error of a durable call that finds,
// at its place in the job's records, the marker of a patch its handler
// does not call Patched for: a newer build started the run (a rolling
// deploy). The job is given back for UnknownPatchDelay, uncharged, for a
// worker of that build; it is not a failure.
var ErrUnknownPatch = errors.New("hopper: the job's records hold a patch this build does not know")

// ErrNonDeterministic is wrapped by the error a durable call (Step,
// StepTx, Sleep, AwaitEvent) returns when the job's records say an
// earlier run made another call at this place: the handler's calls
// changed order or name between runs (a deploy changed the handler, or it
// chose its steps from something other than its payload and records).
// The error is Permanent: the job goes dead with it rather than replay a
// record into the wrong call. The dead job keeps its records, and its
// error says how to recover: deploy again the handler that made them,
// or one that makes the recorded calls first, then retry the dead job.
var ErrNonDeterministic = errors.New("hopper: durable calls differ from the job's records")

// ErrRecordTooLarge is wrapped by the error Step and StepTx return for a
// result larger than MaxRecordSize as PostgreSQL stores it (Permanent: it
// would fail every run), and SetProgress for a value larger than
// MaxProgressSize. The size is that of jsonb's text, the one the tables
// check: a space after every ',' and ':', numbers in plain notation.
var ErrRecordTooLarge = errors.New("hopper: durable record too large")

// ErrInvalidRecord is wrapped by the error Step and StepTx return for a
// result PostgreSQL's jsonb cannot hold at all: a NUL character (legal in
// a Go string), a lone surrogate, a number out of numeric's range
// (Permanent, as ErrRecordTooLarge), and SetProgress for such a value. A
// record the database refuses for its data is reported so too, never
// retried: the step's function would run again on every attempt.
var ErrInvalidRecord = errors.New("hopper: durable record not storable")

// ErrInvalidDurableCall is wrapped by the error of a durable call with a
// bad argument: an empty or too long name, a non-positive or too long
// duration. The error is permanent (the same call fails on every run) and
// names every problem of the call.
var ErrInvalidDurableCall = errors.New("hopper: invalid durable call")

// The worker's own sentinels, never returned to callers.

// errAbandoned is the cause of the context of a handler given up on.
var errAbandoned = errors.New("hopper: handler abandoned past its timeout")
