package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/migrated"
)

// rateClaimTimeout bounds the statement that moves a claim's log entry. A
// claim not moved counts against the limit until five seconds past its
// window (queries/flow.sql), so that the claims after it wait rather than
// take budget whose handlers may still be starting.
const rateClaimTimeout = 5 * time.Second

// handlerStarting counts d as a started job of its rate-limited claim; the last one
// moves the claim's log entry, in a goroutine of its own so that its
// handler does not wait for the statement.
func (r *run) handlerStarting(d dispatched) {
	rc := d.rate
	if rc == nil || !rc.Started() {
		return
	}
	// On a goroutine the executor counts, which Run waits for.
	r.executor.Go(func() {
		ctx, cancel := context.WithTimeout(r.hard, rateClaimTimeout)
		defer cancel()
		err := r.w.q.RateClaimStarted(ctx, db.RateClaimStartedParams{Queue: rc.Queue(), ClaimedAt: rc.ClaimedAt()})
		if err != nil && r.hard.Err() == nil {
			r.w.log.Warn("could not move a rate-limited claim to its last handler start; its budget stays taken until five seconds past its window", "queue", rc.Queue(), "error", err)
		}
	})
}

// checkRateSchema refuses to start a worker with a global rate limit on a
// schema older than migration 8, whose claims would fail one by one.
func (r *run) checkRateSchema(ctx context.Context) error {
	w := r.w
	global := false
	for _, p := range r.producers {
		global = global || p.GlobalRate()
	}
	if !global {
		return nil
	}
	err := w.q.ProbeRateStarts(ctx)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedColumn {
		return migrated.Errorf(w.migrateUp(), "schema %s lacks hopper_rate_claims.awaiting_starts, which rate limits need and migration %s adds", r.schema, migrated.Migration(8))
	}
	if err != nil {
		return fmt.Errorf("worker: start: check the rate log: %w", err)
	}
	return nil
}
