// Package commitfate tells the two kinds of a failed write apart: refused
// (the server answered an error for the statement, so its transaction
// rolled back and it had no effect) and unknown (the statement's commit
// may have taken effect, but its reply did not say so). The worker's
// components classify each failed claim, ack, nack and extension with
// Unknown, and check what took effect only then: the hot paths read
// nothing more.
package commitfate

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unknown reports whether a failed statement may have committed even
// though it failed:
//
//   - the connection broke or timed out after the statement was sent (a
//     lost reply): the server may have committed it (pgx's SafeToRetry
//     tells a statement that never left this process, which is refused);
//   - the server ended the session (an error of severity FATAL or PANIC,
//     or a termination's SQLSTATE, 57P01 or 57P02, which Citus's
//     coordinator relays from a worker node as an ERROR): a backend
//     terminated while it waited for synchronous replication has
//     committed locally, and a crash may come after the commit record;
//   - a connection exception (SQLSTATE class 08) from a server that passes
//     statements on: Citus's coordinator reports a worker node's
//     connection lost during a statement (ERRCODE_CONNECTION_FAILURE,
//     08006), which the node may have committed on its own;
//   - Citus's reports of a commit on a worker node that failed:
//     "could not commit transaction for shard N on at least one active
//     node" after its "failed to commit transaction on host:port" warning
//     (the coordinator's own transaction rolled back, the node's may have
//     committed), and "execution cannot recover from multiple connection
//     failures"; both are SQLSTATE XX000, which Citus gives no code of its
//     own, so their text tells them (citus 13, remote_transaction.c,
//     placement_connection.c, adaptive_executor.c).
//
// Every other error the server answers is refused. Taking a refused
// statement for unknown costs a read; the reverse loses track of work
// that was done, so the classification leans to unknown.
func Unknown(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return !pgconn.SafeToRetry(err)
	}
	switch {
	case pgErr.Severity == "FATAL" || pgErr.Severity == "PANIC":
		return true
	case pgErr.Code == "57P01" || pgErr.Code == "57P02":
		// The same, relayed as an ERROR by Citus's coordinator from the
		// worker node whose backend ended.
		return true
	case strings.HasPrefix(pgErr.Code, "08"):
		return true
	case pgErr.Code == "XX000":
		return strings.HasPrefix(pgErr.Message, citusCommitFailed) || strings.HasPrefix(pgErr.Message, citusConnectionsFailed)
	}
	return false
}

// Citus's texts for a commit it could not see through (see Unknown).
const (
	citusCommitFailed      = "could not commit transaction for shard"
	citusConnectionsFailed = "execution cannot recover from multiple connection failures"
)

// Refused reports whether a failed statement certainly had no effect: an
// error the server answered, or one before the statement left this
// process. It is !Unknown for every error but nil.
func Refused(err error) bool { return err != nil && !Unknown(err) }
