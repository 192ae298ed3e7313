package commitfate_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/worker/commitfate"
)

func pgErr(severity, code, msg string) error {
	return &pgconn.PgError{Severity: severity, Code: code, Message: msg}
}

// Every failure is refused (the server answered: no effect) or unknown (the
// commit may have taken effect), whatever wraps it.
func TestUnknown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		err     error
		unknown bool
	}{
		{"no error", nil, false},
		{"a lost reply", io.ErrUnexpectedEOF, true},
		{"a broken connection", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, true},
		{"a timeout while waiting for the answer", context.DeadlineExceeded, true},
		{"a serialization failure", pgErr("ERROR", "40001", "could not serialize access due to concurrent update"), false},
		{"a deadlock", pgErr("ERROR", "40P01", "deadlock detected"), false},
		{"a read-only server", pgErr("ERROR", "25006", "cannot execute UPDATE in a read-only transaction"), false},
		{"a value too long", pgErr("ERROR", "22001", "value too long"), false},
		{"a statement timeout", pgErr("ERROR", "57014", "canceling statement due to statement timeout"), false},
		{"an internal error", pgErr("ERROR", "XX000", "cache lookup failed for relation 1"), false},
		{"the backend terminated (sync replication's wait)", pgErr("FATAL", "57P01", "terminating connection due to administrator command"), true},
		{"a crash of another backend", pgErr("FATAL", "57P02", "terminating connection because of crash of another server process"), true},
		{"Citus: a worker node's backend terminated", pgErr("ERROR", "57P01", "terminating connection due to administrator command"), true},
		{"the database starting up", pgErr("FATAL", "57P03", "the database system is starting up"), true},
		{"Citus: a worker node's connection lost", pgErr("ERROR", "08006", "connection to the remote node postgres@localhost:9701 failed with the following error: server closed the connection unexpectedly"), true},
		{"Citus: a worker node's commit failed", pgErr("ERROR", "XX000", "could not commit transaction for shard 102008 on at least one active node"), true},
		{"Citus: every placement's connection failed", pgErr("ERROR", "XX000", "execution cannot recover from multiple connection failures. Last node failed localhost:9702"), true},
		{"wrapped", fmt.Errorf("ack batch: %w", pgErr("ERROR", "XX000", "could not commit transaction for shard 1 on at least one active node")), true},
	} {
		require.Equal(t, tc.unknown, commitfate.Unknown(tc.err), tc.name)
		require.Equal(t, !tc.unknown && tc.err != nil, commitfate.Refused(tc.err), tc.name)
	}
}
