package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestScanHorizonRules: how far back each sweep or promotion looks.
func TestScanHorizonRules(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, tc := range []struct {
		name string
		run  func(h *scanHorizon) time.Duration
		want time.Duration
	}{
		{"the first pass is full", func(h *scanHorizon) time.Duration {
			return h.window(t0, t0)
		}, 0},
		{"after a complete pass, back to its start plus the margin", func(h *scanHorizon) time.Duration {
			h.done(t0, true, true)
			return h.window(at(5*time.Second), at(6*time.Second))
		}, 6*time.Second + horizonMargin},
		{"an incomplete pass (a failure, a full last batch) makes the next full", func(h *scanHorizon) time.Duration {
			h.done(t0, true, true)
			h.done(at(5*time.Second), false, false)
			return h.window(at(10*time.Second), at(10*time.Second))
		}, 0},
		{"a partial pass moves the horizon, not the full pass's time", func(h *scanHorizon) time.Duration {
			h.done(t0, true, true)
			h.done(at(30*time.Second), true, false)
			return h.window(at(35*time.Second), at(35*time.Second))
		}, 5*time.Second + horizonMargin},
		{"a full pass is due every fullScanEvery", func(h *scanHorizon) time.Duration {
			h.done(t0, true, true)
			h.done(at(30*time.Second), true, false)
			return h.window(at(fullScanEvery), at(fullScanEvery))
		}, 0},
		{"an older pass ending late does not move the horizon back", func(h *scanHorizon) time.Duration {
			h.done(at(10*time.Second), true, true)
			h.done(t0, true, true)
			return h.window(at(12*time.Second), at(12*time.Second))
		}, 2*time.Second + horizonMargin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.run(&scanHorizon{}))
		})
	}
}
