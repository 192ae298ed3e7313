package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// testWorkerArg, first on the test binary's command line, makes it a
// benchmark worker process (TestMain).
const testWorkerArg = "bench-test-worker"

// runTestWorker is the worker process of the tests' drains: RunWorkerProcess
// on DATABASE_URL until SIGTERM, as `hopper bench --role worker` is. Of the
// flags startWorkers passes it reads the workers and their slots, and the
// soak's retention and schedule; the rest (flow control) keep their zero
// values, which the tests' drains ask for anyway.
func runTestWorker(args []string) int {
	o := WorkerOptions{Workers: 1, Concurrency: 1}
	for i, arg := range args {
		if arg == "--ticks=true" {
			o.Ticks = true
		}
		if i+1 == len(args) {
			break
		}
		n, nErr := strconv.Atoi(args[i+1])
		d, dErr := time.ParseDuration(args[i+1])
		switch {
		case arg == "--workers" && nErr == nil:
			o.Workers = n
		case arg == "--concurrency" && nErr == nil:
			o.Concurrency = n
		case arg == "--keep-history" && dErr == nil:
			o.Keep = d
		case arg == "--dead-retention" && dErr == nil:
			o.DeadRetention = d
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := RunWorkerProcess(ctx, os.Getenv("DATABASE_URL"), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// The durable mode at a tiny size on the shared server, its drains worked
// by this test binary as the worker process: the report's shape, every
// figure present, none judged for speed.
func TestDurableMode(t *testing.T) {
	testdb.Slow(t, "a hopper bench mode runs, with worker processes")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := sharedServer(ctx, t)
	self, err := os.Executable()
	require.NoError(t, err)
	var log strings.Builder
	r, err := Run(ctx, Config{Mode: "durable", Workers: 1, Concurrency: 8, BatchSize: 100,
		Durable: DurableOptions{Jobs: 20, Calls: 30}, DatabaseURL: url, WorkerCommand: []string{self, testWorkerArg}, Log: &log})
	require.NoError(t, err, log.String())
	d := r.Durable
	require.NotNil(t, d)

	require.Equal(t, durableSteps, d.StepsPerJob)
	require.Equal(t, []string{durPlain, durSteps, durSteps, durPlain}, d.Order)
	require.Len(t, d.Rows, 2)
	for i, want := range []struct {
		name   string
		perJob int
		jobs   int
		label  string
	}{{durPlain, 1, 200, "200 plain jobs"}, {durSteps, durableSteps, 20, "20 durable jobs × 10 steps"}} {
		row := d.Rows[i]
		require.Equal(t, want.name, row.Name)
		require.Equal(t, want.label, row.Label)
		require.Equal(t, want.perJob, row.StepsPerJob)
		require.Len(t, row.Runs, 2)
		for _, run := range row.Runs {
			require.Equal(t, want.jobs, run.Jobs, "every job drained")
			require.Positive(t, run.JobsPerSecond)
			require.Positive(t, run.WorkerCPUPer1000+run.PostgresCPUPer1000, "some CPU was read")
		}
		require.Positive(t, row.JobsPerSecond)
		require.InDelta(t, row.JobsPerSecond*float64(want.perJob), row.StepsPerSecond, 1e-6)
	}
	require.Positive(t, d.Ratio)
	require.InDelta(t, d.Ratio, r.Ratios["durable_steps_to_plain"], 1e-12)

	tx := d.Tx
	require.NotNil(t, tx)
	require.Equal(t, 40, tx.Calls, "30 calls round up to two halves of whole jobs of 10 calls")
	require.Equal(t, durableSteps, tx.CallsPerJob)
	require.Equal(t, []string{durPlainTx, durStepTx, durStepTx, durPlainTx}, tx.Order)
	require.Contains(t, []string{"pg_stat_statements", "pg_stat_database xact_commit"}, tx.RoundTripsFrom)
	require.Len(t, tx.Rows, 2)
	for _, row := range tx.Rows {
		require.Positive(t, row.P50Ms, row.Name)
		require.LessOrEqual(t, row.P50Ms, row.P99Ms, row.Name)
	}
	require.InDelta(t, tx.Rows[1].RoundTripsPerCall-tx.Rows[0].RoundTripsPerCall, tx.ExtraRoundTripsPerCall, 1e-12)

	var out strings.Builder
	d.Print(&out)
	t.Log("\n" + out.String())
	for _, want := range []string{"durable: drains of the same work", "20 durable jobs × 10 steps", "overhead per step",
		"worker.StepTx", "p50 ms", "counted from " + tx.RoundTripsFrom} {
		require.Contains(t, out.String(), want)
	}
	raw, err := json.Marshal(r)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"durable":{"steps_per_job":10`)
}
