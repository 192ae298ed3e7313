// Package chaos holds the suites that run worker processes and kill,
// stall, stop and restart them (chaos, poison, recovery, schedules under
// kills, sequences and workflows under kills, operations across
// processes), judged from the database. Worker processes are this test
// binary run again: TestMain runs the worker an environment variable names
// instead of the tests.
package chaos

import (
	"os"
	"testing"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/tests/internal/bed"
)

func TestMain(m *testing.M) {
	for env, run := range map[string]func() int{
		chaosEnv:        runChaosWorker,
		operateEnv:      runOperateWorker,
		scheduleEnv:     runScheduleWorker,
		poisonEnv:       runPoisonWorker,
		seqChaosEnv:     runSeqChaosWorker,
		durableChaosEnv: runDurableChaosWorker,
	} {
		if os.Getenv(env) != "" {
			os.Exit(run())
		}
	}
	testdb.Main(m)
}

// The suites' shared job types and quiet logger (tests/internal/bed).
type (
	Chore = bed.Chore
	Beat  = bed.Beat
)

var quietLog = bed.QuietLog
