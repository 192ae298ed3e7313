package migrated

import (
	"errors"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrReadOnly is the error of a write a read-only server refused
// (SQLSTATE 25006, read_only_sql_transaction): the session reached a
// standby, or a primary a failover demoted, or its transactions are read
// only (default_transaction_read_only, BEGIN READ ONLY). Package jobs
// exports it as jobs.ErrReadOnly, package worker as worker.ErrReadOnly.
var ErrReadOnly = errors.New("hopper: read-only database")

// readOnlyFix is what to do, as every ErrReadOnly says it: the usual cause
// is a connection string that names one node of a highly available
// cluster, and that node is a standby now.
const readOnlyFix = "the session is on a standby, or on a primary a failover demoted " +
	"(or its transactions are read only): connect to the primary, with a connection string " +
	"that lists every node and sets target_session_attrs=read-write"

type readOnlyError struct {
	msg   string
	cause error
}

func (e *readOnlyError) Error() string   { return e.msg }
func (e *readOnlyError) Unwrap() []error { return []error{ErrReadOnly, e.cause} }

// ExplainReadOnly returns err as ErrReadOnly, saying what to do, when the
// database refused a write as read-only (SQLSTATE 25006); the database's
// error stays matchable with errors.As. Any other error, one that is
// ErrReadOnly already, and nil, are returned as they are.
func ExplainReadOnly(err error) error {
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.ReadOnlySQLTransaction || errors.Is(err, ErrReadOnly) {
		return err
	}
	return &readOnlyError{msg: ErrReadOnly.Error() + ": " + err.Error() + ": " + readOnlyFix, cause: err}
}
