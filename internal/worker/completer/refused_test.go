package completer

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// Which refusals are the statement's own (split, degraded) and which the
// session's (tried again as they are, after a pause): a read-only server
// refuses every write, so its refusal must never degrade a result.
func TestRefusedForItsData(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		data bool
	}{
		{nil, false},
		{errors.New("broken pipe"), false},
		{&pgconn.PgError{Code: "22021"}, true},  // character not in repertoire
		{&pgconn.PgError{Code: "54000"}, true},  // program limit exceeded
		{&pgconn.PgError{Code: "23505"}, true},  // unique violation
		{&pgconn.PgError{Code: "25006"}, false}, // read-only: a standby, a demoted primary
		{&pgconn.PgError{Code: "08006"}, false},
		{&pgconn.PgError{Code: "40001"}, false},
		{&pgconn.PgError{Code: "57P01"}, false},
	} {
		_, data := refusedForItsData(tc.err)
		require.Equal(t, tc.data, data, "%v", tc.err)
	}
}

// What the server refused even once storable is stored as printable
// ASCII, lines and tabs kept.
func TestASCIIText(t *testing.T) {
	t.Parallel()
	require.Equal(t, "caf? ?\tok\n", asciiText("café \x00\tok\n"))
}
