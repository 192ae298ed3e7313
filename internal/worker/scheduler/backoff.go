package scheduler

import "time"

// scheduleBackoff holds the schedules whose last fire failed (their payload
// function panicked or returned an error, their enqueue was refused) and
// when each may be tried again. A failed fire rolls back and leaves its
// schedule the earliest due: without this, every pass would take it first,
// fail again and stop, and no other schedule would ever fire. Each worker
// keeps its own: a failure is usually the code's, which every worker runs.
// Owned by the goroutine of Scheduler.Run.
type scheduleBackoff map[string]scheduleFailing

type scheduleFailing struct {
	failures int
	until    time.Time
}

// scheduleRetryDelay is how long a schedule that failed n times in a row
// waits: 1s, doubling, at most a minute.
func scheduleRetryDelay(n int) time.Duration {
	return min(time.Second<<min(n-1, 6), time.Minute)
}

// failed notes a failure of name's fire and returns how long it waits.
func (b scheduleBackoff) failed(name string, now time.Time) time.Duration {
	f := b[name]
	f.failures++
	d := scheduleRetryDelay(f.failures)
	f.until = now.Add(d)
	b[name] = f
	return d
}

// succeeded forgets name's failures.
func (b scheduleBackoff) succeeded(name string) { delete(b, name) }

// ready returns the names not waiting out a failure at now.
func (b scheduleBackoff) ready(names []string, now time.Time) []string {
	if len(b) == 0 {
		return names
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		if f, ok := b[n]; !ok || !now.Before(f.until) {
			out = append(out, n)
		}
	}
	return out
}

// nextRetry is when the first schedule waiting out a failure may be tried
// again; zero when none waits.
func (b scheduleBackoff) nextRetry() time.Time {
	var next time.Time
	for _, f := range b {
		if next.IsZero() || f.until.Before(next) {
			next = f.until
		}
	}
	return next
}
