package migrated

import (
	"errors"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrIsolation is the error of a write to a job of a sequence or a
// workflow in a transaction that is not READ COMMITTED. The triggers that
// pass those jobs' turns read what other transactions committed since
// each statement began; under REPEATABLE READ or SERIALIZABLE they would
// see the transaction's first snapshot, and strand work. The schema's
// triggers refuse such writes (SQLSTATE 0A000, a message that starts
// "hopper: read committed required"), and Explain names them with this.
var ErrIsolation = errors.New("hopper: read committed isolation required")

// isolationPrefix starts the message of the schema's refusal
// (hopper_require_read_committed, migration 15).
const isolationPrefix = "hopper: read committed required"

type isolationError struct{ cause error }

func (e *isolationError) Error() string   { return e.cause.Error() }
func (e *isolationError) Unwrap() []error { return []error{ErrIsolation, e.cause} }

// explainIsolation returns err as ErrIsolation when it is the schema's
// refusal of an isolation level, and nil otherwise.
func explainIsolation(err error, pgErr *pgconn.PgError) error {
	if pgErr.Code == pgerrcode.FeatureNotSupported && strings.HasPrefix(pgErr.Message, isolationPrefix) {
		return &isolationError{cause: err}
	}
	return nil
}
