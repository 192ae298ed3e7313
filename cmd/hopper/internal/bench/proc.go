package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat; it
// is 100 on every Linux platform Go supports.
const clockTicks = 100

// cpuSeconds reads a process's user+system CPU time from /proc.
func cpuSeconds(pid int) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after ")" are fixed.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(raw[i+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / clockTicks, nil
}

// peakRSS reads a process's peak resident memory (VmHWM) in bytes.
func peakRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// postgresProcs reads the CPU time of every process named postgres on this
// machine (the server, its backends, autovacuum, the WAL writer …), by pid.
// It is only meaningful when the database runs here.
func postgresProcs() map[int]float64 {
	out := map[int]float64{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		comm, err := os.ReadFile(filepath.Join(dir, "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(dir))
		if s, err := cpuSeconds(pid); err == nil {
			out[pid] = s
		}
	}
	return out
}

// clusterProcs lists the CPU time of one cluster's processes: its
// postmaster (pid) and the postmaster's children (backends, the WAL
// writer, autovacuum …), by pid, when several clusters run on this machine.
func clusterProcs(postmaster int) func() map[int]float64 {
	return func() map[int]float64 {
		out := map[int]float64{}
		for pid, s := range postgresProcs() {
			if pid == postmaster || parentPID(pid) == postmaster {
				out[pid] = s
			}
		}
		return out
	}
}

// parentPID reads a process's parent's pid from /proc (0 when it is gone).
func parentPID(pid int) int {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(string(raw[i+1:]))
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// pgMeter measures PostgreSQL's CPU over a span, sampling often so that
// backends which exit before the end (pgbench closes its connections) still
// count.
type pgMeter struct {
	procs       func() map[int]float64
	start, last map[int]float64
	stop        chan struct{}
	done        chan struct{}
}

func startPGMeter() *pgMeter { return startMeterOf(postgresProcs) }

// startMeterOf measures the CPU of the processes procs lists (by pid, with
// their CPU seconds so far), as startPGMeter does of all of PostgreSQL's.
func startMeterOf(procs func() map[int]float64) *pgMeter {
	m := &pgMeter{procs: procs, start: procs(), last: map[int]float64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			for pid, s := range m.procs() {
				m.last[pid] = s
			}
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

// seconds ends the span and returns the CPU seconds PostgreSQL spent in it
// (false when no postgres process runs on this machine).
func (m *pgMeter) seconds() (float64, bool) {
	close(m.stop)
	<-m.done
	for pid, s := range m.procs() {
		m.last[pid] = s
	}
	total := 0.0
	for pid, s := range m.last {
		total += s - m.start[pid] // a backend born during the span starts at 0
	}
	return total, len(m.last) > 0
}
