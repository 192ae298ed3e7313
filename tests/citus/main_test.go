package citus

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests, checking that none leaves a goroutine behind, or, when the environment names a formation
// (chaosURLEnv), one of the chaos test's worker processes: this test
// binary run again, so that the test can kill it.
func TestMain(m *testing.M) {
	if os.Getenv(chaosURLEnv) != "" {
		os.Exit(runChaosWorker())
	}
	goleak.VerifyTestMain(m)
}
