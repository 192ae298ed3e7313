package testdb

import "testing"

// Slow marks a test of the slow suites: whole processes killed and
// restarted, outside programs (PgBouncer, Python, npm, sqlc builds), the
// benchmark, a million rows. `go test -short` (make test-short, the fast
// lane) skips it; make test and CI run it. why says what makes it slow.
func Slow(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("slow (%s): -short skips it; make test runs it", why)
	}
}

// Rounds is how many rounds a seeded property test runs: full under make
// test, a quarter of it (at least one) under -short, where the fast lane
// wants a quick answer more than a deep search. The seed printed repeats
// either.
func Rounds(full int) int {
	if testing.Short() {
		return max(full/4, 1)
	}
	return full
}
