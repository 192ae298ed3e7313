// Package bed is what the whole-process suites under tests/ share: the
// job type their worker processes run, a logger that keeps their output
// quiet, and the hopper binary, built once per test binary. Each suite is
// a package of its own (tests: the CLI and deployments; tests/chaos:
// worker processes killed, stalled and restarted), so go test runs them
// side by side.
package bed

import (
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Chore is the payload of the suites' jobs.
type Chore struct {
	N int `json:"n"`
}

// Beat is the payload of the suites' scheduled jobs: the slot it fired for.
type Beat struct {
	Slot time.Time `json:"slot"`
}

// QuietLog discards a worker's log lines: the suites judge runs from the
// database, never from logs.
var QuietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// BuildHopper builds the hopper command from the repository (cmd/hopper,
// found from dir, a folder inside the repository) into a temporary folder
// and returns its path, and a function that removes it.
func BuildHopper(dir string) (bin string, remove func(), err error) {
	tmp, err := os.MkdirTemp("", "hopper-cli-test")
	if err != nil {
		return "", nil, err
	}
	bin = filepath.Join(tmp, "hopper")
	root, err := repoRoot(dir)
	if err != nil {
		_ = os.RemoveAll(tmp)
		return "", nil, err
	}
	build := exec.Command("go", "build", "-o", bin, "./cmd/hopper")
	build.Dir = root
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		_ = os.RemoveAll(tmp)
		return "", nil, err
	}
	return bin, func() { _ = os.RemoveAll(tmp) }, nil
}

// repoRoot is the folder of the go.mod above dir.
func repoRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}
