// Package sweeper gives back expired leases: the jobs of crashed or
// cut-off workers.
package sweeper

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

// Metrics counts what a sweep did to the jobs.
type Metrics interface {
	// JobDead counts a job of queue that went dead: its last attempt's
	// lease expired.
	JobDead(queue string)
}

// Config is what a Sweeper works with.
type Config struct {
	Queries *db.Queries
	// Log is the worker's logger; a pass that fails warns on it with the
	// error as "error", which the worker's logger tells as an outage when
	// the connection was lost.
	Log      *slog.Logger
	Metrics  Metrics
	Every    time.Duration // the worker's SweepInterval
	Batch    int           // the worker's SweepBatch: jobs per statement
	Announce announce.Func // sends the wake-ups of the jobs given back
}

func (c *Config) validate() error {
	switch {
	case c.Queries == nil, c.Log == nil, c.Metrics == nil, c.Announce == nil:
		return errors.New("sweeper: Queries, Log, Metrics and Announce are required")
	case c.Every <= 0 || c.Batch <= 0:
		return fmt.Errorf("sweeper: Every (%v) and Batch (%d) must be positive", c.Every, c.Batch)
	}
	return nil
}

// Sweeper gives back expired leases on the sweep interval, in bounded
// batches until none is left. Every worker runs one; SKIP LOCKED makes
// concurrent sweeps safe. Each pass remembers how far back the next one
// must look (horizon).
//
// Invariant: the horizon only narrows after a complete pass, and a full
// pass runs every horizon.FullScanEvery, so no expired lease waits longer
// than that.
type Sweeper struct {
	cfg     Config
	horizon horizon.Horizon
}

// New returns a Sweeper working with cfg.
func New(cfg Config) (*Sweeper, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Sweeper{cfg: cfg}, nil
}

// Run sweeps on the interval until ctx ends.
func (s *Sweeper) Run(ctx context.Context) {
	loop.Every(ctx, s.cfg.Every, func(ctx context.Context) { s.SweepOnce(ctx) })
}

// SweepOnce runs the sweep now and reports how many expired jobs went back
// to pending and how many to the dead table.
func (s *Sweeper) SweepOnce(ctx context.Context) (requeued, dead int) {
	start := time.Now()
	full, complete := true, false
	defer func() { s.horizon.Done(start, complete, full) }()
	for ctx.Err() == nil {
		within := s.horizon.Window(start, time.Now())
		full = full && within == 0
		rows, err := s.cfg.Queries.Sweep(ctx, db.SweepParams{MaxJobs: int32(s.cfg.Batch), WithinMs: within.Milliseconds()})
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Log.Warn("sweep failed; retrying at the next interval", "error", err)
			}
			return requeued, dead
		}
		var wk announce.Set
		for _, r := range rows {
			if r.Dead {
				dead++
				s.cfg.Metrics.JobDead(r.Queue)
			} else {
				requeued++
			}
			// A job gone dead is announced too: it freed its key's slot,
			// and jobs of the key held back behind it are ready now.
			wk.Add(r.Queue, r.Priority, r.RunAt, r.ID)
		}
		s.cfg.Announce(ctx, &wk, "sweep")
		if len(rows) > 0 {
			s.cfg.Log.Info("swept expired leases", "requeued", requeued, "dead", dead)
		}
		if len(rows) < s.cfg.Batch {
			complete = true
			break
		}
	}
	return requeued, dead
}
