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
)

// On Citus (the citus extension installed in the database, found by
// NewMigrator), a migration is sent the way Citus takes it, and the
// migration files stay as they were released (their text is part of every
// upgrade):
//
//   - statement by statement, in one transaction: golang-migrate sends a
//     file as one multi-statement string, which Citus refuses when it
//     passes a DDL statement on to the schema's node ("cannot insert
//     multiple commands into a prepared statement");
//   - an ALTER TABLE with several subcommands as one ALTER TABLE per
//     subcommand: Citus refuses an ADD CONSTRAINT among others ("cannot
//     execute ADD CONSTRAINT command with other subcommands");
//   - with citusSettings on the migrator's sessions;
//   - migration 24 with its state check added to the partitioned dead jobs
//     after the old table is attached, not before (citusReorder).
//
// Plain PostgreSQL runs each file as one string, as before.

// citusSettings are the settings of the migrator's sessions on Citus.
// Hopper's triggers (the enqueue's wake-up, sequences, workflows) are
// refused on Citus tables without citus.enable_unsafe_triggers: they are
// safe in a distributed schema, where every table a trigger touches is in
// the same schema, and so on the same node.
var citusSettings = map[string]string{
	"citus.enable_unsafe_triggers": "on",
}

// citusDriver is golang-migrate's driver with Run replaced: it sends a
// migration's statements one at a time, in one transaction, on a session
// of db (the driver's own holds the migrations' advisory lock meanwhile).
type citusDriver struct {
	database.Driver
	db *sql.DB
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
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return database.Error{OrigErr: err, Err: "migration failed: begin"}
	}
	for _, stmt := range stmts {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			_ = tx.Rollback()
			return statementError(err, stmt)
		}
	}
	if err := tx.Commit(); err != nil {
		return database.Error{OrigErr: err, Err: "migration failed: commit"}
	}
	return nil
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
