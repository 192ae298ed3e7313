package hopper

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// sqlstateDuplicatePreparedStatement is duplicate_prepared_statement.
const sqlstateDuplicatePreparedStatement = "42P05"

// withPoolerHint names the fix when err is the server refusing a prepared
// statement that already exists: pgx's statement cache (its default
// exec mode) names statements per client connection, and a pooler in
// transaction mode (PgBouncer's pool_mode=transaction) runs several
// clients' statements on one server session, where the second client's
// name collides with the first's.
func withPoolerHint(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != sqlstateDuplicatePreparedStatement {
		return err
	}
	return fmt.Errorf("%w (the connection goes through a pooler in transaction mode, such as PgBouncer, which shares server sessions "+
		"between clients: set default_query_exec_mode=exec in the connection string, or pgx.QueryExecModeExec in its config, "+
		"so that pgx prepares no named statements)", err)
}
