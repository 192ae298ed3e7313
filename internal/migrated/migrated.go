// Package migrated says, at every entry point, when Hopper's schema is
// missing or older than this build: which object is missing, which schema
// version this build needs, and what to run. Its errors wrap
// ErrNotMigrated, which package jobs exports as jobs.ErrNotMigrated.
//
// It knows the schema's versions without importing package schema (which
// pulls in golang-migrate, and which package jobs must not import): Latest
// and the migrations' names are constants here, kept equal to schema's
// files by a test of package schema.
package migrated

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/schemascope"
)

// ErrNotMigrated is jobs.ErrNotMigrated: Hopper's tables are missing, or
// the schema is older than this build needs.
var ErrNotMigrated = errors.New("hopper: schema not migrated")

// Latest is the schema version this build of Hopper needs: schema.Latest().
const Latest = 35

// names are the migrations of this build, by version: names[v-1] is the
// name of migration v (its file is 00000v_<name>.up.sql).
var names = [Latest]string{
	"create_hopper", "claim_cursor", "operate", "schedules", "meta",
	"flow_control", "flow_record", "rate_starts", "key_order", "workers",
	"worker_release", "sql_api", "sequences", "workflows", "workflow_edges", "sql_api_inputs",
	"unique_periods", "durable", "history_drop_after", "history_drop_after_valid",
	"history_partitions", "dead_partition_at", "dead_partition_at_valid", "dead_partitions",
	"workflow_lookups", "sequence_placement", "definer_grants", "meta_room", "meta_room_valid",
	"migration_builds", "key_limits", "replica_identity", "citus_planning", "shard_wakes",
	"citus_functions",
}

// Names returns the migrations' names, oldest first: the name of version
// v is at v-1.
func Names() []string { return names[:] }

// MigrationsTable is schema.MigrationsTable, where the applied version is
// recorded.
const MigrationsTable = "hopper_schema_migrations"

// Migration names version v for messages: "7 (flow_record)".
func Migration(v int) string {
	if v < 1 || v > Latest {
		return strconv.Itoa(v)
	}
	return fmt.Sprintf("%d (%s)", v, names[v-1])
}

// notMigrated is an ErrNotMigrated with what is missing and what to run;
// cause, when set, is the database's error it explains.
type notMigrated struct {
	msg   string
	cause error
}

func (e *notMigrated) Error() string { return e.msg }

func (e *notMigrated) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrNotMigrated}
	}
	return []error{ErrNotMigrated, e.cause}
}

// Errorf returns ErrNotMigrated saying what is missing (what), the
// version this build needs, and run, the command that migrates (see Run):
//
//	hopper: schema not migrated: <what>: this build of Hopper needs schema version N; run <run>
func Errorf(run, format string, args ...any) error {
	return &notMigrated{msg: message(fmt.Sprintf(format, args...), run)}
}

func message(what, run string) string {
	return fmt.Sprintf("%s: %s: this build of Hopper needs schema version %d; run %s", ErrNotMigrated, what, Latest, run)
}

// Run is what to run to migrate schemaName ("": the one the search_path
// leads to), as a Go error says it.
func Run(schemaName string) string {
	if schemaName == "" {
		return "`hopper migrate up` (or schema.Up)"
	}
	return "`hopper migrate up --schema " + shellWord(schemaName) + "` (or schema.Up with schema.Name)"
}

var plainWord = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

func shellWord(s string) string {
	if plainWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// SchemaOf is the schema a handle is scoped to with jobs.InSchema, or ""
// for one that follows its search_path.
func SchemaOf(on db.DBTX) string {
	if s, ok := on.(*schemascope.DB); ok {
		return s.Schema()
	}
	return ""
}

// Explain returns err, the error of one of Hopper's own statements run on
// the handle on, as ErrNotMigrated when the database said that a table,
// column, function or type it names does not exist (SQLSTATE 42P01,
// 42703, 42883, 42704): in Hopper's statements, that means a schema older
// than this build; as ErrIsolation when the schema refused a write to a
// sequence's or a workflow's job outside READ COMMITTED; and as
// ErrReadOnly when the server refused a write as read-only. The database's
// error stays matchable with errors.As. Any other error, and nil, is
// returned as it is.
//
// Only Hopper's statements: a user's (an enqueue hook's, say) missing
// table is the user's own.
func Explain(err error, on db.DBTX) error {
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) || errors.Is(err, ErrNotMigrated) {
		return err
	}
	switch pgErr.Code {
	case pgerrcode.UndefinedTable, pgerrcode.UndefinedColumn, pgerrcode.UndefinedFunction, pgerrcode.UndefinedObject:
		return &notMigrated{msg: message(pgErr.Message, Run(SchemaOf(on))), cause: err}
	}
	if explained := explainIsolation(err, pgErr); explained != nil {
		return explained
	}
	return ExplainReadOnly(err)
}

