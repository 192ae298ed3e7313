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
