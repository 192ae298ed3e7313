package schema_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// TestMain skips the package without a database and fails it on leaked
// goroutines, but for golang-migrate's read-ahead: its Up reads the
// migrations after the one it runs, each in a goroutine that writes the
// file into a pipe until the migration is run, and returns on a failed
// migration without draining them (golang-migrate/migrate#1443), so each
// run the lock tests fail with a migration after the failing one
// (newestLocking is not the last) leaves one for good.
func TestMain(m *testing.M) {
	testdb.Main(m, goleak.IgnoreAnyFunction("github.com/golang-migrate/migrate/v4.(*Migration).Buffer"))
}
