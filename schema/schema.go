package schema

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	hopperdb "github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/buildinfo"
)

// Files holds the migration files of this version of Hopper, as golang-migrate
// reads them (NNNNNN_name.up.sql / .down.sql). sqlc reads the same files.
//
//go:embed *.sql
var Files embed.FS

// MigrationsTable is where Hopper records its schema version. It is not
// golang-migrate's default (schema_migrations), so an application that uses
// golang-migrate for its own tables keeps its own state.
const MigrationsTable = "hopper_schema_migrations"

// migrateError gives one of the errors above a message of its own.
type migrateError struct {
	msg      string
	sentinel error
}

func (e *migrateError) Error() string { return e.msg }
func (e *migrateError) Unwrap() error { return e.sentinel }

func errorf(sentinel error, format string, args ...any) error {
	return &migrateError{msg: fmt.Sprintf(format, args...), sentinel: sentinel}
}

// Option configures a Migrator.
type Option func(*options)

type options struct {
	schema       string
	logf         func(format string, args ...any)
	lockTimeout  time.Duration
	lockAttempts int
	lockSet      bool   // LockTimeout was given (0 then means the server's setting)
	role         Role   // Check's Grants: "" checks none
	citus        string // the citus extension's version, "" without it (see citus.go)
}

// The lock waits of a migration, unless LockTimeout says otherwise.
const (
	DefaultLockTimeout  = 2 * time.Second
	DefaultLockAttempts = 10
)

// LockTimeout bounds how long each statement of a migration waits for a
// lock (PostgreSQL's lock_timeout, set on the migrator's own sessions), so
// that a migration queued behind a long transaction never holds up the
// queue's traffic behind its own lock request for longer. A migration
// whose statement waited that long rolls back whole and runs again after
// a pause, up to attempts times in all; then the run fails with an error
// that matches ErrLockTimeout. A migration that PostgreSQL ends to break
// a deadlock (deadlock_detected) runs again the same way. The defaults are
// DefaultLockTimeout and DefaultLockAttempts; a timeout of 0 leaves the
// server's lock_timeout (by default none: wait for ever).
func LockTimeout(timeout time.Duration, attempts int) Option {
	return func(o *options) { o.lockTimeout, o.lockAttempts, o.lockSet = timeout, max(attempts, 1), true }
}

// Name installs Hopper's tables in the named schema, which must
// already exist (CREATE SCHEMA is the application's call, not ours). Without it they go to the first schema of the
// connection's search_path. Workers and producers then reach the tables by
// putting the same schema first in their search_path.
func Name(name string) Option {
	return func(o *options) { o.schema = name }
}

// Logf receives one line per migration applied (and golang-migrate's
// other progress messages).
func Logf(logf func(format string, args ...any)) Option {
	return func(o *options) { o.logf = logf }
}

// Migrator applies Hopper's migrations to one database (and schema).
type Migrator struct {
	m        *migrate.Migrate
	driver   database.Driver // m's; its lock is the one m.Up takes
	schema   string
	connCfg  pgx.ConnConfig // the sessions' settings, lock_timeout and search_path included
	attempts int            // of a run whose lock wait was refused (lock_timeout, deadlock)
	logf     func(format string, args ...any)
}

