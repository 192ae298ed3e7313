package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/hopperq/hopper/db"
)

// promoteBatch bounds one Promote statement.
const promoteBatch = 1000

// promoter makes scheduled jobs that have fallen due pending, on the poll
// interval, and wakes their queues: a scheduled job starts within about
// one poll interval of its run_at. Every worker runs one; SKIP LOCKED makes
// concurrent promotions safe. Its horizon works as the sweeper's does.
type promoter struct {
	q        *db.Queries
	log      *slog.Logger
	every    time.Duration // Config.PollInterval
	announce announceFunc
	horizon  scanHorizon
}

func newPromoter(q *db.Queries, log *slog.Logger, cfg *Config, announce announceFunc) *promoter {
	return &promoter{q: q, log: log, every: cfg.PollInterval, announce: announce}
}

func (p *promoter) run(ctx context.Context) {
	everyJittered(ctx, p.every, func(ctx context.Context) { p.promoteOnce(ctx) })
}

// PromoteOnce promotes every scheduled job that is due now and reports how
// many it promoted.
func (w *Worker) PromoteOnce(ctx context.Context) int { return w.promoter.promoteOnce(ctx) }

// promoteOnce promotes every scheduled job that is due now and reports how
// many it promoted.
func (p *promoter) promoteOnce(ctx context.Context) int {
	total := 0
	start := time.Now()
	full, complete := true, false
	defer func() { p.horizon.done(start, complete, full) }()
	for ctx.Err() == nil {
		within := p.horizon.window(start, time.Now())
		full = full && within == 0
		rows, err := p.q.Promote(ctx, db.PromoteParams{MaxJobs: promoteBatch, WithinMs: within.Milliseconds()})
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn("promoting scheduled jobs failed; retrying at the next poll", "error", err)
			}
			return total
		}
		n := 0
		var wk wakeups
		for _, r := range rows {
			n += int(r.Promoted)
			wk.add(r.Queue, r.Priority, r.RunAt, r.ID)
		}
		total += n
		p.announce(ctx, &wk, "promotion")
		if n < promoteBatch {
			complete = true
			break
		}
	}
	return total
}
