package shop_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when its tests pass but leave goroutines
// running (a pool or worker not stopped). The example cannot import
// Hopper's internal/testbed/testdb, so it calls goleak directly.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
