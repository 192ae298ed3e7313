package jobs

import (
	"fmt"

	"github.com/hopperq/hopper/internal/schemascope"
)

// InSchema returns dbtx with every statement Hopper runs on it pointed at
// schema, the one holding Hopper's tables: for a pool whose search_path
// cannot lead there, such as one that reaches PostgreSQL through PgBouncer
// in transaction mode (which refuses search_path in the connection
// string). Pass what it returns wherever Hopper takes a DBTX: to a kind's
// Enqueue, and to hopper.NewClient (whose Tx methods then scope the
// caller's transaction the same way).
//
// Each statement sets search_path for its own transaction only
// (set_config(…, true)), so nothing leaks to other users of a pooled
// server connection: with pgx's exec or simple-protocol mode the setting
// and the statement share one round trip; in a caller's transaction the
// caller's search_path is restored after the statement; with pgx's
// statement cache (the default mode) each statement runs in a transaction
// of its own, which costs three more round trips. On a direct connection,
// setting search_path on the pool is simpler and faster.
//
// dbtx must be a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
func InSchema(dbtx DBTX, schema string) (DBTX, error) {
	if dbtx == nil {
		return nil, fmt.Errorf("schema %q: %w: nil database", schema, ErrInvalidSchema)
	}
	d, err := schemascope.New(dbtx, schema)
	if err != nil {
		return nil, fmt.Errorf("schema %q: %w: %w", schema, ErrInvalidSchema, err)
	}
	return d, nil
}
