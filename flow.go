package hopper

import (
	"context"
	"fmt"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
)

// KeyCount is one concurrency key's live jobs in one queue: what flow
// control holds back (Ready) and lets run (Running).
type KeyCount struct {
	Queue, Key                string
	Ready, Running, Scheduled int64
}

// DefaultKeysLimit and MaxKeysLimit bound Keys' answer.
const (
	DefaultKeysLimit = 20
	MaxKeysLimit     = 1000
)

// ListKeys returns the concurrency keys with the most ready jobs (ties: the
// most running), in one queue or, with queue "", in all, up to limit (0:
// DefaultKeysLimit). It reads the keyed jobs' index, not the whole table.
func (c *Client) ListKeys(ctx context.Context, queue string, limit int) ([]KeyCount, error) {
	return c.ListKeysTx(ctx, c.db, queue, limit)
}

// ListKeysTx is ListKeys on the caller's transaction.
func (c *Client) ListKeysTx(ctx context.Context, tx jobs.DBTX, queue string, limit int) ([]KeyCount, error) {
	if limit == 0 {
		limit = DefaultKeysLimit
	}
	if limit < 1 || limit > MaxKeysLimit {
		return nil, fmt.Errorf("keys: %w: limit %d is outside 1 to %d", ErrInvalidFilter, limit, MaxKeysLimit)
	}
	found, err := c.queries(tx).KeyStats(ctx, db.KeyStatsParams{Queue: queue, MaxKeys: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	out := make([]KeyCount, len(found))
	for i, r := range found {
		out[i] = KeyCount{Queue: r.Queue, Key: r.ConcurrencyKey, Ready: r.Ready, Running: r.Running, Scheduled: r.Scheduled}
	}
	return out, nil
}

// RateBudget is a global rate limit's window at one moment: Used of Limit
// jobs claimed in the last Per, for one group of one queue (Group is ""
// for a limit on the whole queue, else a kind or a concurrency key).
type RateBudget struct {
	Queue, Group string
	Limit        int
	Per          time.Duration
	Used         int
}

// Left is the budget left in the window.
func (b RateBudget) Left() int { return max(0, b.Limit-b.Used) }

// ListRateBudgets returns the global rate limits in use (those with a claim
// in their window), with the limit and window the latest claim ran with.
func (c *Client) ListRateBudgets(ctx context.Context) ([]RateBudget, error) {
	return c.ListRateBudgetsTx(ctx, c.db)
}

// ListRateBudgetsTx is ListRateBudgets on the caller's transaction.
func (c *Client) ListRateBudgetsTx(ctx context.Context, tx jobs.DBTX) ([]RateBudget, error) {
	found, err := c.queries(tx).RateStats(ctx)
	if err != nil {
		return nil, fmt.Errorf("rate budgets: %w", err)
	}
	out := make([]RateBudget, len(found))
	for i, r := range found {
		out[i] = RateBudget{Queue: r.Queue, Group: r.RateGroup, Limit: int(r.RateLimit),
			Per: time.Duration(r.WindowMs) * time.Millisecond, Used: int(r.Used)}
	}
	return out, nil
}
