package worker

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
)

// outcome is what became of one recorded result. Logs and metrics count
// exactly these, and a result is only ever given the outcome the database
// proves.
type outcome int

const (
	// outcomeRetry: not settled yet, the statement must run (again).
	outcomeRetry outcome = iota
	// outcomeDone: the ack took effect: the job is complete.
	outcomeDone
	// outcomeFailed: the nack took effect and the job will be retried.
	outcomeFailed
	// outcomeDead: the nack took effect and moved the job to the dead table.
	outcomeDead
	// outcomeCancelled: the job ended as cancelled: its handler cancelled
	// it (the nack took effect), or an operator did while it ran.
	outcomeCancelled
	// outcomeSnoozed: the handler's snooze took effect: the job waits,
	// uncharged.
	outcomeSnoozed
	// outcomeRefused: the (id, attempt) fence matched another claim (the
	// lease was lost): the result had no effect and the job runs again or
	// already ran elsewhere.
	outcomeRefused
	// outcomeUnconfirmed: a statement carrying the result may have committed
	// but its reply was lost, and the database no longer shows which.
	outcomeUnconfirmed
	// outcomeUnrecorded: the result could not be sent before the shutdown
	// deadline, or the server refused it in every form: the job runs again
	// once its lease expires.
	outcomeUnrecorded
)

// public is the outcome as hooks are told it.
func (o outcome) public() Outcome {
	return [...]Outcome{"", OutcomeDone, OutcomeFailed, OutcomeDead, OutcomeCancelled, OutcomeSnoozed,
		OutcomeRefused, OutcomeUnconfirmed, OutcomeUnrecorded}[o]
}

func (o outcome) String() string {
	return [...]string{"retry", "done", "failed", "dead", "cancelled", "snoozed", "refused", "unconfirmed", "unrecorded"}[o]
}

// outcome is what a nack of this action that took effect did; dead says
// whether NackBatch moved the job to the dead table.
func (a action) outcome(dead bool) outcome {
	switch {
	case a == actCancel:
		return outcomeCancelled
	case a == actSnooze:
		return outcomeSnoozed
	case dead:
		return outcomeDead
	default:
		return outcomeFailed
	}
}

// notSent reports whether a failed statement certainly had no effect: the
// server refused it (an error reply means the implicit transaction rolled
// back), or it never left this process. Anything else — a timeout, a
// connection lost mid-way — may have committed.
func notSent(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) || pgconn.SafeToRetry(err)
}

// fateOfAck settles an ack (or an AckTx'd job) that the fenced delete did
// not match, or whose statement may have committed unseen, from what the
// database shows now. heldThen reports whether the claim's lease still held
// when the fate was read: nobody else could have touched the row before.
func fateOfAck(f db.ClaimFatesRow, heldThen bool) outcome {
	switch {
	case claimIntact(f):
		return outcomeRetry // nothing took effect yet
	case f.HistoryAttempt != nil && *f.HistoryAttempt == f.Attempt:
		return outcomeDone // completed by this claim, and kept: only an ack does that
	case cancelledByOperator(f):
		return outcomeCancelled
	case f.LiveAttempt != nil || f.DeadAttempt != nil:
		return outcomeRefused // an ack deletes: a row still there was not ours to delete
	case heldThen:
		return outcomeDone // gone while only we could touch it: our delete
	default:
		return outcomeUnconfirmed // gone, but someone else may have finished it
	}
}

