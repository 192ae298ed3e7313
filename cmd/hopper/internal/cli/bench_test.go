package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseCounts(t *testing.T) {
	t.Parallel()
	sizes, err := parseCounts("--drain-sizes", "job counts", "20000, 50000,500000")
	require.NoError(t, err)
	require.Equal(t, []int{20000, 50000, 500000}, sizes)

	sizes, err = parseCounts("--drain-sizes", "job counts", "")
	require.NoError(t, err)
	require.Nil(t, sizes, "no sizes: the drain runs once, with --jobs")

	for _, bad := range []string{"20k", "0", "-5", "1,,2", ","} {
		_, err := parseCounts("--queues", "queue counts", bad)
		require.ErrorIs(t, err, errUsage, bad)
		require.ErrorContains(t, err, "--queues takes positive queue counts", bad)
	}
}
