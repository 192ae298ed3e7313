package loop

import "time"

// RetryDelay is how long a loop whose statements failed failures times in
// a row waits before it tries again: 200ms, doubling, at most 5s. The
// worker's loops that retry at once rather than on their interval (claims,
// results, LISTEN, schedule fires) share it, so that an outage slows them
// all alike.
func RetryDelay(failures int) time.Duration {
	d := 100 * time.Millisecond << min(failures, 6)
	return min(d, 5*time.Second)
}
