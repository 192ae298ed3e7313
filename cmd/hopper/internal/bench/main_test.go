package bench

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when goroutines outlive its tests. Run with
// testWorkerArg first, the test binary is a benchmark worker process
// instead (runTestWorker), so that tests can drain jobs as the bench does
// without building the hopper binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == testWorkerArg {
		os.Exit(runTestWorker(os.Args[2:]))
	}
	goleak.VerifyTestMain(m)
}
