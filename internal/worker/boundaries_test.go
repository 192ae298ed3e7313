// Package worker_test checks the boundaries of the worker's runtime
// components (issue 66): each package under internal/worker imports none
// of the others but what they share, and nothing of worker/; worker/
// imports nothing of the test kits.
package worker_test

import (
	"go/build"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const module = "github.com/hopperq/hopper/"

// shared are the packages every component may import: what they share,
// owned by the runtime.
var shared = map[string]bool{"loop": true, "horizon": true, "announce": true, "detached": true, "commitfate": true}

// imports are the packages dir's non-test files import.
func imports(t *testing.T, dir string) []string {
	t.Helper()
	p, err := build.ImportDir(dir, 0)
	require.NoError(t, err, dir)
	return p.Imports
}

func TestComponentsImportNoOtherComponent(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	checked := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		checked++
		for _, imp := range imports(t, e.Name()) {
			require.NotEqual(t, module+"worker", imp, "%s imports worker/", e.Name())
			if rest, ok := strings.CutPrefix(imp, module+"internal/worker/"); ok {
				// The tests' bed (passbed) may import what it drives.
				require.True(t, shared[rest] || e.Name() == "passbed",
					"%s imports %s: a component imports only what they share (loop, horizon, announce, detached, commitfate)", e.Name(), imp)
			}
		}
	}
	require.GreaterOrEqual(t, checked, 8, "the components and what they share")
}

func TestWorkerImportsNoTestKit(t *testing.T) {
	t.Parallel()
	for _, imp := range imports(t, "../../worker") {
		for _, kit := range []string{"hoppertest", "internal/testbed/testdb", "internal/testbed/testfactory", "internal/testbed/passbed", "internal/testrun"} {
			require.False(t, imp == module+kit || strings.HasPrefix(imp, module+kit+"/"), "worker/ imports the test kit %s", imp)
		}
	}
}
