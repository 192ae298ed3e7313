package hopper

import (
	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/migrated"
	"github.com/hopperq/hopper/internal/schemascope"
	"github.com/hopperq/hopper/jobs"
)

// Client operates a Hopper queue: it looks jobs up and lists them, reads
// stats, cancels jobs, retries and purges dead ones, and pauses and
// resumes queues. It runs on a pool (or any jobs.DBTX); every operation
// has a Tx variant that runs on the caller's transaction instead, so that
// it commits or rolls back with the caller's own writes. A Client is safe
// for concurrent use and holds no state of its own.
type Client struct {
	db    jobs.DBTX
	scope *schemascope.DB // jobs.InSchema's, when db came from it
}

// NewClient returns a Client that runs its operations on dbtx, usually a
// *pgxpool.Pool whose search_path leads to Hopper's tables. Given a pool
// scoped with jobs.InSchema, the Client scopes the transactions passed to
// its Tx methods to the same schema.
func NewClient(dbtx jobs.DBTX) *Client {
	if dbtx == nil {
		panic("hopper: NewClient: nil database")
	}
	c := &Client{db: dbtx}
	if s, ok := dbtx.(*schemascope.DB); ok {
		c.scope = s
	}
	return c
}

// queries runs on tx, in the Client's schema when it has one. An error
// that names a missing table or column is jobs.ErrNotMigrated, saying
// what is missing and what to run (migrated.Explain).
func (c *Client) queries(tx jobs.DBTX) *db.Queries {
	if c.scope != nil {
		return db.New(migrated.Wrap(c.scope.On(tx)))
	}
	return db.New(migrated.Wrap(tx))
}
