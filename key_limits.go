package hopper

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
)

// MaxKeyLimitRunning bounds a key's own limit (SetKeyLimit).
const MaxKeyLimitRunning = 1_000_000

// KeyLimit is one concurrency key's own limit in one queue: at most
// MaxRunning of its jobs run at once, over its kind's and queue's
// KeyLimit. Running is how many run as it is read.
type KeyLimit struct {
	Queue, Key string
	MaxRunning int
	UpdatedAt  time.Time
	Running    int64
}

// SetKeyLimit sets how many jobs of key may run at once in queue, across
// every worker: a premium tenant's key at 10 where the queue's KeyLimit
// is 1. It holds in queues that workers claim under flow control
// (worker.Config.FlowControl, or a kind with a KeyLimit or SharedLimit),
// from their next claim on, whether or not the queue has a KeyLimit of
// its own; elsewhere it is kept but not applied. Errors wrap
// jobs.ErrInvalidQueue, jobs.ErrInvalidConcurrencyKey or ErrInvalidFilter
// (n outside 1 to MaxKeyLimitRunning).
func (c *Client) SetKeyLimit(ctx context.Context, queue, key string, n int) error {
	return c.SetKeyLimitTx(ctx, c.db, queue, key, n)
}

// SetKeyLimitTx is SetKeyLimit on the caller's transaction: claims apply
// the limit once it commits.
func (c *Client) SetKeyLimitTx(ctx context.Context, tx jobs.DBTX, queue, key string, n int) error {
	if err := checkQueueKey(queue, key); err != nil {
		return fmt.Errorf("set key limit: %w", err)
	}
	if n < 1 || n > MaxKeyLimitRunning {
		return fmt.Errorf("set key limit: %w: %d jobs is outside 1 to %d", ErrInvalidFilter, n, MaxKeyLimitRunning)
	}
	if err := c.queries(tx).SetKeyLimit(ctx, db.SetKeyLimitParams{Queue: queue, Key: key, MaxRunning: int32(n)}); err != nil {
		return fmt.Errorf("set key limit %s %s: %w", queue, key, err)
	}
	return nil
}

// DeleteKeyLimit removes key's own limit in queue, and reports whether it
// had one: from the next claim the key is limited by its kind's or
// queue's KeyLimit again.
func (c *Client) DeleteKeyLimit(ctx context.Context, queue, key string) (bool, error) {
	return c.DeleteKeyLimitTx(ctx, c.db, queue, key)
}

// DeleteKeyLimitTx is DeleteKeyLimit on the caller's transaction.
func (c *Client) DeleteKeyLimitTx(ctx context.Context, tx jobs.DBTX, queue, key string) (bool, error) {
	if err := checkQueueKey(queue, key); err != nil {
		return false, fmt.Errorf("delete key limit: %w", err)
	}
	n, err := c.queries(tx).DeleteKeyLimit(ctx, db.DeleteKeyLimitParams{Queue: queue, Key: key})
	if err != nil {
		return false, fmt.Errorf("delete key limit %s %s: %w", queue, key, err)
	}
	return n > 0, nil
}

// ListKeyLimits returns the keys' own limits, of one queue or, with queue
// "", of all, by queue and key, up to limit (0: DefaultKeysLimit; at most
// MaxKeysLimit).
func (c *Client) ListKeyLimits(ctx context.Context, queue string, limit int) ([]KeyLimit, error) {
	return c.ListKeyLimitsTx(ctx, c.db, queue, limit)
}

// ListKeyLimitsTx is ListKeyLimits on the caller's transaction.
func (c *Client) ListKeyLimitsTx(ctx context.Context, tx jobs.DBTX, queue string, limit int) ([]KeyLimit, error) {
	if limit == 0 {
		limit = DefaultKeysLimit
	}
	if limit < 1 || limit > MaxKeysLimit {
		return nil, fmt.Errorf("key limits: %w: limit %d is outside 1 to %d", ErrInvalidFilter, limit, MaxKeysLimit)
	}
	found, err := c.queries(tx).ListKeyLimits(ctx, db.ListKeyLimitsParams{Queue: queue, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("key limits: %w", err)
	}
	out := make([]KeyLimit, len(found))
	for i, r := range found {
		out[i] = KeyLimit{Queue: r.Queue, Key: r.Key, MaxRunning: int(r.MaxRunning), UpdatedAt: r.UpdatedAt, Running: r.Running}
	}
	return out, nil
}

// checkQueueKey applies enqueue's rules to a queue name and a key.
func checkQueueKey(queue, key string) error {
	if err := jobs.ValidateQueue(queue); err != nil {
		return err
	}
	switch n := utf8.RuneCountInString(key); {
	case key == "":
		return fmt.Errorf("%w: empty", jobs.ErrInvalidConcurrencyKey)
	case n > jobs.MaxConcurrencyKeyLength:
		return fmt.Errorf("%w: %d characters long, over the limit of %d", jobs.ErrInvalidConcurrencyKey, n, jobs.MaxConcurrencyKeyLength)
	case !utf8.ValidString(key) || strings.ContainsRune(key, 0):
		return fmt.Errorf("%w: not valid UTF-8 text", jobs.ErrInvalidConcurrencyKey)
	}
	return nil
}
