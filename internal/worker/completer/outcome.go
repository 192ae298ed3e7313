package completer

import (
	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
)

// Outcome is what became of one recorded result. Logs and metrics count
// exactly these, and a result is only ever given the outcome the database
// proves.
type Outcome int

const (
	// outcomeUnsettled: not settled yet, the statement must run (again);
	// never reported.
	outcomeUnsettled Outcome = iota
	// OutcomeDone: the ack took effect: the job is complete.
	OutcomeDone
	// OutcomeFailed: the nack took effect and the job will be retried.
	OutcomeFailed
	// OutcomeDead: the nack took effect and moved the job to the dead table.
	OutcomeDead
	// OutcomeCancelled: the job ended as cancelled: its handler cancelled
	// it (the nack took effect), or an operator did while it ran.
	OutcomeCancelled
	// OutcomeSnoozed: the handler's snooze took effect: the job waits,
	// uncharged.
	OutcomeSnoozed
	// OutcomeRefused: the (id, attempt) fence matched another claim (the
	// lease was lost): the result had no effect and the job runs again or
	// already ran elsewhere.
	OutcomeRefused
	// OutcomeUnconfirmed: a statement carrying the result may have committed
	// but its reply was lost, and the database no longer shows which.
	OutcomeUnconfirmed
	// OutcomeUnrecorded: the result could not be sent before the shutdown
	// deadline, or the server refused it in every form: the job runs again
	// once its lease expires.
	OutcomeUnrecorded
)

func (o Outcome) String() string {
	return [...]string{"unsettled", "done", "failed", "dead", "cancelled", "snoozed", "refused", "unconfirmed", "unrecorded"}[o]
}

// outcome is what a nack of this action that took effect did; dead says
// whether NackBatch moved the job to the dead table.
func (a Action) outcome(dead bool) Outcome {
	switch {
	case a == ActionCancel:
		return OutcomeCancelled
	case a == ActionSnooze:
		return OutcomeSnoozed
	case dead:
		return OutcomeDead
	default:
		return OutcomeFailed
	}
}

// fateOfAck settles an ack (or an AckTx'd job) that the fenced delete did
// not match, or whose statement may have committed unseen, from what the
// database shows now. heldThen reports whether the claim's lease still held
// when the fate was read: nobody else could have touched the row before.
func fateOfAck(f db.ClaimFatesRow, heldThen bool) Outcome {
	switch {
	case claimIntact(f):
		return outcomeUnsettled // nothing took effect yet
	case f.HistoryAttempt != nil && *f.HistoryAttempt == f.Attempt:
		return OutcomeDone // completed by this claim, and kept: only an ack does that
	case CancelledByOperator(f):
		return OutcomeCancelled
	case f.LiveAttempt != nil || f.DeadAttempt != nil:
		return OutcomeRefused // an ack deletes: a row still there was not ours to delete
	case heldThen:
		return OutcomeDone // gone while only we could touch it: our delete
	default:
		return OutcomeUnconfirmed // gone, but someone else may have finished it
	}
}

// fateOfNack settles a nack the same way. A committed retry, dead or
// cancel always leaves its entry in the job's history (live or dead) under
// its attempt, which a sweep ("lease expired") or an operator's cancel
// (none) does not; a snooze leaves no entry, but the job still live under
// its attempt and no longer running.
func fateOfNack(f db.ClaimFatesRow, act Action, ackedInTx, heldThen bool) Outcome {
	deadNow := f.DeadAttempt != nil && *f.DeadAttempt == f.Attempt
	switch {
	case claimIntact(f):
		return outcomeUnsettled
	case f.AttemptRecorded && f.AttemptError == sweptError:
		return OutcomeRefused
	case ackedInTx && f.HistoryAttempt != nil && *f.HistoryAttempt == f.Attempt:
		return OutcomeDone // the handler's AckTx committed and kept the job
	case CancelledByOperator(f):
		return OutcomeCancelled
	case act == ActionSnooze && f.LiveAttempt != nil && *f.LiveAttempt == f.Attempt && !f.AttemptRecorded:
		return OutcomeSnoozed
	case act == ActionSnooze && f.LiveAttempt != nil && *f.LiveAttempt > f.Attempt && !f.AttemptRecorded:
		return OutcomeUnconfirmed // snoozed, then claimed again; or given back and claimed: nothing tells which
	case act == ActionCancel && f.AttemptRecorded && deadNow && f.DeadState != nil && *f.DeadState == "cancelled":
		return OutcomeCancelled
	case act != ActionSnooze && act != ActionCancel && f.AttemptRecorded && deadNow:
		return OutcomeDead
	case act != ActionSnooze && act != ActionCancel && f.AttemptRecorded:
		return OutcomeFailed
	case f.LiveAttempt != nil || f.DeadAttempt != nil || f.HistoryAttempt != nil:
		return OutcomeRefused // claimed again, cancelled or released without our entry
	case ackedInTx && heldThen:
		return OutcomeDone // the handler's AckTx transaction committed
	default:
		return OutcomeUnconfirmed
	}
}

// CancelledByOperator reports whether a claim's fate shows an operator's
// Cancel: the job went to the dead table as cancelled under the claim's
// attempt with no history entry for it (a handler's own Cancel records
// an entry, a sweep too). The lease extension tells a lost job's cause with it.
func CancelledByOperator(f db.ClaimFatesRow) bool {
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
