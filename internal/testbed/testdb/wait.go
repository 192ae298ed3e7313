package testdb

import (
	"testing"
	"time"
)

// WaitLimit is how long WaitFor waits: long enough for a loaded CI
// machine, so reaching it means a stuck test, not a slow one.
const WaitLimit = 90 * time.Second

// WaitFor polls cond (against the database, usually) until it holds, and
// fails the test after WaitLimit. It polls in the test's own goroutine, so
// cond may use require (which require.Eventually, calling it from a
// goroutine of its own, forbids).
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(WaitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for: %s", WaitLimit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WaitDrained polls left (how much work remains: jobs live, say) until it
// is zero, and fails the test only when it has not fallen for WaitLimit:
// a big run on a loaded machine may take longer than WaitLimit as a whole,
// and is stuck only when it stops making progress.
func WaitDrained(t testing.TB, what string, left func() int64) {
	t.Helper()
	least := left()
	deadline := time.Now().Add(WaitLimit)
	for least > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v without progress for: %s (%d left)", WaitLimit, what, least)
		}
		time.Sleep(10 * time.Millisecond)
		if n := left(); n < least {
			least, deadline = n, time.Now().Add(WaitLimit)
		}
	}
}
