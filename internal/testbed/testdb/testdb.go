// Package testdb is Hopper's test bed: it finds a real PostgreSQL and gives
// every test a freshly migrated schema of its own, so tests run in parallel
// without seeing each other's jobs.
//
// The server is picked once per test binary, in this order:
// HOPPER_TEST_DATABASE_URL, DATABASE_URL, the libpq defaults (PG* variables,
// localhost:5432); when none answers and a Docker engine does, a PostgreSQL
// container started with dockertest (by the dockerpg helper, a module of
// its own: see docker.go), purged when its tests end; else, when
// PostgreSQL's server programs are installed (initdb on the PATH or in
// /usr/lib/postgresql/*/bin), a throwaway cluster of the binary's own
// (package pgcluster), stopped and removed when its tests end. With no
// database at all a test is skipped, or fails when the CI variable is set.
// The binary says on stderr which server it used. Migrated schemas are
// reused between the binary's tests (reuse.go).
package testdb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/internal/pgurl"
	"github.com/hopperq/hopper/internal/testbed/freshschema"
	"github.com/hopperq/hopper/internal/testbed/pgcluster"
)

// DB is one test's private, migrated schema.
type DB struct {
	// Pool connects with the test's schema first in search_path.
	Pool *pgxpool.Pool
	// Schema is the name of the test's schema.
	Schema string
	// URL connects to the same schema: hand it to child processes.
	URL string
}

var (
	serverOnce sync.Once
	serverDSN  string
	serverErr  error
)

// Server returns the connection string of the PostgreSQL server the tests
// use, skipping (or, under CI, failing) the test when there is none.
func Server(t testing.TB) string {
	t.Helper()
	resolveServer()
	if serverErr != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("testdb: no PostgreSQL for tests (CI is set, so this fails): %v", serverErr)
		}
		t.Skipf("testdb: no PostgreSQL for tests: %v", serverErr)
	}
	return serverDSN
}

// New gives the test a migrated schema of its own: freshly migrated, or
// one another test of the binary gave back, emptied and renamed, that is
// in every way a fresh migrate up leaves it (reuse.go). When the test
// ends it is given back, or dropped when the test changed it.
func New(t testing.TB) *DB {
	t.Helper()
	dsn := Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := takeSpare()
	if name == "" {
		var err error
		if name, err = migrateFresh(ctx, dsn); err != nil {
			t.Fatalf("testdb: %v", err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := giveBack(ctx, dsn, name); err != nil {
			t.Errorf("testdb: %v", err)
		}
	})
	return open(t, dsn, name)
}

// NewEmpty gives the test a fresh, empty schema (no migrations applied).
func NewEmpty(t testing.TB) *DB {
	t.Helper()
	dsn := Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	name, err := freshschema.Create(ctx, dsn, "hopper_test_")
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	t.Cleanup(func() { dropSchema(t, dsn, name) })
	return open(t, dsn, name)
}

// open gives the test a pool on schema name, closed when the test ends
// (before the schema is dropped or given back: cleanups run last first).
func open(t testing.TB, dsn, name string) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := &DB{Schema: name, URL: WithSearchPath(dsn, name)}
	var err error
	if d.Pool, err = newPool(ctx, d.URL); err != nil {
		t.Fatalf("testdb: pool: %v", err)
	}
	t.Cleanup(d.Pool.Close)
	return d
}

// newPool opens a pool of up to 16 connections on url.
func newPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	cfg.MaxConns = 16
	return pgxpool.NewWithConfig(ctx, cfg)
}

// WithSearchPath returns dsn with search_path set to schema.
func WithSearchPath(dsn, schemaName string) string { return pgurl.WithSearchPath(dsn, schemaName) }

func dropSchema(t testing.TB, dsn, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := freshschema.Drop(ctx, dsn, name); err != nil {
		t.Errorf("testdb: %v", err)
	}
}

// resolveServer picks the server once per test binary and says on stderr
// which one it picked (go test shows it with -v, or when the package
// fails).
func resolveServer() {
	serverOnce.Do(func() {
		var source string
		var skipped []string
		serverDSN, source, skipped, serverErr = defaultFinder.find()
		if serverErr == nil {
			note := ""
			if len(skipped) > 0 {
				note = " (skipped: " + strings.Join(skipped, "; ") + ")"
			}
			fmt.Fprintf(os.Stderr, "testdb: PostgreSQL from %s%s\n", source, note)
		}
	})
}

// finder tries the ways to a server in order; its fields are the steps
// that reach beyond the process, replaced in the tests of the order.
type finder struct {
	ping    func(dsn string) error // does a server answer at dsn?
	docker  func() (string, error) // a container, when a Docker engine answers
	scratch func() (string, error) // a cluster of our own, when initdb is installed
}

var defaultFinder = finder{ping: ping, docker: startDocker, scratch: startScratch}

// find returns the connection string of the first server that answers, in
// order: HOPPER_TEST_DATABASE_URL, DATABASE_URL, the libpq defaults, a
// Docker container, a scratch cluster. source names the one used; skipped
// says why each one before it was not.
func (f finder) find() (dsn, source string, skipped []string, err error) {
	for _, candidate := range []struct{ name, dsn string }{
		{"HOPPER_TEST_DATABASE_URL", os.Getenv("HOPPER_TEST_DATABASE_URL")},
		{"DATABASE_URL", os.Getenv("DATABASE_URL")},
		{"libpq defaults", ""},
	} {
		if candidate.dsn == "" && candidate.name != "libpq defaults" {
			continue
		}
		err := f.ping(candidate.dsn)
		if err == nil {
			return candidate.dsn, candidate.name, skipped, nil
		}
		skipped = append(skipped, fmt.Sprintf("%s: %v", candidate.name, err))
	}
	for _, step := range []struct {
		name  string
		start func() (string, error)
	}{
		{"a Docker container (dockertest)", f.docker},
		{"a scratch cluster", f.scratch},
	} {
		dsn, err := step.start()
		if err == nil {
			return dsn, step.name, skipped, nil
		}
		skipped = append(skipped, fmt.Sprintf("%s: %v", step.name, err))
	}
	return "", "", skipped, errors.New(strings.Join(skipped, "; "))
}

func ping(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// scratch is the cluster startScratch started, if any; Main stops it.
var scratch *pgcluster.Cluster

// startScratch starts a throwaway cluster for this test binary.
func startScratch() (string, error) {
	if err := pgcluster.Available(); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, os.Stderr)
	if err != nil {
		return "", err
	}
	scratch = c
	return c.URL(), nil
}
