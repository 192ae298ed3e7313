package hopper

import (
	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
)

// Client operates a Hopper queue: it looks jobs up and lists them, reads
// stats, cancels jobs, retries and purges dead ones, and pauses and
// resumes queues. It runs on a pool (or any jobs.DBTX); every operation
// has a Tx variant that runs on the caller's transaction instead, so that
// it commits or rolls back with the caller's own writes. A Client is safe
// for concurrent use and holds no state of its own.
type Client struct {
	db jobs.DBTX
}

// NewClient returns a Client that runs its operations on dbtx, usually a
// *pgxpool.Pool whose search_path leads to Hopper's tables.
func NewClient(dbtx jobs.DBTX) *Client {
	if dbtx == nil {
		panic("hopper: NewClient: nil database")
	}
	return &Client{db: dbtx}
}

func queries(dbtx jobs.DBTX) *db.Queries { return db.New(dbtx) }
