package horizon

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestHorizonRules: how far back each sweep or promotion looks.
func TestHorizonRules(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, tc := range []struct {
		name string
		run  func(h *Horizon) time.Duration
		want time.Duration
	}{
		{"the first pass is full", func(h *Horizon) time.Duration {
			return h.Window(t0, t0)
		}, 0},
		{"after a complete pass, back to its start plus the margin", func(h *Horizon) time.Duration {
			h.Done(t0, true, true)
			return h.Window(at(5*time.Second), at(6*time.Second))
		}, 6*time.Second + Margin},
		{"an incomplete pass (a failure, a full last batch) makes the next full", func(h *Horizon) time.Duration {
			h.Done(t0, true, true)
			h.Done(at(5*time.Second), false, false)
			return h.Window(at(10*time.Second), at(10*time.Second))
		}, 0},
		{"a partial pass moves the horizon, not the full pass's time", func(h *Horizon) time.Duration {
			h.Done(t0, true, true)
			h.Done(at(30*time.Second), true, false)
			return h.Window(at(35*time.Second), at(35*time.Second))
		}, 5*time.Second + Margin},
		{"a full pass is due every FullScanEvery", func(h *Horizon) time.Duration {
			h.Done(t0, true, true)
			h.Done(at(30*time.Second), true, false)
			return h.Window(at(FullScanEvery), at(FullScanEvery))
		}, 0},
		{"an older pass ending late does not move the horizon back", func(h *Horizon) time.Duration {
			h.Done(at(10*time.Second), true, true)
			h.Done(t0, true, true)
			return h.Window(at(12*time.Second), at(12*time.Second))
		}, 2*time.Second + Margin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.run(&Horizon{}))
		})
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
