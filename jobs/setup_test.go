package jobs_test

import (
	"testing"
	"time"

	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// TestMain skips the package without a database and fails it on leaked
// goroutines.
func TestMain(m *testing.M) { testdb.Main(m) }

// bundle is the test bed's Bundle; this package's helpers hang on it.
type bundle struct{ *testdb.Bundle }

func setup(t *testing.T) *bundle {
	t.Helper()
	return &bundle{testdb.SetupWithin(t, 2*time.Minute)}
}

// live is the number of live jobs (testdb's Totals without the dead).
func (b *bundle) live(t *testing.T) int64 {
	t.Helper()
	n, _ := b.Totals(t)
	return n
}
