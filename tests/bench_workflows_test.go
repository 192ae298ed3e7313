package tests

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// TestBenchWorkflowsRuns runs the workflows mode at a tiny size, in text
// and in JSON: the drains of plain jobs, of plain jobs kept in the history
// and of diamond workflows, each twice in a mirrored order, with the ratio
// of steps to plain jobs; the parent → child latency at a trickle; the
// batch and its callback; the acknowledgements timed with --explain. It
// checks that each figure is there and sane, never a speed.
func TestBenchWorkflowsRuns(t *testing.T) {
	testdb.Slow(t, "hopper bench runs")
	t.Parallel()
	args := []string{"bench", "--mode", "workflows", "--diamonds", "100", "--trickle-rate", "20", "--trickle-duration", "1s",
		"--batch-jobs", "300", "--workers", "1", "--concurrency", "40", "--explain"}
	r := runHopper(t, testdb.Server(t), "", append(args, "--json")...)
	require.Zero(t, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)
	var report struct {
		Workflows struct {
			Diamonds int      `json:"diamonds"`
			Enqueue  string   `json:"enqueue"`
			Order    []string `json:"order"`
			Rows     []struct {
				Name string `json:"name"`
				Runs []struct {
					Jobs           int     `json:"jobs"`
					JobsPerSecond  float64 `json:"jobs_per_second"`
					EnqueueSeconds float64 `json:"enqueue_seconds"`
					Kept           int64   `json:"kept"`
				} `json:"runs"`
				JobsPerSecond float64 `json:"jobs_per_second"`
				Ratio         float64 `json:"ratio_to_plain"`
			} `json:"rows"`
			Ratio       float64 `json:"ratio_steps_to_plain"`
			RatioToKept float64 `json:"ratio_steps_to_plain_kept"`
			Latency     struct {
				Workflows       int     `json:"workflows"`
				Samples         int     `json:"samples"`
				P50Ms           float64 `json:"p50_ms"`
				P99Ms           float64 `json:"p99_ms"`
				MaxMs           float64 `json:"max_ms"`
				FromReturnP50Ms float64 `json:"from_return_p50_ms"`
			} `json:"latency"`
			Batch struct {
				Jobs            int     `json:"jobs"`
				EnqueueSeconds  float64 `json:"enqueue_seconds"`
				JobsPerSecond   float64 `json:"jobs_per_second"`
				CallbackAfterMs float64 `json:"callback_after_ms"`
			} `json:"batch"`
			Acks []struct {
				Name      string  `json:"name"`
				Rows      int     `json:"rows"`
				TotalMs   float64 `json:"total_ms"`
				TriggerMs float64 `json:"trigger_ms"`
			} `json:"acks"`
		} `json:"workflows"`
		Ratios map[string]float64 `json:"ratios"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &report))
	w := report.Workflows
	require.Equal(t, 100, w.Diamonds)
	require.Contains(t, w.Enqueue, "before the workers start")
	require.Equal(t, []string{"plain", "plain_kept", "diamonds", "diamonds", "plain_kept", "plain"}, w.Order)
	require.Len(t, w.Rows, 3)
	for i, name := range []string{"plain", "plain_kept", "diamonds"} {
		row := w.Rows[i]
		require.Equal(t, name, row.Name)
		require.Len(t, row.Runs, 2, name)
		require.Positive(t, row.Ratio, name)
		for _, run := range row.Runs {
			require.Equal(t, 500, run.Jobs, name)
			require.Positive(t, run.JobsPerSecond, name)
			require.Positive(t, run.EnqueueSeconds, name)
			if name == "plain" {
				require.Zero(t, run.Kept, "plain jobs are not kept")
			} else {
				require.EqualValues(t, 500, run.Kept, "%s: every job kept in the history", name)
			}
		}
	}
	require.InDelta(t, 1.0, w.Rows[0].Ratio, 1e-9)
	require.InDelta(t, w.Rows[2].Ratio, w.Ratio, 1e-9)
	require.Positive(t, w.RatioToKept)
	require.InDelta(t, w.Ratio, report.Ratios["workflow_steps_to_plain"], 1e-9)

	l := w.Latency
	require.Positive(t, l.Workflows)
	require.Equal(t, 4*l.Workflows, l.Samples, "three children after each root, one after the three")
	require.LessOrEqual(t, l.P50Ms, l.P99Ms)
	require.LessOrEqual(t, l.P99Ms, l.MaxMs)
	require.Positive(t, l.MaxMs)
	require.Positive(t, l.FromReturnP50Ms)

	b := w.Batch
	require.Equal(t, 300, b.Jobs)
	require.Positive(t, b.EnqueueSeconds)
	require.Positive(t, b.JobsPerSecond)
	require.GreaterOrEqual(t, b.CallbackAfterMs, 0.0)

	require.Len(t, w.Acks, 5, "plain, roots, middle steps, last steps, a tenth of a batch")
	for _, a := range w.Acks {
		require.Positive(t, a.Rows, a.Name)
		require.Positive(t, a.TotalMs, a.Name)
		require.LessOrEqual(t, a.TriggerMs, a.TotalMs, a.Name)
	}

	// The text report: a line for each part.
	r = runHopper(t, testdb.Server(t), "", append(args[:len(args)-1:len(args)-1], "--diamonds", "20", "--batch-jobs", "50")...)
	require.Zero(t, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)
	for _, line := range []string{
		"workflows: drains, every job enqueued before the workers start",
		"100 plain jobs ", "100 plain jobs, kept in history", "20 diamonds (1→3→1), 100 steps",
		"workflow steps/s over plain jobs/s: ",
		"workflows: parent done → child start at 20 diamonds/s",
		"workflows: batch of 50 jobs and a callback: enqueued in ",
		"ratio workflow_steps_to_plain: ",
	} {
		require.Contains(t, r.stdout, line)
	}
	require.NotContains(t, r.stdout, "acknowledgements (the DELETE", "no --explain, no timings")
	require.Equal(t, 1, strings.Count(r.stdout, "last job's ack → callback start"))

	bad := runHopper(t, testdb.Server(t), "", "bench", "--mode", "workflows", "--batch-jobs", "100001")
	require.Equal(t, 2, bad.code)
	require.Contains(t, bad.stderr, "--mode workflows needs")
}
