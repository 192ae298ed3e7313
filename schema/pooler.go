package schema

import (
	"errors"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// refusedStartupParameter reports whether err is a server refusing a
// startup parameter, as PgBouncer does with every one it does not track
// (SQLSTATE 08P01, "unsupported startup parameter: lock_timeout"), and
// names the parameter. PostgreSQL itself takes any setting there.
func refusedStartupParameter(err error) (pgErr *pgconn.PgError, param string, ok bool) {
	if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.ProtocolViolation {
		return nil, "", false
	}
	param, ok = strings.CutPrefix(pgErr.Message, "unsupported startup parameter: ")
	return pgErr, param, ok
}

// poolerError is the migrator refused by a pooler: it matches
// ErrThroughPooler, and unwraps to the server's refusal too.
type poolerError struct {
	param string
	cause error
}

func (e *poolerError) Error() string {
	return "hopper: migrate: the server refused the " + e.param + " startup parameter of the migrator's sessions, " +
		"as PgBouncer does: migrate against PostgreSQL directly, not through a pooler (" + e.cause.Error() + ")"
}

func (e *poolerError) Unwrap() []error { return []error{ErrThroughPooler, e.cause} }

// throughPooler turns a pooler's refusal of a startup parameter into a
// poolerError, and leaves any other error as it is.
func throughPooler(err error) error {
	pgErr, param, ok := refusedStartupParameter(err)
	if !ok {
		return err
	}
	return &poolerError{param: param, cause: pgErr}
}
