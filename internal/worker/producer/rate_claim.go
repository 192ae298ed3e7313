package producer

import (
	"sync/atomic"
	"time"

	"github.com/hopperq/hopper/db"
)

// RateClaim is one claim under a global rate limit with ExactStarts, whose
// jobs are on their way to their handlers. The claim logged itself at its
// own time, awaiting its starts; once the last of its handlers has started,
// the log entry moves to then (RateClaimStarted, which the worker runs when
// Started says so), so that the budget it took returns a window after the
// last start. Without that, one claim's handlers that start late (the
// claim's own duration, dispatch) and the next claim's that start early
// fall in one window: up to twice the limit by handler start.
type RateClaim struct {
	queue     string
	claimedAt time.Time // the claim's time, as logged
	left      atomic.Int32
}

// Queue is the queue the claim was made in.
func (rc *RateClaim) Queue() string { return rc.queue }

// ClaimedAt is the claim's time, as its log entry holds it.
func (rc *RateClaim) ClaimedAt() time.Time { return rc.claimedAt }

// Started counts one of the claim's jobs as started, and reports whether
// it was the last: then the claim's log entry is to move to now.
func (rc *RateClaim) Started() bool { return rc.left.Add(-1) == 0 }

// rateClaimsOf gives each claimed job of a queue under a global rate limit
// with ExactStarts the claim it came in (nil for other queues). A claim's
// jobs carry its time as lease_until less the lease; a worker's claim may
// be two statements (a fair one goes round twice), each logged apart.
func (p *Producer) rateClaimsOf(rows []db.HopperJob) []*RateClaim {
	if p.flow == nil || !p.flow.global() || !p.flow.Rate.ExactStarts || len(rows) == 0 {
		return nil
	}
	lease := time.Duration(p.cfg.Lease.Milliseconds()) * time.Millisecond
	out := make([]*RateClaim, len(rows))
	var cur *RateClaim
	for i, row := range rows {
		if row.LeaseUntil == nil {
			continue // not from a claim: nothing to move
		}
		at := row.LeaseUntil.Add(-lease)
		if cur == nil || !cur.claimedAt.Equal(at) {
			cur = &RateClaim{queue: p.cfg.Name, claimedAt: at}
		}
		cur.left.Add(1)
		out[i] = cur
	}
	return out
}
