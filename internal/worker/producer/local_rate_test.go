package producer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLocalRate: the in-memory window gives no more than its limit in any
// window, gives back what a claim did not take, and says when budget
// returns.
func TestLocalRate(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	r := newLocalRate(10, time.Second)
	for _, step := range []struct {
		at        time.Duration // since t0
		want, got int
		wait      time.Duration
		givenBack int
	}{
		{at: 0, want: 4, got: 4},
		{at: 100 * time.Millisecond, want: 8, got: 6, givenBack: 2}, // 2 of the 6 not claimed
		{at: 200 * time.Millisecond, want: 5, got: 2},
		{at: 300 * time.Millisecond, want: 1, got: 0, wait: 700 * time.Millisecond}, // the first take leaves at 1s
		{at: time.Second, want: 10, got: 4},                                         // the first 4 left
		{at: 1100 * time.Millisecond, want: 10, got: 4},                             // 6 - 2 given back left
		{at: 1200 * time.Millisecond, want: 10, got: 2},
		{at: 1250 * time.Millisecond, want: 3, got: 0, wait: 750 * time.Millisecond},
	} {
		got, wait := r.take(t0.Add(step.at), step.want)
		require.Equal(t, step.got, got, "at %v", step.at)
		require.Equal(t, step.wait, wait, "at %v", step.at)
		r.giveBack(step.givenBack)
	}
}
