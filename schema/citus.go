package schema

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/golang-migrate/migrate/v4/database"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	hopperdb "github.com/hopperq/hopper/db"
)

// On Citus (the citus extension installed in the database, which
// openDriver asks on the migrator's own session), a migration is sent the
// way Citus takes it, and the migration files stay as they were released
// (their text is part of every upgrade):
//
//   - statement by statement, in one transaction: golang-migrate sends a
//     file as one multi-statement string, which Citus refuses when it
//     passes a DDL statement on to the schema's node ("cannot insert
//     multiple commands into a prepared statement");
//   - an ALTER TABLE with several subcommands as one ALTER TABLE per
//     subcommand: Citus refuses an ADD CONSTRAINT among others ("cannot
//     execute ADD CONSTRAINT command with other subcommands");
//   - with the transaction's settings of CitusMigrationSettings
//     (queries/inspect.sql): citus.enable_unsafe_triggers, without which
//     Citus refuses Hopper's triggers on its tables. They are safe in a
//     distributed schema, where every table a trigger touches is in the
//     same schema, and so on the same node;
//   - migration 24 with its state check added to the partitioned dead jobs
//     after the old table is attached, not before (citusReorder).
//
// Plain PostgreSQL runs each file as one string, as before.

// citusVersion is the citus extension's version in the database behind
// sqlDB, "" when it is not installed.
func citusVersion(ctx context.Context, sqlDB *sql.DB) (string, error) {
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return "", fmt.Errorf("migrate: %w", err)
	}
	defer conn.Close()
	var version string
	err = conn.Raw(func(driverConn any) error {
		var err error
		version, err = hopperdb.New(driverConn.(*stdlib.Conn).Conn()).CitusVersion(ctx)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("migrate: is the citus extension installed: %w", err)
	}
	return version, nil
}

// citusDriver is golang-migrate's driver with Run replaced: it sends a
// migration's statements one at a time, in one transaction, on a session
// of db (the driver's own holds the migrations' advisory lock meanwhile).
type citusDriver struct {
	database.Driver
	db      *sql.DB
	version string // the citus extension's
}

func (d *citusDriver) Run(migration io.Reader) error {
	text, err := io.ReadAll(migration)
	if err != nil {
		return err
	}
	stmts, err := citusStatements(string(text))
	if err != nil {
		return database.Error{OrigErr: err, Err: "migration failed: split into statements"}
	}
	// golang-migrate's Run takes no context; neither does its own.
	ctx := context.Background()
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return database.Error{OrigErr: err, Err: "migration failed: connect"}
	}
	defer conn.Close()
	return conn.Raw(func(driverConn any) error {
		tx, err := driverConn.(*stdlib.Conn).Conn().Begin(ctx)
		if err != nil {
			return database.Error{OrigErr: err, Err: "migration failed: begin"}
		}
		defer func() { _ = tx.Rollback(ctx) }() // a no-op once committed
		if err := hopperdb.New(tx).CitusMigrationSettings(ctx); err != nil {
			return database.Error{OrigErr: err, Err: "migration failed: Citus's settings"}
		}
		for _, stmt := range stmts {
			// No arguments: pgx sends it by the simple protocol, as
			// golang-migrate sends a whole file.
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return statementError(err, stmt)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return database.Error{OrigErr: err, Err: "migration failed: commit"}
		}
		return nil
	})
}

// statementError is golang-migrate's error for a failed statement, with
// PostgreSQL's error kept as OrigErr (lockRefused reads its code).
func statementError(err error, stmt string) error {
	msg := "migration failed"
	if pgErr, ok := err.(*pgconn.PgError); ok {
		msg += ": " + pgErr.Message
		if pgErr.Detail != "" {
			msg += ", " + pgErr.Detail
		}
	}
	return database.Error{OrigErr: err, Err: msg, Query: []byte(stmt)}
}

// citusStatements is a migration's text as the statements sent to Citus:
// each statement of the file, an ALTER TABLE with several subcommands as
// one per subcommand, reordered where citusReorder says.
func citusStatements(text string) ([]string, error) {
	split, err := splitStatements(text)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, st := range split {
		out = append(out, splitAlterTable(st)...)
	}
	if name, ok := fileNamed(text); ok {
		if reorder := citusReorder[name]; reorder != nil {
			return reorder(out)
		}
	}
	return out, nil
}

// fileNamed is the name of the embedded migration file whose text this
// is (golang-migrate hands Run the text alone).
func fileNamed(text string) (string, bool) {
	entries, err := fs.ReadDir(Files, ".")
	if err != nil {
		return "", false
	}
	for _, e := range entries {
		b, err := fs.ReadFile(Files, e.Name())
		if err == nil && bytes.Equal(b, []byte(text)) {
			return e.Name(), true
		}
	}
	return "", false
}

// citusReorder changes the order of a migration's statements on Citus,
// by file name.
var citusReorder = map[string]func([]string) ([]string, error){
	"000024_dead_partitions.up.sql": moveAfter(
		"ALTER TABLE hopper_dead_jobs ADD CONSTRAINT hopper_dead_jobs_state_check",
		"ALTER TABLE hopper_dead_jobs ATTACH PARTITION hopper_dead_jobs_default DEFAULT;"),
}

// moveAfter moves the statement that begins with move to just after the
// statement anchor; either missing is an error (the file is released and
// never changes, so that is a fault of this table).
func moveAfter(move, anchor string) func([]string) ([]string, error) {
	return func(stmts []string) ([]string, error) {
		from := -1
		for i, s := range stmts {
			if strings.HasPrefix(s, move) {
				from = i
			}
		}
		if from < 0 {
			return nil, fmt.Errorf("schema: Citus: no statement begins %q", move)
		}
		moved := stmts[from]
		rest := append(append([]string{}, stmts[:from]...), stmts[from+1:]...)
		for i, s := range rest {
			if s == anchor {
				return append(append(append([]string{}, rest[:i+1]...), moved), rest[i+1:]...), nil
			}
		}
		return nil, fmt.Errorf("schema: Citus: no statement %q", anchor)
	}
}
