package schema

import (
	"context"
	"fmt"
	"strconv"

	migratedb "github.com/golang-migrate/migrate/v4/database"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	hopperdb "github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/grants"
	"github.com/hopperq/hopper/internal/migrated"
)

// Check reports whether the schema behind pool (the Name option's, else
// the first of the search_path) is migrated to the version this build
// needs, changing nothing: the call for an application that does not
// migrate at start, whose role has no DDL rights (the least-privilege
// grants), while a deploy step migrates with the owner role. It returns
// nil when the schema is at Latest or newer (migrations only add);
// jobs.ErrNotMigrated, naming the migrations missing and the command to
// run, when it is older or has no Hopper tables; ErrDirty when a migration
// failed half-way (a migration still running is waited for, not taken
// for a failed one); and ErrNoAccess, naming the GRANT to run, when the role
// may not read hopper_schema_migrations. With the Grants option, it then
// checks that the role has every privilege hopper grants gives that kind
// of role, and returns ErrMissingGrants, naming the statements to run,
// when it lacks one.
func Check(ctx context.Context, pool *pgxpool.Pool, opts ...Option) error {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	access, err := hopperdb.New(pool).MigrationsTableAccess(ctx, o.schema)
	if err != nil {
		return fmt.Errorf("schema check: %w", err)
	}
	name := access.SchemaName
	if name == "" {
		return errorf(ErrNoSchema, "hopper: schema check: no schema of the search_path exists, so no Hopper tables either")
	}
	run := migrated.Run(o.schema)
	switch {
	case !access.TableExists:
		return migrated.Errorf(run, "schema %s has no Hopper tables (version 0)", name)
	case !access.Readable:
		return errorf(ErrNoAccess, "hopper: schema check: role %s may not read %s, so the schema version cannot be known: "+
			"GRANT SELECT ON %s TO %s (the least-privilege grants list it)",
			access.RoleName, qualified(name), qualified(name), pgx.Identifier{access.RoleName}.Sanitize())
	}
	version, dirty, _, err := migrated.Applied(ctx, pool, name)
	if err == nil && dirty {
		// A migration running now (the deploy's migration step, or a
		// replica's schema.Up) records its version dirty until it ends:
		// only a dirty version read under the migrations' lock is a
		// failed one.
		version, dirty, err = appliedUnderLock(ctx, pool, access.DatabaseName, name)
	}
	if err != nil {
		return fmt.Errorf("schema check: %w", err)
	}
	if dirty {
		return errorf(ErrDirty, "hopper: schema check: the schema migrations table of %s is dirty: migration %d failed half-way; repair the schema by hand, then force the version it is really at", name, version)
	}
	if err := migrated.Check(ctx, pool, name, run); err != nil || o.role == "" {
		return err
	}
	// Everything the kind of role may need, whatever a process's
	// configuration: Check does not know it (a worker checks its own).
	if err := grants.Check(ctx, hopperdb.New(pool), name, grants.Role(o.role), grants.FlowControl, grants.ReadVersion); err != nil {
		return fmt.Errorf("schema check: %w", err)
	}
	return nil
}

// Role is a kind of role Hopper's guides give grants to, and hopper grants
// --as names: what the Grants option checks.
type Role string

// The kinds of role.
const (
	// RoleProducer enqueues, through Go or the SQL API (docs/sql-api.md,
	// Grants).
	RoleProducer Role = Role(grants.Producer)
	// RoleWorker runs workers, the operations and the dashboard, and
	// enqueues (docs/operating.md, Least privilege), flow control's table
	// included.
	RoleWorker Role = Role(grants.Worker)
	// RoleReader reads Hopper's tables and views, and changes nothing.
	RoleReader Role = Role(grants.Reader)
)

// Grants makes Check also check that the session's role has every
// privilege that hopper grants gives a role of that kind on the schema
// (ErrMissingGrants when it lacks one). Up and NewMigrator ignore it.
func Grants(role Role) Option {
	return func(o *options) { o.role = role }
}

// qualified is the migrations table of schema name, quoted.
func qualified(name string) string {
	return pgx.Identifier{name, MigrationsTable}.Sanitize()
}

// appliedUnderLock reads the version of schema name's migrations while
// holding golang-migrate's lock on them, so it waits for a migration in
// progress to end (or ctx to end).
func appliedUnderLock(ctx context.Context, pool *pgxpool.Pool, database, name string) (version int64, dirty bool, err error) {
	lockID, err := migrationsLockID(database, name)
	if err != nil {
		return 0, false, err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	runID, err := runLockID(database, name)
	if err != nil {
		return 0, false, err
	}
	// Hopper's run lock first, as a migrator takes them: a migrator clears
	// a rolled-back migration's dirty mark before it gives that one back.
	if err := hopperdb.New(tx).WaitForMigrations(ctx, runID); err != nil {
		return 0, false, fmt.Errorf("wait for the migrations' run lock: %w", err)
	}
	if err := hopperdb.New(tx).WaitForMigrations(ctx, lockID); err != nil {
		return 0, false, fmt.Errorf("wait for the migrations' lock: %w", err)
	}
	version, dirty, _, err = migrated.Applied(ctx, tx, name)
	return version, dirty, err
}

// migrationsLockID is the advisory lock golang-migrate's PostgreSQL
// driver takes around a run on schema name's migrations table (its own
// function, so the two can never disagree).
func migrationsLockID(database, name string) (int64, error) {
	id, err := migratedb.GenerateAdvisoryLockId(database, name, MigrationsTable)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(id, 10, 64)
}

// runLockID is Hopper's own advisory lock around a migrator's whole run on
// schema name (LockMigrationRun), numbered as golang-migrate numbers its
// lock, with one name more.
func runLockID(database, name string) (int64, error) {
	id, err := migratedb.GenerateAdvisoryLockId(database, name, MigrationsTable, "run")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(id, 10, 64)
}
