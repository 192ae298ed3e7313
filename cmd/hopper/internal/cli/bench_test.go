package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseDrainSizes(t *testing.T) {
	t.Parallel()
	sizes, err := parseDrainSizes("20000, 50000,500000")
	require.NoError(t, err)
	require.Equal(t, []int{20000, 50000, 500000}, sizes)

	sizes, err = parseDrainSizes("")
	require.NoError(t, err)
	require.Nil(t, sizes, "no sizes: the drain runs once, with --jobs")

	for _, bad := range []string{"20k", "0", "-5", "1,,2", ","} {
		_, err := parseDrainSizes(bad)
		require.ErrorIs(t, err, errUsage, bad)
	}
}
