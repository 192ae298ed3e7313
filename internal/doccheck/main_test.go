package doccheck_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when goroutines outlive its tests (a pool of
// the SQL checks not closed). It does not skip without a database: only
// the SQL checks need one, and they skip (or fail under CI) on their own.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
