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
