package dashboard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
)

// TestSampleOfDepths: a sample adds up the queues' live jobs and keeps the
// longest claim lag; a depth that reached its limit is drawn as "at least".
func TestSampleOfDepths(t *testing.T) {
	at := time.Now()
	exact := sampleOf(at, []hopper.QueueDepth{
		{Queue: "a", Ready: 3, Scheduled: 2, Running: 1, OldestReady: time.Second},
		{Queue: "b", Ready: 4, OldestReady: time.Minute},
	}, 42)
	require.Equal(t, sample{at: at, depth: 10, lag: time.Minute, finished: 42}, exact)
	require.Equal(t, "10", charts([]sample{exact})[0].Now)

	capped := sampleOf(at.Add(time.Second), []hopper.QueueDepth{
		{Queue: "a", Ready: sampleDepthLimit, ReadyCapped: true},
		{Queue: "b", Running: 2},
	}, 43)
	require.True(t, capped.capped)
	require.Equal(t, "at least 10002", charts([]sample{exact, capped})[0].Now)

	require.Equal(t, "no samples yet", charts(nil)[0].Now)
}
