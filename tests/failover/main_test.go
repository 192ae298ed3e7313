// Package failover runs Hopper across the failures of a highly available
// PostgreSQL: a pg_auto_failover formation (internal/testbed/hacluster) under load
// from producers that enqueue in transactions with business rows and three
// worker processes (this test binary run again), through a planned
// switchover, a node killed, a postmaster killed under its keeper, and a
// primary silenced behind the wire-fault proxy and failed over. The
// verdict comes from the tables the handlers write; the figures each
// scenario costs are printed. `make failover` runs it at full size with
// pg_auto_failover's default timings; `make test` at CI size.
package failover

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		os.Exit(runWorker())
	}
	os.Exit(m.Run())
}
