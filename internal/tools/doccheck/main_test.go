package doccheck_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// hopperBin is the hopper command, built once for the package: the shell
// checks run it (with --help) to check the docs' hopper command lines.
var hopperBin string

// TestMain builds the hopper command, then fails the package when
// goroutines outlive its tests (a pool of the SQL checks not closed). It
// does not skip without a database: only the SQL checks need one, and they
// skip (or fail under CI) on their own.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "doccheck-hopper")
	if err != nil {
		panic(err)
	}
	hopperBin = filepath.Join(dir, "hopper")
	build := exec.Command("go", "build", "-o", hopperBin, filepath.Join(root, "cmd", "hopper"))
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		panic("build hopper: " + err.Error())
	}
	goleak.VerifyTestMain(removeAfter{m, dir})
}

// removeAfter runs the tests, then removes dir (goleak's VerifyTestMain
// exits the process: a defer in TestMain would not run).
type removeAfter struct {
	m   *testing.M
	dir string
}

func (r removeAfter) Run() int {
	defer os.RemoveAll(r.dir)
	defer testdb.DropSpares() // the migrated schemas kept for reuse
	return r.m.Run()
}
