// Package schemascope runs Hopper's statements in a named schema without
// touching the connection's search_path, for deployments where it cannot
// be set per connection: PgBouncer in transaction mode refuses search_path
// as a startup parameter, and a session-level SET would stay on a server
// connection that serves other clients next.
//
// Each statement runs in a transaction that first points search_path at
// the schema with set_config(…, true) (queries/search_path.sql), so the
// setting ends with that transaction and never leaks:
//
//   - on a pool or connection in pgx's exec or simple-protocol mode (the
//     modes a transaction pooler needs), the setting and the statement go
//     in one pipeline: one round trip, one implicit transaction;
//   - in a caller's transaction, the caller's search_path is restored
//     right after the statement, so the caller's own statements that
//     follow resolve as before;
//   - with pgx's statement cache (the default mode), statements are
//     prepared before a pipeline runs, outside its transaction, so each
//     call runs in a transaction of its own: correct, but three more round
//     trips. On a direct connection, setting search_path on the pool is the
//     faster way (see docs/operating.md).
//
// CopyFrom names the table with its schema instead: its insert trigger
// finds everything through TG_TABLE_SCHEMA.
package schemascope

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/sqlbatch"
)

// MaxNameLen is PostgreSQL's limit on identifiers (NAMEDATALEN - 1 bytes).
const MaxNameLen = 63

// ErrUnsupported is returned for a database handle whose kind (pool,
// connection or transaction) cannot be told, since a statement's
// search_path can only be scoped knowing which.
var ErrUnsupported = errors.New("hopper: needs a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx")

// CheckName reports whether name can be a schema name.
func CheckName(name string) error {
	switch {
	case name == "":
		return errors.New("the schema name is empty")
	case len(name) > MaxNameLen:
		return fmt.Errorf("the schema name is %d bytes long; PostgreSQL allows at most %d", len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		if name[i] == 0 {
			return errors.New("the schema name contains a NUL byte")
		}
	}
	return nil
}

// DB runs every statement with search_path set to one schema. It has the
// methods of sqlc's DBTX, and Begin.
type DB struct {
	inner    db.DBTX
	schema   string
	enter    sqlbatch.Statement // EnterSchema
	leave    sqlbatch.Statement // LeaveSchema
	inTx     bool               // inner is a transaction: restore its search_path
	pipeline bool               // inner's exec mode runs a batch as one pipeline
	err      error              // why inner cannot be scoped; every call returns it
}

// New returns inner scoped to schema. inner must be a *pgxpool.Pool, a
// *pgxpool.Conn, a *pgx.Conn, a pgx.Tx or a DB (whose inner handle is
// then rescoped).
func New(inner db.DBTX, schema string) (*DB, error) {
	if err := CheckName(schema); err != nil {
		return nil, err
	}
	d := Wrap(inner, schema)
	if d.err != nil {
		return nil, d.err
	}
	return d, nil
}

// Wrap is New for a schema already checked; a handle it cannot scope
// gives a DB whose every call fails with the reason.
func Wrap(inner db.DBTX, schema string) *DB {
	d := &DB{schema: schema}
	d.enter = sqlbatch.Record(func(q *db.Queries) error {
		return q.EnterSchema(context.Background(), pgx.Identifier{schema}.Sanitize())
	})
	d.leave = sqlbatch.Record(func(q *db.Queries) error { return q.LeaveSchema(context.Background()) })
	return d.On(inner)
}

// On returns inner scoped to d's schema: a caller's transaction given to
// an operation of something that runs in the schema.
func (d *DB) On(inner db.DBTX) *DB {
	switch v := inner.(type) {
	case *DB:
		if v.schema == d.schema {
			return v // already scoped (a Client's own pool, say)
		}
		inner = v.inner
	case *scopedTx:
		inner = v.Tx
	}
	d = &DB{inner: inner, schema: d.schema, enter: d.enter, leave: d.leave}
	schema := d.schema
	var mode pgx.QueryExecMode
	switch v := inner.(type) {
	case *pgxpool.Pool:
		mode = v.Config().ConnConfig.DefaultQueryExecMode
	case *pgxpool.Conn:
		// A connection held from a pool: the worker's heartbeat holds
		// one for its beats and lease extensions.
		mode = v.Conn().Config().DefaultQueryExecMode
	case *pgx.Conn:
		mode = v.Config().DefaultQueryExecMode
	case pgx.Tx:
		mode = v.Conn().Config().DefaultQueryExecMode
		d.inTx = true
	default:
		d.err = fmt.Errorf("schema %s: %T: %w", schema, inner, ErrUnsupported)
	}
	d.pipeline = mode == pgx.QueryExecModeExec || mode == pgx.QueryExecModeSimpleProtocol
	return d
}

// Inner is the handle d scopes.
func (d *DB) Inner() db.DBTX { return d.inner }

// Schema is the schema d runs statements in.
func (d *DB) Schema() string { return d.schema }

// Exec runs one statement in the schema.
func (d *DB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	rows, err := d.Query(ctx, sql, args...)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	for rows.Next() {
	}
	rows.Close()
	return rows.CommandTag(), rows.Err()
}

// Query runs one statement in the schema; the rows must be closed (sqlc's
// code always does), which ends the scope.
func (d *DB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if d.err != nil {
		return nil, d.err
	}
	switch {
	case d.pipeline:
		return d.queryPipelined(ctx, sql, args)
	case d.inTx:
		return d.queryInCallersTx(ctx, sql, args)
	default:
		return d.queryInOwnTx(ctx, sql, args)
	}
}

// QueryRow runs one statement in the schema; Scan reports its errors.
func (d *DB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return row{run: func() (pgx.Rows, error) { return d.Query(ctx, sql, args...) }}
}

// CopyFrom copies into the table of the schema (a one-part name is
// qualified with it).
func (d *DB) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if d.err != nil {
		return 0, d.err
	}
	if len(table) == 1 {
		table = pgx.Identifier{d.schema, table[0]}
	}
	return d.inner.CopyFrom(ctx, table, columns, src)
}

