package pruner

import (
	"context"
	"time"

	"github.com/hopperq/hopper/db"
)

// MaxHistoryPartitionsAhead bounds how many partitions of the history a
// worker keeps created ahead of now (Config.PartitionWidth): every
// lookup of a completed job by id reads each partition's primary key.
const MaxHistoryPartitionsAhead = 24

// deadPartitionsPerRetention is how many partitions of the dead jobs one
// DeadRetention spans: a partition is DeadRetention/8 wide, so a dead job
// is kept at most an eighth longer than the retention, and a lookup by id
// reads about ten partitions' primary keys. Below 8 minutes of retention
// (a partition narrower than a minute) dead jobs are deleted row by row.
const deadPartitionsPerRetention = 8

// minPartitionWidth is the narrowest partition the schema's functions
// create.
const minPartitionWidth = time.Minute

// partitions drops the expired partitions of the history and of the dead
// jobs, and creates those this worker needs ahead. A failure (a lock not
// granted within the functions' lock_timeout, say) is logged and tried
// again at the next pass: meanwhile rows go to the partitions that exist,
// or to the default ones.
func (p *Pruner) partitions(ctx context.Context) {
	p.historyPartitions(ctx)
	p.deadPartitions(ctx)
}

// historyPartitions drops the history's partitions whose range has passed
// and creates those this worker's keeps need ahead, once the history is
// used.
func (p *Pruner) historyPartitions(ctx context.Context) {
	dropped, err := p.cfg.Queries.DropHistoryPartitions(ctx)
	if err != nil && ctx.Err() == nil {
		p.cfg.Log.Warn("dropping the history's expired partitions failed; retrying at the next interval", "error", err)
	}
	var created int32
	if keep := p.cfg.LongestKeep(); p.cfg.PartitionWidth > 0 && keep > 0 && p.historyUsed(ctx) {
		ahead := min(keep+p.cfg.PartitionWidth, MaxHistoryPartitionsAhead*p.cfg.PartitionWidth)
		created, err = p.cfg.Queries.EnsureHistoryPartitions(ctx, db.EnsureHistoryPartitionsParams{
			WidthMs: p.cfg.PartitionWidth.Milliseconds(), AheadMs: ahead.Milliseconds()})
		if err != nil && ctx.Err() == nil {
			p.cfg.Log.Warn("creating the history's partitions failed; retrying at the next interval", "error", err)
		}
	}
	if dropped+created > 0 {
		p.cfg.Log.Info("history partitions", "dropped", dropped, "created", created)
	}
}

// historyUsed reports whether the history holds any row: until one is
// kept, no partition is made (the first rows go to the default partition).
func (p *Pruner) historyUsed(ctx context.Context) bool {
	used, err := p.cfg.Queries.HistoryHasRows(ctx)
	if err != nil && ctx.Err() == nil {
		p.cfg.Log.Warn("reading whether the history is used failed; retrying at the next interval", "error", err)
	}
	return used
}

// deadPartitionWidth is the width of the dead jobs' partitions for a
// retention, or 0 when the retention is too short to partition.
func deadPartitionWidth(retention time.Duration) time.Duration {
	w := (retention / deadPartitionsPerRetention).Truncate(time.Second)
	if w < minPartitionWidth {
		return 0
	}
	return min(w, maxPartitionWidth)
}

// maxPartitionWidth is the widest partition the schema's functions create.
const maxPartitionWidth = 31 * 24 * time.Hour

// deadPartitions drops the dead jobs' partitions whose jobs all died
// longer than DeadRetention ago, up to the first that holds a job of a
// queue this worker does not serve (kept for its own workers' retention),
// and, when the retention is long enough, creates the next two
// partitions ahead (a job dies now, not later).
func (p *Pruner) deadPartitions(ctx context.Context) {
	if p.cfg.DeadRetention < minPartitionWidth {
		return
	}
	dropped, err := p.dropDeadPartitions(ctx)
	if err != nil && ctx.Err() == nil {
		p.cfg.Log.Warn("dropping the dead jobs' expired partitions failed; retrying at the next interval", "error", err)
	}
	var created int32
	if width := deadPartitionWidth(p.cfg.DeadRetention); width > 0 {
		created, err = p.cfg.Queries.EnsureDeadPartitions(ctx, db.EnsureDeadPartitionsParams{
			WidthMs: width.Milliseconds(), AheadMs: (2 * width).Milliseconds()})
		if err != nil && ctx.Err() == nil {
			p.cfg.Log.Warn("creating the dead jobs' partitions failed; retrying at the next interval", "error", err)
		}
	}
	if dropped+created > 0 {
		p.cfg.Log.Info("dead job partitions", "dropped", dropped, "created", created)
	}
}

// dropDeadPartitions drops the dead jobs' partitions expired for this
// worker's retention that end before the first one holding a job of a
// queue it does not serve: that job is its own workers' to prune.
func (p *Pruner) dropDeadPartitions(ctx context.Context) (int32, error) {
	retention := p.cfg.DeadRetention.Milliseconds()
	held, err := p.cfg.Queries.DeadPartitionHeld(ctx, db.DeadPartitionHeldParams{RetentionMs: retention, Queues: p.queues})
	if err != nil {
		return 0, err
	}
	drop := db.DropDeadPartitionsParams{RetentionMs: retention}
	if held.Held {
		drop.HeldFrom = &held.HeldFrom
	}
	return p.cfg.Queries.DropDeadPartitions(ctx, drop)
}
