package hopper

import (
	"context"
	"fmt"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
)

// sequenceCountLimit bounds how many waiting jobs a sequence read counts.
const sequenceCountLimit = 10000

// BlockedSequence is a sequence held by a head that ended dead or
// cancelled under the block policy (jobs.SequenceBlock): its jobs wait
// until RetrySequence or SkipSequence.
type BlockedSequence struct {
	Key string
	// JobID is the head that blocks it, now in the dead table (unless
	// purged since: then only SkipSequence helps).
	JobID int64
	Queue string
	Kind  string
	// State is jobs.StateDead or jobs.StateCancelled; Reason why.
	State  jobs.State
	Reason string
	// BlockedAt is when the head ended.
	BlockedAt time.Time
	// Waiting counts the jobs behind it, up to 10,000 (WaitingCapped says
	// the count stopped there).
	Waiting       int64
	WaitingCapped bool
}

// SequenceInfo is one sequence as it stands.
type SequenceInfo struct {
	Key string
	// HeadID is the job whose turn it is (pending, scheduled or running:
	// HeadState), 0 when none.
	HeadID    int64
	HeadState jobs.State
	// Blocked is the block holding the sequence, nil when none.
	Blocked *BlockedSequence
	// Waiting counts the jobs behind the head, up to 10,000.
	Waiting       int64
	WaitingCapped bool
}

// SequencePage asks ListBlockedSequences for a page.
type SequencePage struct {
	// After is the last key of the previous page ("" for the first).
	After string
	// Limit is the page's size: 1 to 1000, default 100.
	Limit int
}

// ListBlockedSequences lists blocked sequences in key order (bytewise),
// each with its head, why it ended, and how many jobs wait behind it.
func (c *Client) ListBlockedSequences(ctx context.Context, page SequencePage) ([]BlockedSequence, error) {
	return c.ListBlockedSequencesTx(ctx, c.db, page)
}

// ListBlockedSequencesTx is ListBlockedSequences on the caller's transaction.
func (c *Client) ListBlockedSequencesTx(ctx context.Context, tx jobs.DBTX, page SequencePage) ([]BlockedSequence, error) {
	limit, err := pageLimit(page.Limit)
	if err != nil {
		return nil, fmt.Errorf("list blocked sequences: %w", err)
	}
	rows, err := c.queries(tx).ListBlockedSequences(ctx, db.ListBlockedSequencesParams{
		AfterKey: page.After, MaxKeys: int32(limit), CountLimit: sequenceCountLimit,
	})
	if err != nil {
		return nil, fmt.Errorf("list blocked sequences: %w", err)
	}
	out := make([]BlockedSequence, len(rows))
	for i, r := range rows {
		out[i] = BlockedSequence{
			Key: r.SequenceKey, JobID: r.JobID, Queue: r.Queue, Kind: r.Kind, State: jobs.State(r.State),
			Reason: r.Reason, BlockedAt: r.BlockedAt, Waiting: r.Waiting, WaitingCapped: r.WaitingCapped,
		}
	}
	return out, nil
}

// GetSequence reads one sequence: its head, its block, how many wait. A
// key no job has is an empty sequence, not an error.
func (c *Client) GetSequence(ctx context.Context, key string) (SequenceInfo, error) {
	return c.GetSequenceTx(ctx, c.db, key)
}

// GetSequenceTx is GetSequence on the caller's transaction.
func (c *Client) GetSequenceTx(ctx context.Context, tx jobs.DBTX, key string) (SequenceInfo, error) {
	r, err := c.queries(tx).GetSequence(ctx, db.GetSequenceParams{SequenceKey: key, CountLimit: sequenceCountLimit})
	if err != nil {
		return SequenceInfo{}, fmt.Errorf("get sequence %q: %w", key, err)
	}
	info := SequenceInfo{Key: key, HeadID: r.HeadID, HeadState: jobs.State(r.HeadState), Waiting: r.Waiting, WaitingCapped: r.WaitingCapped}
	if r.BlockedBy != 0 {
		info.Blocked = &BlockedSequence{
			Key: key, JobID: r.BlockedBy, State: jobs.State(r.BlockedState), Reason: r.BlockedReason,
			Waiting: r.Waiting, WaitingCapped: r.WaitingCapped,
		}
		if r.BlockedAt != nil {
			info.Blocked.BlockedAt = *r.BlockedAt
		}
	}
	return info, nil
}

// SkipSequence lifts a blocked sequence's block without running its head
// again: the head stays dead (or cancelled) and the next job runs. It
// returns that job's id, 0 when none waits. ErrNotBlocked when the
// sequence is not blocked.
func (c *Client) SkipSequence(ctx context.Context, key string) (int64, error) {
	return c.SkipSequenceTx(ctx, c.db, key)
}

// SkipSequenceTx is SkipSequence on the caller's transaction.
func (c *Client) SkipSequenceTx(ctx context.Context, tx jobs.DBTX, key string) (int64, error) {
	r, err := c.queries(tx).SkipSequence(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("skip sequence %q: %w", key, err)
	}
	if !r.Skipped {
		return 0, fmt.Errorf("skip sequence %q: %w", key, ErrNotBlocked)
	}
	if r.Promoted == nil {
		return 0, nil
	}
	return *r.Promoted, nil
}

// RetrySequence runs a blocked sequence's head again: it comes back from
// the dead table under its own id, with as many attempts again as it had,
// as the sequence's head (the block is lifted when it commits), and the
// jobs behind it follow once it succeeds. It returns the head's id.
// ErrNotBlocked when the sequence is not blocked; ErrNotFound when the
// head was purged from the dead table (skip it instead).
func (c *Client) RetrySequence(ctx context.Context, key string) (int64, error) {
	return c.RetrySequenceTx(ctx, c.db, key)
}

// RetrySequenceTx is RetrySequence on the caller's transaction.
func (c *Client) RetrySequenceTx(ctx context.Context, tx jobs.DBTX, key string) (int64, error) {
	info, err := c.GetSequenceTx(ctx, tx, key)
	if err != nil {
		return 0, fmt.Errorf("retry sequence %q: %w", key, err)
	}
	if info.Blocked == nil {
		return 0, fmt.Errorf("retry sequence %q: %w", key, ErrNotBlocked)
	}
	id := info.Blocked.JobID
	res, err := c.RetryDeadJobsTx(ctx, tx, DeadFilter{IDs: []int64{id}, States: []jobs.State{jobs.StateDead, jobs.StateCancelled}})
	if err != nil {
		return 0, fmt.Errorf("retry sequence %q: %w", key, err)
	}
	switch {
	case len(res.Retried) == 1:
		return id, nil
	case len(res.Kept) == 1:
		return 0, fmt.Errorf("retry sequence %q: head %d kept dead: a live job holds its unique key", key, id)
	}
	return 0, fmt.Errorf("retry sequence %q: %w: head %d is no longer in the dead table (purged or retried meanwhile); SkipSequence lets the rest run", key, ErrNotFound, id)
}
