package licensecheck_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when goroutines outlive its tests, as every
// other test package does.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
