package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The sweeper gives back an expired lease and announces the job; a live
// lease stays.
func TestSweeperGivesBackExpiredLeases(t *testing.T) {
	t.Parallel()
	b := newPassBed(t)
	s := newSweeper(b.q, b.log, b.metrics, &Config{SweepInterval: time.Hour, SweepBatch: 10}, b.announce)

	lapsed := b.enqueue(time.Now().Add(-2 * time.Second))
	require.Len(t, b.claim("w", 1), 1)
	live := b.enqueue(time.Now().Add(-time.Second))
	require.Len(t, b.claim("w", 60_000), 1)
	time.Sleep(20 * time.Millisecond) // the 1ms lease has expired
	requeued, dead := s.sweepOnce(b.ctx)
	require.Equal(t, 1, requeued)
	require.Zero(t, dead)
	require.Equal(t, "pending", b.state(lapsed))
	require.Equal(t, []int64{lapsed}, b.sawAnnounced("sweep"))
	require.Equal(t, "running", b.state(live))

	again, dead := s.sweepOnce(b.ctx)
	require.Zero(t, again+dead, "nothing left to sweep")
}
