// Package promoter makes scheduled jobs that have fallen due pending.
package promoter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/worker/announce"
	"github.com/hopperq/hopper/internal/worker/horizon"
	"github.com/hopperq/hopper/internal/worker/loop"
)

// batch bounds one Promote statement.
const batch = 1000

// Config is what a Promoter works with.
type Config struct {
	Queries *db.Queries
	// Log is the worker's logger: a failed pass warns on it with the
	// error as "error".
	Log      *slog.Logger
	Every    time.Duration // the worker's PollInterval
	Announce announce.Func // sends the wake-ups of the jobs promoted
}

func (c *Config) validate() error {
	switch {
	case c.Queries == nil, c.Log == nil, c.Announce == nil:
		return errors.New("promoter: Queries, Log and Announce are required")
	case c.Every <= 0:
		return fmt.Errorf("promoter: Every (%v) must be positive", c.Every)
	}
	return nil
}

// Promoter makes scheduled jobs that have fallen due pending, on the poll
// interval, and wakes their queues: a scheduled job starts within about
// one poll interval of its run_at. Every worker runs one; SKIP LOCKED makes
// concurrent promotions safe. Its horizon works as the sweeper's does.
type Promoter struct {
	cfg     Config
	horizon horizon.Horizon
}

// New returns a Promoter working with cfg.
func New(cfg Config) (*Promoter, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Promoter{cfg: cfg}, nil
}

// Run promotes on the interval until ctx ends.
func (p *Promoter) Run(ctx context.Context) {
	loop.Every(ctx, p.cfg.Every, func(ctx context.Context) { p.PromoteOnce(ctx) })
}

// PromoteOnce promotes every scheduled job that is due now and reports how
// many it promoted.
func (p *Promoter) PromoteOnce(ctx context.Context) int {
	total := 0
	start := time.Now()
	full, complete := true, false
	defer func() { p.horizon.Done(start, complete, full) }()
	for ctx.Err() == nil {
		within := p.horizon.Window(start, time.Now())
		full = full && within == 0
		rows, err := p.cfg.Queries.Promote(ctx, db.PromoteParams{MaxJobs: batch, WithinMs: within.Milliseconds()})
		if err != nil {
			if ctx.Err() == nil {
				p.cfg.Log.Warn("promoting scheduled jobs failed; retrying at the next poll", "error", err)
			}
			return total
		}
		n := 0
		var wk announce.Set
		for _, r := range rows {
			n += int(r.Promoted)
			wk.Add(r.Queue, r.Priority, r.RunAt, r.ID)
		}
		total += n
		p.cfg.Announce(ctx, &wk, "promotion")
		if n < batch {
			complete = true
			break
		}
	}
	return total
}
