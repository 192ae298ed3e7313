package worker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/migrated"
)

// rateClaim is one claim under a global rate limit with ExactStarts, whose
// jobs are on their way to their handlers. The claim logged itself at its
// own time, awaiting its starts; once the last of its handlers has started,
// the log entry moves to then (RateClaimStarted), so that the budget it
// took returns a window after the last start. Without that, one claim's handlers that start late (the
// claim's own duration, dispatch) and the next claim's that start early
// fall in one window: up to twice the limit by handler start.
type rateClaim struct {
	queue     string
	claimedAt time.Time // the claim's time, as logged
	left      atomic.Int32
}

// rateClaimsOf gives each claimed job of a queue under a global rate limit
// with ExactStarts the claim it came in (nil for other queues). A claim's
// jobs carry its time as lease_until less the lease; a worker's claim may
// be two statements (a fair one goes round twice), each logged apart.
func (p *producer) rateClaimsOf(rows []db.HopperJob) []*rateClaim {
	if p.flow == nil || !p.flow.global() || !p.flow.Rate.ExactStarts || len(rows) == 0 {
		return nil
	}
	lease := time.Duration(p.cfg.LeaseDuration.Milliseconds()) * time.Millisecond
	out := make([]*rateClaim, len(rows))
	var cur *rateClaim
	for i, row := range rows {
		if row.LeaseUntil == nil {
			continue // not from a claim: nothing to move
		}
		at := row.LeaseUntil.Add(-lease)
		if cur == nil || !cur.claimedAt.Equal(at) {
			cur = &rateClaim{queue: p.name, claimedAt: at}
		}
		cur.left.Add(1)
		out[i] = cur
	}
	return out
}

// rateClaimTimeout bounds the statement that moves a claim's log entry. A
// claim not moved counts against the limit until five seconds past its
// window (queries/flow.sql), so that the claims after it wait rather than
// take budget whose handlers may still be starting.
const rateClaimTimeout = 5 * time.Second

// handlerStarting counts a job of the claim as started; the last one
// moves the claim's log entry, in a goroutine of its own so that its
// handler does not wait for the statement.
func (e *executor) handlerStarting(rc *rateClaim) {
	if rc == nil || rc.left.Add(-1) != 0 {
		return
	}
	// The caller is a handler goroutine, counted in poolWG, so this Add
	// can never race Run's Wait at zero.
	e.poolWG.Add(1)
	go func() {
		defer e.poolWG.Done()
		ctx, cancel := context.WithTimeout(e.hard, rateClaimTimeout)
		defer cancel()
		err := e.q.RateClaimStarted(ctx, db.RateClaimStartedParams{Queue: rc.queue, ClaimedAt: rc.claimedAt})
		if err != nil && e.hard.Err() == nil {
			e.log.Warn("could not move a rate-limited claim to its last handler start; its budget stays taken until five seconds past its window", "queue", rc.queue, "error", err)
		}
	}()
}

// checkRateSchema refuses to start a worker with a global rate limit on a
// schema older than migration 8, whose claims would fail one by one.
func (r *run) checkRateSchema(ctx context.Context) error {
	w := r.w
	global := false
	for _, p := range r.producers {
		global = global || (p.flow != nil && p.flow.global())
	}
	if !global {
		return nil
	}
	err := w.q.ProbeRateStarts(ctx)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42703" { // undefined_column
		return migrated.Errorf(w.migrateUp(), "schema %s lacks hopper_rate_claims.awaiting_starts, which rate limits need and migration %s adds", r.schema, migrated.Migration(8))
	}
	if err != nil {
		return fmt.Errorf("worker: start: check the rate log: %w", err)
	}
	return nil
}
