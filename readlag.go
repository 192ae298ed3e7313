package hopper

import (
	"context"
	"fmt"
	"time"

	"github.com/hopperq/hopper/jobs"
)

// ReadLag says how stale a client's reads may be. A client may read a
// standby (a replica, or the standby of an HA pair) to keep listings,
// stats and dashboards off the primary; what it reads is then as of the
// last transaction the standby replayed. Changes — cancel, retry, edit,
// pause — must still go to a client on the primary: a standby refuses
// them (SQLSTATE 25006).
type ReadLag struct {
	// Standby: the session reads a server in recovery.
	Standby bool
	// Behind: zero while the standby has replayed all the WAL it has
	// received, else the age of the last transaction it replayed (on a
	// busy primary, about how far replay trails it; on an idle one, how
	// long since the last write, which overstates). Zero on a primary.
	Behind time.Duration
	// Unknown: the standby receives no WAL (its WAL receiver is not
	// running: the primary died, or cannot be reached). It has replayed
	// all it received, yet may be behind by any amount: Behind is then
	// only a lower bound, the age of the last transaction it replayed.
	Unknown bool
}

// GetReadLag reads how stale this client's reads may be.
func (c *Client) GetReadLag(ctx context.Context) (ReadLag, error) {
	return c.GetReadLagTx(ctx, c.db)
}

// GetReadLagTx is GetReadLag on the caller's transaction.
func (c *Client) GetReadLagTx(ctx context.Context, tx jobs.DBTX) (ReadLag, error) {
	r, err := c.queries(tx).ReadLag(ctx)
	if err != nil {
		return ReadLag{}, fmt.Errorf("read lag: %w", err)
	}
	return ReadLag{Standby: r.Standby, Behind: time.Duration(r.LagSeconds * float64(time.Second)), Unknown: !r.Receiving}, nil
}

// String is how the hopper command and the dashboard show it.
func (l ReadLag) String() string {
	switch {
	case !l.Standby:
		return "read from the primary"
	case l.Unknown:
		return fmt.Sprintf("read from a standby that receives no WAL (its primary is unreachable): lag unknown, at least %v", l.Behind.Round(time.Millisecond))
	case l.Behind == 0:
		return "read from a standby, caught up"
	default:
		return fmt.Sprintf("read from a standby, %v behind", l.Behind.Round(time.Millisecond))
	}
}
