package worker

import "github.com/hopperq/hopper/internal/worker/completer"

// The held job is what the completer records results of.
var _ completer.Job = (*heldJob)(nil)

// report settles a result the completer (or finish, at once) gave
// an outcome: it counts and logs it, tells the hooks, and retires its
// claim.
func (r *run) report(res completer.Completion, o completer.Outcome) {
	w := r.w
	c := res.Job.(*heldJob) // the completer records only the run's held jobs
	q, k := c.queue.Name(), c.kind
	public := publicOutcome(o)
	if public != "" {
		w.metrics.outcome(q, k, public)
	}
	acked := res.Action == completer.ActionAck
	switch o {
	case completer.OutcomeRefused:
		w.log.Warn("result refused: the job is no longer this worker's (its lease was lost and it runs again elsewhere, or it was cancelled)",
			"job_id", c.id, "kind", k, "attempt", c.attempt, "ok", acked)
	case completer.OutcomeUnconfirmed:
		w.log.Warn("result unconfirmed: its statement may have committed, but the reply was lost and the database no longer shows it",
			"job_id", c.id, "kind", k, "attempt", c.attempt, "ok", acked)
	case completer.OutcomeUnrecorded:
		r.unrecorded.Add(1)
		w.log.Error("result not recorded (the shutdown deadline passed, or the server refused it): the job runs again once its lease expires or this worker is gone",
			"job_id", c.id, "kind", k, "attempt", c.attempt, "ok", acked)
	}
	if w.observe != nil {
		w.observe(c.id, c.attempt, o)
	}
	r.told(c, public)
	c.recorded()
}

// publicOutcome is a settled result's outcome as metrics and hooks name
// it.
func publicOutcome(o completer.Outcome) Outcome {
	switch o {
	case completer.OutcomeDone:
		return OutcomeDone
	case completer.OutcomeFailed:
		return OutcomeFailed
	case completer.OutcomeDead:
		return OutcomeDead
	case completer.OutcomeCancelled:
		return OutcomeCancelled
	case completer.OutcomeSnoozed:
		return OutcomeSnoozed
	case completer.OutcomeRefused:
		return OutcomeRefused
	case completer.OutcomeUnconfirmed:
		return OutcomeUnconfirmed
	case completer.OutcomeUnrecorded:
		return OutcomeUnrecorded
	}
	return "" // unsettled: the completer never reports it
}
