package tests

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// TestBenchQueuesRuns runs the queues mode at a tiny size: each count
// drains the whole backlog over its queues, with the slots split evenly,
// and the ratio to the first count is reported.
func TestBenchQueuesRuns(t *testing.T) {
	testdb.Slow(t, "hopper bench runs")
	t.Parallel()
	r := runHopper(t, testdb.Server(t), "", "bench", "--mode", "queues", "--queues", "1,4", "--json",
		"--jobs", "1000", "--workers", "1", "--concurrency", "40")
	require.Zero(t, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)
	var report struct {
		Queues []struct {
			Queues        int     `json:"queues"`
			SlotsPerQueue int     `json:"slots_per_queue"`
			Jobs          int     `json:"jobs"`
			JobsPerSecond float64 `json:"jobs_per_second"`
			Ratio         float64 `json:"ratio"`
		} `json:"queues"`
		Ratios map[string]float64 `json:"ratios"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &report))
	require.Len(t, report.Queues, 2)
	for i, want := range []struct{ queues, slots int }{{1, 40}, {4, 10}} {
		q := report.Queues[i]
		require.Equal(t, want.queues, q.Queues)
		require.Equal(t, want.slots, q.SlotsPerQueue)
		require.Equal(t, 1000, q.Jobs, "every job drained (the bench checks the table)")
		require.Positive(t, q.JobsPerSecond)
	}
	require.InDelta(t, 1.0, report.Queues[0].Ratio, 1e-9)
	require.Contains(t, report.Ratios, "queues_4_to_1")

	bad := runHopper(t, testdb.Server(t), "", "bench", "--mode", "queues", "--queues", "0")
	require.Equal(t, 2, bad.code)
	require.Contains(t, bad.stderr, "--queues takes positive queue counts")
}
