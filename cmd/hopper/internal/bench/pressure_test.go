package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWindowsAndSteadyState(t *testing.T) {
	for _, tc := range []struct {
		name       string
		samples    []float64
		perWindow  int
		wantWins   []float64
		wantSteady float64
	}{
		{"none", nil, 10, nil, 0},
		{"one-second windows", []float64{1, 2, 3, 4}, 1, []float64{1, 2, 3, 4}, 3.5},
		{"a partial last window is left out", []float64{10, 20, 30, 40, 50}, 2, []float64{15, 35}, 35},
		{"odd count: the last half rounds up", []float64{1, 1, 4, 4, 4, 4}, 2, []float64{1, 4, 4}, 4},
		{"warm-up does not count", []float64{0, 100, 100, 100}, 1, []float64{0, 100, 100, 100}, 100},
		{"one window", []float64{5, 7}, 2, []float64{6}, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := windows(tc.samples, tc.perWindow)
			require.Equal(t, tc.wantWins, ws)
			require.InDelta(t, tc.wantSteady, steady(ws), 1e-9)
		})
	}
}
