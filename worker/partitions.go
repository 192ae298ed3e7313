package worker

import (
	"context"
	"time"

	"github.com/hopperq/hopper/db"
)

// MaxHistoryPartitionsAhead bounds how many partitions of the history a
// worker keeps created ahead of now (Config.HistoryPartitionWidth): every
// lookup of a completed job by id reads each partition's primary key.
const MaxHistoryPartitionsAhead = 24

// DefaultHistoryPartitionWidth is Config.HistoryPartitionWidth's default.
const DefaultHistoryPartitionWidth = time.Hour

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
func (m *pruner) partitions(ctx context.Context) {
	m.historyPartitions(ctx)
	m.deadPartitions(ctx)
}

// historyPartitions drops the history's partitions whose range has passed
// and creates those this worker's keeps need ahead, once the history is
// used.
func (m *pruner) historyPartitions(ctx context.Context) {
	dropped, err := m.q.DropHistoryPartitions(ctx)
	if err != nil && ctx.Err() == nil {
		m.log.Warn("dropping the history's expired partitions failed; retrying at the next interval", "error", err)
	}
	var created int32
	if keep := m.longestKeep(); m.partitionWidth > 0 && keep > 0 && m.historyUsed(ctx) {
		ahead := min(keep+m.partitionWidth, MaxHistoryPartitionsAhead*m.partitionWidth)
		created, err = m.q.EnsureHistoryPartitions(ctx, db.EnsureHistoryPartitionsParams{
			WidthMs: m.partitionWidth.Milliseconds(), AheadMs: ahead.Milliseconds()})
		if err != nil && ctx.Err() == nil {
			m.log.Warn("creating the history's partitions failed; retrying at the next interval", "error", err)
		}
	}
	if dropped+created > 0 {
		m.log.Info("history partitions", "dropped", dropped, "created", created)
	}
}

// historyUsed reports whether the history holds any row: until one is
// kept, no partition is made (the first rows go to the default partition).
func (m *pruner) historyUsed(ctx context.Context) bool {
	used, err := m.q.HistoryHasRows(ctx)
	if err != nil && ctx.Err() == nil {
		m.log.Warn("reading whether the history is used failed; retrying at the next interval", "error", err)
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
func (m *pruner) deadPartitions(ctx context.Context) {
	if m.deadRetention < minPartitionWidth {
		return
	}
	dropped, err := m.dropDeadPartitions(ctx)
	if err != nil && ctx.Err() == nil {
		m.log.Warn("dropping the dead jobs' expired partitions failed; retrying at the next interval", "error", err)
	}
	var created int32
	if width := deadPartitionWidth(m.deadRetention); width > 0 {
		created, err = m.q.EnsureDeadPartitions(ctx, db.EnsureDeadPartitionsParams{
			WidthMs: width.Milliseconds(), AheadMs: (2 * width).Milliseconds()})
		if err != nil && ctx.Err() == nil {
			m.log.Warn("creating the dead jobs' partitions failed; retrying at the next interval", "error", err)
		}
	}
	if dropped+created > 0 {
		m.log.Info("dead job partitions", "dropped", dropped, "created", created)
	}
}

// dropDeadPartitions drops the dead jobs' partitions expired for this
// worker's retention that end before the first one holding a job of a
// queue it does not serve: that job is its own workers' to prune.
func (m *pruner) dropDeadPartitions(ctx context.Context) (int32, error) {
	retention := m.deadRetention.Milliseconds()
	held, err := m.q.DeadPartitionHeld(ctx, db.DeadPartitionHeldParams{RetentionMs: retention, Queues: m.queues})
	if err != nil {
		return 0, err
	}
	p := db.DropDeadPartitionsParams{RetentionMs: retention}
	if held.Held {
		p.HeldFrom = &held.HeldFrom
	}
	return m.q.DropDeadPartitions(ctx, p)
}