// NewMigrator prepares migrations over connections of its own, made from
// pool's configuration. Close it when done.
func NewMigrator(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Migrator, error) {
	o := options{lockTimeout: DefaultLockTimeout, lockAttempts: DefaultLockAttempts}
	for _, opt := range opts {
		opt(&o)
	}
	if o.lockTimeout < 0 {
		return nil, fmt.Errorf("migrate: negative lock timeout %v", o.lockTimeout)
	}
	connCfg := pool.Config().ConnConfig
	if o.lockTimeout > 0 {
		// Every lock wait of the migrator's sessions: the migrations'
		// statements, and golang-migrate's advisory lock too (a wait for
		// another migrator is retried as any other).
		connCfg.RuntimeParams["lock_timeout"] = strconv.FormatInt(max(o.lockTimeout.Milliseconds(), 1), 10)
	}
	if o.schema != "" {
		exists, err := hopperdb.New(pool).SchemaExists(ctx, o.schema)
		if err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
		if !exists {
			return nil, errorf(ErrNoSchema, "hopper: migrate: schema %s does not exist: create it with CREATE SCHEMA %s",
				pgx.Identifier{o.schema}.Sanitize(), createName(o.schema))
		}
		connCfg.RuntimeParams["search_path"] = pgx.Identifier{o.schema}.Sanitize()
	}
	driver, schemaName, err := openDriverRetrying(ctx, *connCfg, o)
	if err != nil {
		return nil, throughPooler(err)
	}
	if cd, ok := driver.(*citusDriver); ok && o.logf != nil {
		o.logf("migrate: Citus %s: each migration is sent statement by statement, in one transaction", cd.version)
	}
	src, err := iofs.New(Files, ".")
	if err != nil {
		_ = driver.Close()
		return nil, fmt.Errorf("migrate: read embedded files: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		_ = driver.Close()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	if o.logf != nil {
		m.Log = logger(o.logf)
	}
	return &Migrator{m: m, driver: driver, schema: schemaName, connCfg: *connCfg, attempts: o.lockAttempts, logf: o.logf}, nil
}

// openDriverRetrying opens golang-migrate's driver, again when its first
// statement waited lock_timeout or deadlocked: opening takes the
// migrations' advisory lock (to create the version table if missing),
// which another migrator holds for as long as its migrations run.
func openDriverRetrying(ctx context.Context, connCfg pgx.ConnConfig, o options) (database.Driver, string, error) {
	for attempt := 1; ; attempt++ {
		driver, schemaName, err := openDriver(ctx, connCfg, o)
		timedOut := lockRefused(err)
		if timedOut == nil {
			return driver, schemaName, err
		}
		if attempt >= o.lockAttempts {
			return nil, "", errorf(ErrLockTimeout, "hopper: migrate: open: %d attempts each waited lock_timeout for the migrations' lock: "+
				"another migrator has held it that long, or a session holds it (find it in pg_locks), or raise the lock timeout (last: %s)", attempt, timedOut.Message)
		}
		pause := min(time.Duration(attempt)*500*time.Millisecond, 5*time.Second)
		if o.logf != nil {
			o.logf("migrate: opening %s (the migrations' lock); attempt %d of %d in %v", lockWait(timedOut), attempt+1, o.lockAttempts, pause)
		}
		select {
		case <-ctx.Done():
			return nil, "", fmt.Errorf("migrate: open: %w (after a lock timeout: %s)", ctx.Err(), timedOut.Message)
		case <-time.After(pause):
		}
	}
}

// openDriver opens golang-migrate's driver over a database/sql handle of
// its own, and returns the schema it migrates.
func openDriver(ctx context.Context, connCfg pgx.ConnConfig, o options) (database.Driver, string, error) {
	// A database/sql handle of its own (golang-migrate speaks database/sql),
	// so migrating never changes the sessions of the caller's pool.
	var mu sync.Mutex
	var sessions []*pgx.Conn
	sqlDB := stdlib.OpenDB(connCfg, stdlib.OptionAfterConnect(func(_ context.Context, c *pgx.Conn) error {
		mu.Lock()
		defer mu.Unlock()
		sessions = append(sessions, c)
		return nil
	}))
	sqlDB.SetMaxOpenConns(2)
	// golang-migrate reads current_schema() into a string, and fails with a
	// scan error when it is NULL: no schema of the search_path exists.
	schemaName, err := currentSchema(ctx, sqlDB)
	if err != nil {
		_ = sqlDB.Close()
		return nil, "", err
	}
	// On Citus, migrations are sent the way it takes them (citus.go).
	if o.citus == "" {
		if o.citus, err = citusVersion(ctx, sqlDB); err != nil {
			_ = sqlDB.Close()
			return nil, "", err
		}
	}
	driver, err := migratepgx.WithInstance(sqlDB, &migratepgx.Config{
		MigrationsTable: MigrationsTable,
		SchemaName:      o.schema,
	})
	if err != nil {
		_ = sqlDB.Close()
		// WithInstance keeps the session it took when a statement of its
		// fails (its wait for the migrations' lock, say), out of the
		// handle's reach: closed here, or it would stay open until the
		// process ends.
		mu.Lock()
		defer mu.Unlock()
		for _, c := range sessions {
			_ = c.Close(context.WithoutCancel(ctx))
		}
		return nil, "", fmt.Errorf("migrate: open driver: %w", err)
	}
	if o.citus != "" {
		driver = &citusDriver{Driver: driver, db: sqlDB, version: o.citus}
	}
	return driver, schemaName, nil
}

// currentSchema returns the schema migrations go to, or ErrNoSchema saying
// which schema to create.
func currentSchema(ctx context.Context, sqlDB *sql.DB) (string, error) {
	var current sql.NullString
	var searchPath, user string
	err := sqlDB.QueryRowContext(ctx, "SELECT current_schema(), current_setting('search_path'), current_user").Scan(&current, &searchPath, &user)
	if err != nil {
		return "", fmt.Errorf("migrate: %w", err)
	}
	if current.Valid {
		return current.String, nil
	}
	var names []string
	first := ""
	for _, n := range strings.Split(searchPath, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		names = append(names, n)
		if uq, ok := strings.CutPrefix(n, `"`); ok {
			n = strings.ReplaceAll(strings.TrimSuffix(uq, `"`), `""`, `"`)
		}
		if first == "" && n != "$user" {
			first = n
		}
	}
	switch {
	case len(names) == 0:
		return "", errorf(ErrNoSchema, "hopper: migrate: search_path is empty, so there is no schema to install into: set search_path to an existing schema")
	case first == "":
		first = user
	}
	if len(names) == 1 {
		name := names[0]
		if name == "$user" {
			name += " (" + user + ")"
		}
		return "", errorf(ErrNoSchema, "hopper: migrate: the schema named in search_path, %s, does not exist: create it with CREATE SCHEMA %s",
			name, createName(first))
	}
	return "", errorf(ErrNoSchema, "hopper: migrate: none of the schemas named in search_path (%s) exists: create one, e.g. CREATE SCHEMA %s",
		strings.Join(names, ", "), createName(first))
}

// createName quotes name for CREATE SCHEMA only when it needs quotes.
func createName(name string) string {
	if plainName.MatchString(name) {
		return name
	}
	return pgx.Identifier{name}.Sanitize()
}

var plainName = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// Schema is the schema the migrator works in: the one the Name option named, else
// the first existing schema of the search_path.
func (mg *Migrator) Schema() string { return mg.schema }

// Close releases the migrator's connections.
func (mg *Migrator) Close() error {
	srcErr, dbErr := mg.m.Close()
	return errors.Join(srcErr, dbErr)
}

// Up applies every migration not applied yet. Being up to date is not an
// error.
func (mg *Migrator) Up(ctx context.Context) error {
	return mg.run(ctx, "up", mg.m.Up)
}

// Down undoes the last n applied migrations, or all of them when n <= 0.
// Asked for more than are applied, it undoes nothing and returns
// ErrDownTooFar.
func (mg *Migrator) Down(ctx context.Context, n int) error {
	if _, err := mg.PlanDown(n); err != nil {
		return err
	}
	if n <= 0 {
		return mg.run(ctx, "down", mg.m.Down)
	}
	return mg.run(ctx, "down", func() error { return mg.m.Steps(-n) })
}

// PlanDown returns the version Down(n) would leave the schema at, or the
// error it would return (ErrDirty, ErrUnknownVersion, ErrDownTooFar)
// without undoing anything.
func (mg *Migrator) PlanDown(n int) (uint, error) {
	version, err := mg.checkVersionLocked("down")
	if err != nil || n <= 0 {
		return 0, err
	}
	if version == 0 {
		return 0, errorf(ErrDownTooFar, "hopper: migrate down: nothing to undo: the schema is at version 0")
	}
	applied := Versions()
	for i, v := range applied {
		if v == version {
			applied = applied[:i+1]
			break
		}
	}
	if n > len(applied) {
		return 0, errorf(ErrDownTooFar, "hopper: migrate down: cannot go down %d steps from version %d: %s applied",
			n, version, plural(len(applied), "migration is", "migrations are"))
	}
	if n == len(applied) {
		return 0, nil
	}
	return applied[len(applied)-n-1], nil
}

// checkVersionLocked is checkVersion under the migrations' lock (the
// advisory lock golang-migrate takes around each run): another process
// migrating the same schema at this moment (a Deployment's replicas all
// starting at once) has its migration recorded dirty until it ends, and
// read without the lock that healthy schema would look half-migrated. The
// lock waits for that run to end, and is given back before step takes it
// again.
func (mg *Migrator) checkVersionLocked(what string) (uint, error) {
	if err := mg.driver.Lock(); err != nil {
		return 0, fmt.Errorf("migrate %s: take the migrations' lock: %w", what, err)
	}
	version, err := mg.checkVersion(what)
	if unlockErr := mg.driver.Unlock(); unlockErr != nil && err == nil {
		err = fmt.Errorf("migrate %s: give back the migrations' lock: %w", what, unlockErr)
	}
	return version, err
}

// checkVersion returns the applied version, or an error when the migrations
// table is dirty or records a version this build does not carry.
func (mg *Migrator) checkVersion(what string) (uint, error) {
	version, dirty, err := mg.Version()
	if err != nil {
		return 0, err
	}
	if dirty && version == 0 {
		return 0, errorf(ErrDirty, "hopper: migrate %s: the schema migrations table is dirty: a migration down from the first version failed half-way; repair the schema by hand, then force the version it is really at", what)
	}
	if dirty {
		return 0, errorf(ErrDirty, "hopper: migrate %s: the schema migrations table is dirty: migration %d failed half-way; repair the schema by hand, then force the version it is really at", what, version)
	}
	if version != 0 && !known(version) {
		return 0, errorf(ErrUnknownVersion, "hopper: migrate %s: the schema is at version %d, which this build of Hopper does not carry (its latest is %d): migrate with the Hopper that applied it", what, version, Latest())
	}
	return version, nil
}

func known(version uint) bool {
	for _, v := range Versions() {
		if v == version {
			return true
		}
	}
	return false
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// Version reports the applied version (0 when none) and whether the last
// migration failed half-way (dirty).
func (mg *Migrator) Version() (version uint, dirty bool, err error) {
	// The driver's own answer: golang-migrate's Migrate.Version reports
	// "no version" clean even when that mark is dirty (a down from the
	// first migration that failed).
	v, dirty, err := mg.driver.Version()
	if err != nil {
		return 0, false, fmt.Errorf("migrate: version: %w", err)
	}
	return uint(max(v, 0)), dirty, nil
}

// Force records version as applied and clears the dirty flag without
// running anything: the way out after repairing a failed migration by hand.
// version is one of Versions, or 0 (or -1) for no migration applied; any
// other is ErrUnknownVersion.
func (mg *Migrator) Force(version int) error {
	if version < -1 || (version > 0 && !known(uint(version))) {
		vs := []string{"0 (none applied)"}
		for _, v := range Versions() {
			vs = append(vs, strconv.FormatUint(uint64(v), 10))
		}
		return errorf(ErrUnknownVersion, "hopper: migrate force: %d is not a version of Hopper's schema: this build knows %s and %s",
			version, strings.Join(vs[:len(vs)-1], ", "), vs[len(vs)-1])
	}
	if version == 0 {
		version = -1 // golang-migrate's NilVersion: no migration applied
	}
	if err := mg.m.Force(version); err != nil {
		return fmt.Errorf("migrate: force %d: %w", version, err)
	}
	return nil
}

// run runs step (what: up or down) and runs it again when a statement
// waited lock_timeout for a lock, or was chosen to end a deadlock: either
// way the migration rolled back whole (each file runs in one transaction),
// and golang-migrate's dirty mark is set back to the version the schema is
// really at. A deadlock needs a transaction that holds a lock the
// migration wants while it waits for one the migration holds; the
// migration running again after a pause finds it ended or still there
// (then it waits lock_timeout, as for any lock).
func (mg *Migrator) run(ctx context.Context, what string, step func() error) error {
	for attempt := 1; ; attempt++ {
		err := mg.runOnce(ctx, what, step)
		refused := lockRefused(err)
		if refused == nil {
			return err
		}
		if attempt >= mg.attempts {
			return errorf(ErrLockTimeout, "hopper: migrate %s: %d attempts each waited for a lock (lock_timeout, or a deadlock) and rolled back: "+
				"a long transaction holds a lock the migration needs (find it in pg_stat_activity), or raise the lock timeout (last: %s)", what, attempt, refused.Message)
		}
		pause := min(time.Duration(attempt)*500*time.Millisecond, 5*time.Second)
		if mg.logf != nil {
			mg.logf("migrate %s: a statement %s; rolled back, attempt %d of %d in %v", what, lockWait(refused), attempt+1, mg.attempts, pause)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("migrate %s: %w (after a lock wait: %s)", what, ctx.Err(), refused.Message)
		case <-time.After(pause):
		}
	}
}

// lockRefused returns PostgreSQL's error in err when a statement, or the
// advisory lock, waited for a lock and was refused: it waited lock_timeout
// (lock_not_available), or it was chosen to end a deadlock
// (deadlock_detected). Either rolls the transaction back whole, so running
// it again is safe; nil for any other error.
func lockRefused(err error) *pgconn.PgError {
	var pgErr *pgconn.PgError
	var dbErr database.Error
	var dbErrPtr *database.Error
	switch { // golang-migrate's database.Error does not unwrap
	case errors.As(err, &dbErr):
		err = dbErr.OrigErr
	case errors.As(err, &dbErrPtr):
		err = dbErrPtr.OrigErr
	}
	if errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.LockNotAvailable || pgErr.Code == pgerrcode.DeadlockDetected) {
		return pgErr
	}
	return nil
}

// lockWait says, for a log line, how a lock wait ended.
func lockWait(refused *pgconn.PgError) string {
	if refused.Code == pgerrcode.DeadlockDetected {
		return "deadlocked with another transaction waiting for a lock"
	}
	return "waited lock_timeout for a lock"
}

// waitedForMigrationsLock reports whether err is the failure to take
// Hopper's run lock or golang-migrate's advisory lock (it waited
// lock_timeout): such a run ran nothing.
func waitedForMigrationsLock(err error) bool {
	var dbErr database.Error
	var dbErrPtr *database.Error
	var runErr *runLockError
	switch {
	case errors.As(err, &runErr):
		return true
	case errors.As(err, &dbErr):
		return dbErr.Err == "try lock failed"
	case errors.As(err, &dbErrPtr):
		return dbErrPtr.Err == "try lock failed"
	}
	return false
}

// undoRolledBack clears the dirty mark a migration that rolled back on a
// lock wait left: up, the schema is still at the version before the one
// marked; down, at the one after it (golang-migrate marks the version a
// step goes to). It reads and writes the mark under the migrations' lock,
// so that a mark another run has set while it migrates is never taken for
// this one's; when that lock is not granted within lock_timeout, another
// run is migrating and the mark is left to the next attempt.
func (mg *Migrator) undoRolledBack(what string) error {
	if err := mg.driver.Lock(); err != nil {
		if lockRefused(err) != nil {
			return nil
		}
		return fmt.Errorf("migrate %s: take the migrations' lock: %w", what, err)
	}
	err := mg.undoRolledBackLocked(what)
	if unlockErr := mg.driver.Unlock(); unlockErr != nil && err == nil {
		err = fmt.Errorf("migrate %s: give back the migrations' lock: %w", what, unlockErr)
	}
	return err
}

func (mg *Migrator) undoRolledBackLocked(what string) error {
	v, dirty, err := mg.driver.Version()
	if err != nil || !dirty || (v < 0 && what != "down") {
		return err
	}
	// Down from the first migration marks golang-migrate's "no version"
	// (-1) dirty: the schema is still at the first version.
	version := uint(max(v, 0))
	at := int(version)
	vs := Versions()
	i := slices.Index(vs, version)
	switch {
	case what == "up" && i > 0:
		at = int(vs[i-1])
	case what == "up":
		at = 0
	case what == "down" && v < 0:
		at = int(vs[0])
	case what == "down" && i >= 0 && i+1 < len(vs):
		at = int(vs[i+1])
	}
	if at == 0 {
		at = database.NilVersion
	}
	if err := mg.driver.SetVersion(at, false); err != nil {
		return fmt.Errorf("migrate %s: clear the dirty mark of the migration that rolled back: %w", what, err)
	}
	return nil
}

// runOnce runs step once under Hopper's run lock (see lockRun), clears
// the dirty mark of a migration that rolled back on a lock wait before
// giving that lock back, and records which build applied the migrations
// the run applied (recordBuilds).
func (mg *Migrator) runOnce(ctx context.Context, what string, step func() error) (err error) {
	conn, err := mg.lockRun(ctx, what)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	before, err := mg.stepChecked(ctx, what, step)
	if lockRefused(err) != nil && !waitedForMigrationsLock(err) {
		if uerr := mg.undoRolledBack(what); uerr != nil {
			return errors.Join(err, uerr)
		}
	}
	if before < 0 {
		return err // the version check failed: the run applied nothing
	}
	// Recorded even when ctx ended during the run: the migrations it
	// applied stay applied.
	recordCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	return errors.Join(err, mg.recordBuilds(recordCtx, conn, what, uint(before)))
}

// recordBuilds writes, in hopper_migration_builds, this build as the one
// that applied each migration above before up to the version the run left
// the schema at, and forgets the migrations above that version (a down
// undid them); a run that changed nothing writes nothing. It runs on the
// session that holds the run lock, so no other Hopper migrator moves the
// version meanwhile. A schema left dirty is recorded by no one: a person
// repairs it and forces its version.
func (mg *Migrator) recordBuilds(ctx context.Context, conn *pgx.Conn, what string, before uint) error {
	after, dirty, err := mg.Version()
	if err != nil {
		return err
	}
	if dirty || after < buildsVersion || after == before {
		// Left dirty; no table to write to (a down below it dropped it); or
		// nothing applied nor undone, which writes nothing: a process
		// whose role may not write the table (the least-privilege grants)
		// still calls Up on a current schema.
		return nil
	}
	var applied []int64
	for _, v := range Versions() {
		if v > before && v <= after {
			applied = append(applied, int64(v))
		}
	}
	b := buildinfo.Read()
	var vcsTime *time.Time
	if t, err := time.Parse(time.RFC3339, b.Time); err == nil {
		vcsTime = &t
	}
	err = hopperdb.New(conn).RecordMigrationBuilds(ctx, hopperdb.RecordMigrationBuildsParams{
		HopperVersion: b.Version, Program: b.Program, Revision: b.Revision, VcsModified: b.Modified, VcsTime: vcsTime,
		GoVersion: b.Go, Versions: applied, ToVersion: int64(after),
	})
	if err != nil {
		return fmt.Errorf("migrate %s: record this build in hopper_migration_builds (from version %d to %d): %w", what, before, after, err)
	}
	return nil
}

// runLockError is the failure to take Hopper's run lock: the run ran
// nothing.
type runLockError struct{ err error }

func (e *runLockError) Error() string { return e.err.Error() }
func (e *runLockError) Unwrap() error { return e.err }

// lockRun takes Hopper's run lock on the migrator's schema
// (LockMigrationRun), on a session of its own, which the caller closes to
// give the lock back.
// golang-migrate gives its own lock back before a rolled-back migration's
// dirty mark can be cleared; every Hopper migrator waits for this lock
// first, so none reads that passing mark as a schema half-migrated.
func (mg *Migrator) lockRun(ctx context.Context, what string) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, &mg.connCfg)
	if err != nil {
		return nil, fmt.Errorf("migrate %s: connect for the run lock: %w", what, err)
	}
	release := func() { _ = conn.Close(context.WithoutCancel(ctx)) }
	q := hopperdb.New(conn)
	access, err := q.MigrationsTableAccess(ctx, mg.schema)
	if err != nil {
		release()
		return nil, fmt.Errorf("migrate %s: %w", what, err)
	}
	id, err := runLockID(access.DatabaseName, mg.schema)
	if err != nil {
		release()
		return nil, fmt.Errorf("migrate %s: %w", what, err)
	}
	if err := q.LockMigrationRun(ctx, id); err != nil {
		release()
		return nil, &runLockError{fmt.Errorf("migrate %s: take the migrations' run lock: %w", what, err)}
	}
	return conn, nil
}

