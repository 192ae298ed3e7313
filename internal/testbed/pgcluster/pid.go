package pgcluster

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// PID is the cluster's postmaster's process id, from the first line of
// its postmaster.pid: what a caller needs to tell this cluster's processes
// (the postmaster and its children) from another's on the same machine, to
// measure their CPU or pin them to a core.
func (c *Cluster) PID() (int, error) {
	f, err := os.Open(filepath.Join(c.data, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("pgcluster: the postmaster's pid: %w", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	if !s.Scan() {
		return 0, fmt.Errorf("pgcluster: the postmaster's pid: %s is empty", f.Name())
	}
	pid, err := strconv.Atoi(s.Text())
	if err != nil {
		return 0, fmt.Errorf("pgcluster: the postmaster's pid in %s: %w", f.Name(), err)
	}
	return pid, nil
}
