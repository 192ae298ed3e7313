package tests

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// TestBenchSequencesRuns runs the sequences mode at a tiny size: keyless,
// keys without and with a limit, and sequences, each twice in a mirrored
// order, every one reported with its ratio to keyless; and the plans of
// the sequence promotion and of the multi-queue claim over a table of
// waiting jobs, which must read the index made for each (the waiting
// jobs' index for the promotion, the ready index for the claim, never a
// scan of the table). It never looks at a speed. HOPPER_EXPLAIN=1 explains
// 100,000 jobs in 1,000 keys instead, and logs the plans.
func TestBenchSequencesRuns(t *testing.T) {
	testdb.Slow(t, "hopper bench runs")
	t.Parallel()
	explainJobs, keys := "5000", "50"
	if os.Getenv("HOPPER_EXPLAIN") != "" {
		explainJobs, keys = "100000", "1000"
	}
	r := runHopper(t, testdb.Server(t), "", "bench", "--mode", "sequences", "--json",
		"--sequence-duration", "1s", "--keys", keys, "--explain", "--explain-jobs", explainJobs,
		"--workers", "1", "--concurrency", "40", "--batch-size", "500")
	require.Zero(t, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)
	var report struct {
		Sequences struct {
			Order []string `json:"order"`
			Rows  []struct {
				Name  string            `json:"name"`
				Runs  []json.RawMessage `json:"runs"`
				Ratio float64           `json:"ratio_to_keyless"`
			} `json:"rows"`
			DrainKeyless   []json.RawMessage `json:"drain_keyless"`
			DrainSequences []json.RawMessage `json:"drain_sequences"`
			DrainRatio     float64           `json:"drain_ratio"`
			Plans          struct {
				Waiting int64 `json:"waiting"`
				Plans   []struct {
					Name    string   `json:"name"`
					Generic bool     `json:"generic"`
					Indexes []string `json:"indexes"`
					SeqScan bool     `json:"seq_scan"`
					Plan    string   `json:"plan"`
				} `json:"plans"`
			} `json:"plans"`
		} `json:"sequences"`
		Ratios map[string]float64 `json:"ratios"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &report))
	s := report.Sequences
	require.Equal(t, []string{"keyless", "keys", "keys_limit", "sequences", "sequences", "keys_limit", "keys", "keyless"}, s.Order)
	require.Len(t, s.Rows, 4)
	for i, name := range []string{"keyless", "keys", "keys_limit", "sequences"} {
		require.Equal(t, name, s.Rows[i].Name)
		require.Len(t, s.Rows[i].Runs, 2, name)
		require.Positive(t, s.Rows[i].Ratio, name)
		if i > 0 {
			require.Contains(t, report.Ratios, name+"_to_keyless")
		}
	}
	require.InDelta(t, 1.0, s.Rows[0].Ratio, 1e-9)
	require.Len(t, s.DrainKeyless, 2, "keyless drains, first and last")
	require.Len(t, s.DrainSequences, 2, "sequence drains, in the middle")
	require.Positive(t, s.DrainRatio)

	require.Positive(t, s.Plans.Waiting, "the table explained holds waiting jobs")
	require.Len(t, s.Plans.Plans, 6, "custom and generic plans of the promotion of one key and of many, and of the claim")
	for _, p := range s.Plans.Plans {
		if os.Getenv("HOPPER_EXPLAIN") != "" {
			t.Logf("%s (generic %v):\n%s", p.Name, p.Generic, p.Plan)
		}
		require.False(t, p.SeqScan, "%s (generic %v) scans the job table:\n%s", p.Name, p.Generic, p.Plan)
		want := "hopper_jobs_ready_idx"
		if p.Name != "DequeueQueues" {
			want = "hopper_jobs_sequence_waiting_idx"
		}
		require.Contains(t, p.Indexes, want, "%s (generic %v):\n%s", p.Name, p.Generic, p.Plan)
	}

	bad := runHopper(t, testdb.Server(t), "", "bench", "--mode", "sequences", "--key-limit", "0")
	require.Equal(t, 2, bad.code)
	require.Contains(t, bad.stderr, "--mode sequences needs --key-limit at least 1")
}
