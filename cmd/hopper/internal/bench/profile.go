package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync/atomic"
)

// Profiles of the worker process (--profile DIR): the parent names the
// files and hands them to the worker process in its environment; the
// worker process profiles its CPU from start to stop, and writes the
// allocations it made (pprof's allocs profile: sampled, every allocation
// since the start) when it stops. `go tool pprof -top FILE` reads them.

const (
	cpuProfileEnv   = "HOPPER_BENCH_CPUPROFILE"
	allocProfileEnv = "HOPPER_BENCH_ALLOCPROFILE"
)

// profileSeq numbers the worker processes of one run, so that a mode
// that starts several (the continuous run and its history run, a drain
// per size) keeps each one's profiles.
var profileSeq atomic.Int64

// profileEnv is the environment that makes the worker process measured
// as label write its profiles into cfg.ProfileDir (none without one).
func profileEnv(cfg Config, label string) []string {
	if cfg.ProfileDir == "" {
		return nil
	}
	base := filepath.Join(cfg.ProfileDir, fmt.Sprintf("%02d-%s", profileSeq.Add(1), label))
	if cfg.Log != nil {
		fmt.Fprintf(cfg.Log, "profiles of the %s worker process: %s.cpu.pprof, %s.allocs.pprof\n", label, base, base)
	}
	return []string{cpuProfileEnv + "=" + base + ".cpu.pprof", allocProfileEnv + "=" + base + ".allocs.pprof"}
}

// startProfiles starts the profiles the environment asks for; stop ends
// them and writes the allocation profile.
func startProfiles() (stop func() error, err error) {
	var stops []func() error
	if path := os.Getenv(cpuProfileEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		stops = append(stops, func() error { pprof.StopCPUProfile(); return f.Close() })
	}
	if path := os.Getenv(allocProfileEnv); path != "" {
		stops = append(stops, func() error {
			f, err := os.Create(path)
			if err != nil {
				return fmt.Errorf("allocation profile: %w", err)
			}
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				f.Close()
				return fmt.Errorf("allocation profile: %w", err)
			}
			return f.Close()
		})
	}
	return func() error {
		var first error
		for _, s := range stops {
			if err := s(); err != nil && first == nil {
				first = err
			}
		}
		return first
	}, nil
}

// workerLabel names a worker process after its measurement (kind) and
// what its run adds: kept history, concurrency keys and their limit,
// sequences, several queues.
func (cfg Config) workerLabel(kind string) string {
	label := kind
	add := func(on bool, part string) {
		if on {
			label += "-" + part
		}
	}
	add(cfg.keep > 0, "history")
	add(cfg.keyed > 0, "keys")
	add(cfg.flow.keyLimit > 0, "limit")
	add(cfg.flow.fair, "fair")
	add(cfg.sequenced > 0, "sequences")
	add(cfg.queues > 1, fmt.Sprintf("%dqueues", cfg.queues))
	return label
}
