package bench

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The workflow enqueue timings at a small size on the shared server:
// every workflow of every run is written, whole. Nothing is judged for
// speed.
func TestWorkflowEnqueues(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := sharedServer(ctx, t)
	const n = 2500
	runs, err := timeWorkflowEnqueues(ctx, Config{DatabaseURL: url}, n, t.Logf)
	require.NoError(t, err)
	require.Len(t, runs, 4*len(workflowShapes))
	for _, r := range runs {
		if r.Batched {
			require.Equal(t, n, r.Workflows)
		} else {
			require.Equal(t, max(workflowsPerTx*enqueueConns, n/10), r.Workflows)
		}
		require.Positive(t, r.WorkflowsPerSecond)
	}
	var out bytes.Buffer
	printWorkflowEnqueues(&out, runs)
	require.Contains(t, out.String(), "batched")
	t.Log(out.String())
}
