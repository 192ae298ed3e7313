package queries_test

import (
	"testing"

	"github.com/hopperq/hopper/internal/testdb"
)

// TestMain skips the package without a database and fails it on leaked
// goroutines.
func TestMain(m *testing.M) { testdb.Main(m) }
