package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSequenceWaitingCounts: a count of waiting jobs that stopped at its
// cap says so with a "+", in the table and in show's sentence.
func TestSequenceWaitingCounts(t *testing.T) {
	require.Equal(t, "0", waitingCount(0, false))
	require.Equal(t, "2", waitingCount(2, false))
	require.Equal(t, "10000+", waitingCount(10000, true))
	require.Equal(t, "1 job", waitingJobs(1, false))
	require.Equal(t, "0 jobs", waitingJobs(0, false))
	require.Equal(t, "10000+ jobs", waitingJobs(10000, true))
}
