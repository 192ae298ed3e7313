package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testdb"
)

// The promoter makes a scheduled job that fell due pending and announces
// it; one not yet due stays scheduled.
func TestPromoterPromotesDueJobs(t *testing.T) {
	t.Parallel()
	b := newPassBed(t)
	p := newPromoter(b.q, b.log, &Config{PollInterval: time.Hour}, b.announce)

	soon := b.enqueue(time.Now().Add(100 * time.Millisecond))
	later := b.enqueue(time.Now().Add(time.Hour))
	require.Equal(t, "scheduled", b.state(soon))
	testdb.WaitFor(t, "the first job due and promoted", func() bool { return p.promoteOnce(b.ctx) == 1 })
	require.Equal(t, "pending", b.state(soon))
	require.Equal(t, []int64{soon}, b.sawAnnounced("promotion"))
	require.Equal(t, "scheduled", b.state(later))
	require.Zero(t, p.promoteOnce(b.ctx), "nothing else is due")
}
