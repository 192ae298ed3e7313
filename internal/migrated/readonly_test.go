package migrated_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/migrated"
)

// TestExplainReadOnly: only a read-only server's refusal (25006) becomes
// ErrReadOnly, once however often it is explained, naming the fix and
// keeping the database's error and its context.
func TestExplainReadOnly(t *testing.T) {
	t.Parallel()
	readOnly := fmt.Errorf("register queues: %w", &pgconn.PgError{Severity: "ERROR", Code: "25006",
		Message: "cannot execute INSERT in a read-only transaction"})
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"no answer", errors.New("unexpected EOF"), false},
		{"another refusal", &pgconn.PgError{Code: "23505"}, false},
		{"read-only", readOnly, true},
		{"explained twice", migrated.ExplainReadOnly(readOnly), true},
		{"through Explain", migrated.Explain(readOnly, nil), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := migrated.ExplainReadOnly(c.err)
			require.Equal(t, c.want, errors.Is(got, migrated.ErrReadOnly), "%v", got)
			if !c.want {
				require.Equal(t, c.err, got, "returned as it is")
				return
			}
			var pgErr *pgconn.PgError
			require.True(t, errors.As(got, &pgErr))
			require.Equal(t, "hopper: read-only database: register queues: ERROR: cannot execute INSERT in a read-only transaction (SQLSTATE 25006): "+
				"the session is on a standby, or on a primary a failover demoted (or its transactions are read only): "+
				"connect to the primary, with a connection string that lists every node and sets target_session_attrs=read-write", got.Error())
		})
	}
}
