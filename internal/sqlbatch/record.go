// Package sqlbatch sends a statement in one pgx batch with statements run
// before and after it (a lock, a search_path and its restore): one round
// trip, and, outside a transaction, one implicit transaction that the
// server commits at the batch's end. The statements around it are
// recorded from the sqlc-generated methods (Record), so that their SQL
// stays in queries/ and is never written anywhere else.
package sqlbatch

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hopperq/hopper/db"
)

// Statement is one statement with its bound arguments.
type Statement struct {
	SQL  string
	Args []any
}

// Record returns the statement of an :exec method without running it:
// call runs the method on a recorder, which keeps what it was asked to
// run.
func Record(call func(*db.Queries) error) Statement {
	var r recorder
	_ = call(db.New(&r))
	return r.stmt
}

// errRecordsExecOnly: only :exec methods can be recorded, since a method
// that reads rows would go on to decode them.
var errRecordsExecOnly = errors.New("sqlbatch: only :exec statements are recorded")

type recorder struct{ stmt Statement }

func (r *recorder) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.stmt = Statement{SQL: sql, Args: args}
	return pgconn.CommandTag{}, nil
}

func (r *recorder) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errRecordsExecOnly
}

func (r *recorder) QueryRow(context.Context, string, ...any) pgx.Row { return nil }

func (r *recorder) CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error) {
	return 0, errRecordsExecOnly
}