// Begin starts a transaction (a savepoint inside one) whose statements
// run in the schema.
func (d *DB) Begin(ctx context.Context) (pgx.Tx, error) {
	if d.err != nil {
		return nil, d.err
	}
	tx, err := d.beginInner(ctx)
	if err != nil {
		return nil, err
	}
	return &scopedTx{Tx: tx, db: d.On(tx)}, nil
}

// beginInner begins a transaction (a savepoint in one) on the handle.
func (d *DB) beginInner(ctx context.Context) (pgx.Tx, error) {
	b, ok := d.inner.(interface {
		Begin(context.Context) (pgx.Tx, error)
	})
	if !ok {
		return nil, fmt.Errorf("schema %s: %T cannot begin a transaction", d.schema, d.inner)
	}
	return b.Begin(ctx)
}

// queryPipelined sends the scope and the statement (and, in a caller's
// transaction, the restore) as one batch: one round trip.
func (d *DB) queryPipelined(ctx context.Context, sql string, args []any) (pgx.Rows, error) {
	sender, ok := d.inner.(sqlbatch.Sender)
	if !ok {
		return nil, fmt.Errorf("schema %s: %T cannot send a batch", d.schema, d.inner)
	}
	if d.inTx {
		return sqlbatch.Around(ctx, sender, d.enter, sql, args, d.leave)
	}
	return sqlbatch.Around(ctx, sender, d.enter, sql, args)
}

// queryInCallersTx scopes the statement inside the caller's transaction
// and gives the transaction its search_path back after it.
func (d *DB) queryInCallersTx(ctx context.Context, sql string, args []any) (pgx.Rows, error) {
	if _, err := d.inner.Exec(ctx, d.enter.SQL, d.enter.Args...); err != nil {
		return nil, err
	}
	restore := func(stmtErr error) error {
		var pgErr *pgconn.PgError
		if errors.As(stmtErr, &pgErr) {
			return nil // the server refused it: the transaction is aborted, nothing to restore
		}
		// Success, or an error of this side (an argument that did not
		// encode, a value that did not scan): the transaction goes on.
		_, err := d.inner.Exec(ctx, d.leave.SQL, d.leave.Args...)
		if stmtErr != nil {
			return nil // the statement's own error is the one to report
		}
		return err
	}
	rows, err := d.inner.Query(ctx, sql, args...)
	if err != nil {
		_ = restore(err)
		return nil, err
	}
	return sqlbatch.OnEnd(rows, restore), nil
}

// queryInOwnTx runs the statement in a transaction of its own, committed
// when the rows are closed.
func (d *DB) queryInOwnTx(ctx context.Context, sql string, args []any) (pgx.Rows, error) {
	tx, err := d.beginInner(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, d.enter.SQL, d.enter.Args...); err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	return sqlbatch.OnEnd(rows, func(stmtErr error) error {
		if stmtErr != nil {
			return tx.Rollback(ctx)
		}
		return tx.Commit(ctx)
	}), nil
}

// row is QueryRow's answer: the statement runs when Scan is called.
type row struct {
	run func() (pgx.Rows, error)
}

func (r row) Scan(dest ...any) error {
	rows, err := r.run()
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

// scopedTx is a transaction begun on a DB: Hopper's statements on it run
// in the schema.
type scopedTx struct {
	pgx.Tx
	db *DB
}

func (t *scopedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.db.Exec(ctx, sql, args...)
}

func (t *scopedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.db.Query(ctx, sql, args...)
}

func (t *scopedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.db.QueryRow(ctx, sql, args...)
}

func (t *scopedTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	return t.db.CopyFrom(ctx, table, columns, src)
}

func (t *scopedTx) Begin(ctx context.Context) (pgx.Tx, error) { return t.db.Begin(ctx) }