// stepChecked checks the version under golang-migrate's lock, then runs
// step. It returns the version step started from, -1 when the check
// failed and step did not run.
func (mg *Migrator) stepChecked(ctx context.Context, what string, step func() error) (int, error) {
	before, err := mg.checkVersionLocked(what)
	if err != nil {
		return -1, err
	}
	// golang-migrate takes no context; GracefulStop stops it between
	// migrations, never inside one.
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			mg.m.GracefulStop <- true
		case <-done:
		}
	}()
	err = step()
	if errors.Is(err, migrate.ErrNoChange) {
		err = nil
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return int(before), fmt.Errorf("migrate %s: %w", what, err)
	}
	return int(before), nil
}

// Up migrates the database behind pool to the latest version: the one call
// most programs need at start.
func Up(ctx context.Context, pool *pgxpool.Pool, opts ...Option) error {
	mg, err := NewMigrator(ctx, pool, opts...)
	if err != nil {
		return err
	}
	return errors.Join(mg.Up(ctx), mg.Close())
}

// Latest is the newest migration version this build of Hopper carries.
func Latest() uint {
	versions := Versions()
	return versions[len(versions)-1]
}

// Versions lists the migration versions this build carries, oldest first.
func Versions() []uint {
	entries, err := fs.ReadDir(Files, ".")
	if err != nil {
		panic(err) // embedded at build time: cannot fail
	}
	seen := map[uint]bool{}
	var versions []uint
	for _, e := range entries {
		prefix, _, ok := strings.Cut(e.Name(), "_")
		if !ok {
			continue
		}
		v, err := strconv.ParseUint(prefix, 10, 64)
		if err != nil || seen[uint(v)] {
			continue
		}
		seen[uint(v)] = true
		versions = append(versions, uint(v))
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i] < versions[j] })
	return versions
}

type logger func(format string, args ...any)

func (l logger) Printf(format string, args ...any) { l(strings.TrimSuffix(format, "\n"), args...) }
func (l logger) Verbose() bool                     { return false }