// fateOfNack settles a nack the same way. A committed retry, dead or
// cancel always leaves its entry in the job's history (live or dead) under
// its attempt, which a sweep ("lease expired") or an operator's cancel
// (none) does not; a snooze leaves no entry, but the job still live under
// its attempt and no longer running.
func fateOfNack(f db.ClaimFatesRow, act action, ackedInTx, heldThen bool) outcome {
	deadNow := f.DeadAttempt != nil && *f.DeadAttempt == f.Attempt
	switch {
	case claimIntact(f):
		return outcomeRetry
	case f.AttemptRecorded && f.AttemptError == sweptError:
		return outcomeRefused
	case ackedInTx && f.HistoryAttempt != nil && *f.HistoryAttempt == f.Attempt:
		return outcomeDone // the handler's AckTx committed and kept the job
	case cancelledByOperator(f):
		return outcomeCancelled
	case act == actSnooze && f.LiveAttempt != nil && *f.LiveAttempt == f.Attempt && !f.AttemptRecorded:
		return outcomeSnoozed
	case act == actSnooze && f.LiveAttempt != nil && *f.LiveAttempt > f.Attempt && !f.AttemptRecorded:
		return outcomeUnconfirmed // snoozed, then claimed again; or given back and claimed: nothing tells which
	case act == actCancel && f.AttemptRecorded && deadNow && f.DeadState != nil && *f.DeadState == "cancelled":
		return outcomeCancelled
	case act != actSnooze && act != actCancel && f.AttemptRecorded && deadNow:
		return outcomeDead
	case act != actSnooze && act != actCancel && f.AttemptRecorded:
		return outcomeFailed
	case f.LiveAttempt != nil || f.DeadAttempt != nil || f.HistoryAttempt != nil:
		return outcomeRefused // claimed again, cancelled or released without our entry
	case ackedInTx && heldThen:
		return outcomeDone // the handler's AckTx transaction committed
	default:
		return outcomeUnconfirmed
	}
}

// cancelledByOperator: the job went to the dead table as cancelled under
// this claim's attempt with no history entry for it: an operator's Cancel
// (a handler's own Cancel records an entry).
func cancelledByOperator(f db.ClaimFatesRow) bool {
	return f.DeadAttempt != nil && *f.DeadAttempt == f.Attempt && f.DeadState != nil &&
		*f.DeadState == string(jobs.StateCancelled) && !f.AttemptRecorded
}

// claimIntact: the job is live, running under this very claim: no
// statement of ours took effect yet.
func claimIntact(f db.ClaimFatesRow) bool {
	return f.LiveAttempt != nil && *f.LiveAttempt == f.Attempt && f.LiveState != nil && *f.LiveState == "running"
}

// sweptError is the history entry Sweep writes (queries/sweep.sql).
const sweptError = "lease expired"

// report counts and logs a settled result, and retires its claim.
func (r *run) report(c completion, o outcome) {
	w := r.w
	q, k := c.job.queue.Name(), c.job.kind
	switch o {
	case outcomeDone:
		w.metrics.outcome(q, k, OutcomeDone)
	case outcomeFailed:
		w.metrics.outcome(q, k, OutcomeFailed)
	case outcomeDead:
		w.metrics.outcome(q, k, OutcomeDead)
	case outcomeCancelled:
		w.metrics.outcome(q, k, OutcomeCancelled)
	case outcomeSnoozed:
		w.metrics.outcome(q, k, OutcomeSnoozed)
	case outcomeRefused:
		w.metrics.outcome(q, k, OutcomeRefused)
		w.log.Warn("result refused: the job is no longer this worker's (its lease was lost and it runs again elsewhere, or it was cancelled)",
			"job_id", c.job.id, "kind", k, "attempt", c.job.attempt, "ok", c.ok())
	case outcomeUnconfirmed:
		w.metrics.outcome(q, k, OutcomeUnconfirmed)
		w.log.Warn("result unconfirmed: its statement may have committed, but the reply was lost and the database no longer shows it",
			"job_id", c.job.id, "kind", k, "attempt", c.job.attempt, "ok", c.ok())
	case outcomeUnrecorded:
		w.metrics.outcome(q, k, OutcomeUnrecorded)
		r.unrecorded.Add(1)
		w.log.Error("result not recorded (the shutdown deadline passed, or the server refused it): the job runs again once its lease expires or this worker is gone",
			"job_id", c.job.id, "kind", k, "attempt", c.job.attempt, "ok", c.ok())
	}
	if w.observe != nil {
		w.observe(c.job.id, c.job.attempt, o)
	}
	r.executor.told(c.job, o.public())
	c.job.recorded()
}