// DB runs statements on a handle, refusing them on a schema older than
// this build (Ensure), and explains their errors (Explain). It has the
// methods of sqlc's DBTX: db.New(Wrap(tx)) is Hopper's queries on tx,
// checked and explained.
type DB struct {
	inner db.DBTX
}

// Wrap returns inner with its statements checked and explained.
func Wrap(inner db.DBTX) *DB { return &DB{inner: inner} }

func (d *DB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := Ensure(ctx, d.inner); err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := d.inner.Exec(ctx, sql, args...)
	return tag, Explain(err, d.inner)
}

func (d *DB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := Ensure(ctx, d.inner); err != nil {
		return nil, err
	}
	rows, err := d.inner.Query(ctx, sql, args...)
	if err != nil {
		return rows, Explain(err, d.inner)
	}
	return &explainedRows{Rows: rows, on: d.inner}, nil
}

func (d *DB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := Ensure(ctx, d.inner); err != nil {
		return refusedRow{err: err}
	}
	return explainedRow{row: d.inner.QueryRow(ctx, sql, args...), on: d.inner}
}

func (d *DB) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := Ensure(ctx, d.inner); err != nil {
		return 0, err
	}
	n, err := d.inner.CopyFrom(ctx, table, columns, src)
	return n, Explain(err, d.inner)
}

// refusedRow is a statement Ensure refused to send.
type refusedRow struct{ err error }

func (r refusedRow) Scan(...any) error { return r.err }

// explainedRows reports an error the rows end with explained: in pgx's
// exec modes a statement's error arrives with its rows, not from Query.
type explainedRows struct {
	pgx.Rows
	on db.DBTX
}

func (r *explainedRows) Err() error { return Explain(r.Rows.Err(), r.on) }

type explainedRow struct {
	row pgx.Row
	on  db.DBTX
}

func (r explainedRow) Scan(dest ...any) error { return Explain(r.row.Scan(dest...), r.on) }

// Applied reads the version recorded in schemaName's migrations table
// and whether it is dirty (a migration failed half-way). ok is false when
// there is no such table, or the role may not read it (the least-privilege
// grants leave it out): then only the statements' errors can tell
// (Explain).
func Applied(ctx context.Context, q db.DBTX, schemaName string) (version int64, dirty, ok bool, err error) {
	table := pgx.Identifier{schemaName, MigrationsTable}.Sanitize()
	err = q.QueryRow(ctx, "SELECT COALESCE(has_table_privilege(to_regclass($1::text), 'SELECT'), false)", table).Scan(&ok)
	if err != nil || !ok {
		return 0, false, false, err
	}
	err = q.QueryRow(ctx, "SELECT version, dirty FROM "+table+" LIMIT 1").Scan(&version, &dirty)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, true, nil // golang-migrate's record of no migration applied
	}
	if err != nil {
		return 0, false, false, err
	}
	return version, dirty, true, nil
}

// Check returns ErrNotMigrated, naming the migrations missing and saying
// to run run (see Run), when schemaName, which holds hopper_jobs, records
// a version older than Latest. A newer version passes (migrations only
// add), and so does a schema whose version cannot be read (see Applied).
func Check(ctx context.Context, q db.DBTX, schemaName, run string) error {
	version, dirty, ok, err := Applied(ctx, q, schemaName)
	if err != nil {
		return fmt.Errorf("read the schema version of %s: %w", schemaName, err)
	}
	if !ok || version >= Latest {
		return nil
	}
	state := ""
	if dirty {
		state = ", left dirty by a migration that failed half-way,"
	}
	return Errorf(run, "schema %s is at version %d%s without %s", schemaName, version, state, missing(int(version)))
}

// missing names the migrations after version: "migration 10 (workers)",
// "migrations 8 (rate_starts), 9 (key_order) and 10 (workers)",
// "migrations 2 (claim_cursor) to 10 (workers)".
func missing(version int) string {
	from := max(version+1, 1)
	switch n := Latest - from + 1; {
	case n == 1:
		return "migration " + Migration(Latest)
	case n > 3:
		return "migrations " + Migration(from) + " to " + Migration(Latest)
	default:
		var vs []string
		for v := from; v < Latest; v++ {
			vs = append(vs, Migration(v))
		}
		return "migrations " + strings.Join(vs, ", ") + " and " + Migration(Latest)
	}
}
