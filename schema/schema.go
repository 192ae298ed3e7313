package schema

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	hopperdb "github.com/hopperq/hopper/db"
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

// ErrDirty is returned when an earlier migration failed half-way and left
// the migrations table marked dirty. Repair the schema by hand, then call
// Force with the version the schema is really at.
var ErrDirty = errors.New("hopper: schema migrations table is dirty")

// Option configures a Migrator.
type Option func(*options)

type options struct {
	schema string
	logf   func(format string, args ...any)
}

// WithSchema installs Hopper's tables in the named schema, which must
// already exist (CREATE SCHEMA is the application's call, not ours). Without it they go to the first schema of the
// connection's search_path. Workers and producers then reach the tables by
// putting the same schema first in their search_path.
func WithSchema(name string) Option {
	return func(o *options) { o.schema = name }
}

// WithLog receives one line per migration applied (and golang-migrate's
// other progress messages).
func WithLog(logf func(format string, args ...any)) Option {
	return func(o *options) { o.logf = logf }
}

// Migrator applies Hopper's migrations to one database (and schema).
type Migrator struct {
	m *migrate.Migrate
}

// NewMigrator prepares migrations over connections of its own, made from
// pool's configuration. Close it when done.
func NewMigrator(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Migrator, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	connCfg := pool.Config().ConnConfig
	if o.schema != "" {
		exists, err := hopperdb.New(pool).SchemaExists(ctx, o.schema)
		if err != nil {
			return nil, fmt.Errorf("hopper: migrate: %w", err)
		}
		if !exists {
			return nil, fmt.Errorf("hopper: migrate: schema %q does not exist: create it first", o.schema)
		}
		connCfg.RuntimeParams["search_path"] = pgx.Identifier{o.schema}.Sanitize()
	}
	// A database/sql handle of its own (golang-migrate speaks database/sql),
	// so migrating never changes the sessions of the caller's pool.
	sqlDB := stdlib.OpenDB(*connCfg)
	sqlDB.SetMaxOpenConns(2)
	driver, err := migratepgx.WithInstance(sqlDB, &migratepgx.Config{
		MigrationsTable: MigrationsTable,
		SchemaName:      o.schema,
	})
	if err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("hopper: migrate: open driver: %w", err)
	}
	src, err := iofs.New(Files, ".")
	if err != nil {
		_ = driver.Close()
		return nil, fmt.Errorf("hopper: migrate: read embedded files: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		_ = driver.Close()
		return nil, fmt.Errorf("hopper: migrate: %w", err)
	}
	if o.logf != nil {
		m.Log = logger(o.logf)
	}
	return &Migrator{m: m}, nil
}

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
func (mg *Migrator) Down(ctx context.Context, n int) error {
	if n <= 0 {
		return mg.run(ctx, "down", mg.m.Down)
	}
	return mg.run(ctx, "down", func() error { return mg.m.Steps(-n) })
}

// Version reports the applied version (0 when none) and whether the last
// migration failed half-way (dirty).
func (mg *Migrator) Version() (version uint, dirty bool, err error) {
	version, dirty, err = mg.m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("hopper: migrate: version: %w", err)
	}
	return version, dirty, nil
}

// Force records version as applied and clears the dirty flag without
// running anything: the way out after repairing a failed migration by hand.
func (mg *Migrator) Force(version int) error {
	if err := mg.m.Force(version); err != nil {
		return fmt.Errorf("hopper: migrate: force %d: %w", version, err)
	}
	return nil
}

func (mg *Migrator) run(ctx context.Context, what string, step func() error) error {
	if _, dirty, err := mg.Version(); err != nil {
		return err
	} else if dirty {
		return fmt.Errorf("hopper: migrate %s: %w", what, ErrDirty)
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
	err := step()
	if errors.Is(err, migrate.ErrNoChange) {
		err = nil
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("hopper: migrate %s: %w", what, err)
	}
	return nil
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
