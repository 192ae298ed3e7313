package worker

// Outcome names, as the tests see them.
const (
	OutcomeDone        = "done"
	OutcomeFailed      = "failed"
	OutcomeDead        = "dead"
	OutcomeRefused     = "refused"
	OutcomeUnconfirmed = "unconfirmed"
	OutcomeUnrecorded  = "unrecorded"
)

// ObserveOutcomes makes fn see every result the worker settles, with its
// outcome's name. Set it before Run.
func ObserveOutcomes(w *Worker, fn func(id int64, attempt int32, outcome string)) {
	w.observe = func(id int64, attempt int32, o outcome) { fn(id, attempt, o.String()) }
}

// HeldClaims is how many claims the worker's heartbeat keeps extending.
func HeldClaims(w *Worker) int { return w.claims.len() }

// Beats is how many heartbeats the worker has done.
func Beats(w *Worker) int64 { return w.beats.Load() }
