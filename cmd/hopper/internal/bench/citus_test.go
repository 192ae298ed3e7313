package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCitusRatios: the aims' ratios are taken from each setup's median
// over the rounds, a node's CPU from the busier of the two nodes.
func TestCitusRatios(t *testing.T) {
	t.Parallel()
	run := func(setup string, rate float64, cpu map[string]float64) CitusRun {
		return CitusRun{Setup: setup, JobsPerSecond: rate, CPUPer1000: cpu}
	}
	r := &CitusResult{Runs: []CitusRun{
		run("plain PostgreSQL", 1000, nil), run("plain PostgreSQL", 3000, nil), run("plain PostgreSQL", 2000, nil),
		run("Citus, 1 shard", 1500, nil), run("Citus, 1 shard", 1600, nil), run("Citus, 1 shard", 100, nil),
		run("Citus, 2 shards on 1 node", 0, map[string]float64{"node 1": 0.2}),
		run("Citus, 2 shards on 2 nodes", 0, map[string]float64{"node 1": 0.1, "node 2": 0.3}),
		run("Citus, 2 shards on 1 node, pinned", 400, nil),
		run("Citus, 2 shards on 2 nodes, pinned", 600, nil),
	}}
	r.ratios()
	require.InDelta(t, 1500.0/2000, r.OneShardToPlain, 1e-9, "medians, not means: 1500 of 2000")
	require.InDelta(t, 0.3/0.2, r.NodeCPUTwoToOne, 1e-9, "the busier node of the two against the one")
	require.InDelta(t, 1.5, r.PinnedTwoToOne, 1e-9)

	empty := &CitusResult{}
	empty.ratios()
	require.Zero(t, empty.OneShardToPlain, "no runs, no ratio (not a division by zero)")
	require.Equal(t, 2, countNodes([]int{0, 1, 1}))
}
