package hopper

import (
	"context"
	"fmt"
	"time"

	"github.com/hopperq/hopper/jobs"
)

// Activity counts the jobs ever inserted into and removed from the live
// table, from PostgreSQL's statistics (updated about once a second, reset
// with them): two readings over their interval are the enqueue and finish
// rates. A reading costs one row of the statistics views, whatever the
// number of jobs. Read it from the primary: a standby's statistics count
// the standby's own writes, which are none.
type Activity struct {
	// At is when the counts were read (this process's clock).
	At time.Time
	// Enqueued counts the rows inserted, Finished the rows deleted (jobs
	// completed, dead, cancelled or purged).
	Enqueued, Finished int64
}

// Rates are the enqueue and finish rates, per second, between an earlier
// reading and this one (0 when the earlier one is not earlier).
func (a Activity) Rates(earlier Activity) (enqueued, finished float64) {
	secs := a.At.Sub(earlier.At).Seconds()
	if secs <= 0 {
		return 0, 0
	}
	return float64(a.Enqueued-earlier.Enqueued) / secs, float64(a.Finished-earlier.Finished) / secs
}

// GetActivity reads the live table's activity counts (Activity): cheap
// enough to poll every few seconds, unlike GetStats, which reads the
// tables whole.
func (c *Client) GetActivity(ctx context.Context) (Activity, error) {
	return c.GetActivityTx(ctx, c.db)
}

// GetActivityTx is GetActivity on the caller's transaction.
func (c *Client) GetActivityTx(ctx context.Context, tx jobs.DBTX) (Activity, error) {
	a, err := c.activity(ctx, tx)
	if err != nil {
		return Activity{}, fmt.Errorf("activity: %w", err)
	}
	return a, nil
}

// activity reads the statistics' counts, for GetActivity and GetStats.
func (c *Client) activity(ctx context.Context, tx jobs.DBTX) (Activity, error) {
	row, err := c.queries(tx).TableActivity(ctx)
	if err != nil {
		return Activity{}, err
	}
	return Activity{At: time.Now(), Enqueued: row.Inserted, Finished: row.Deleted}, nil
}
