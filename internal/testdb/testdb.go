// Package testdb is Hopper's test bed: it finds a real PostgreSQL and gives
// every test a freshly migrated schema of its own, so tests run in parallel
// without seeing each other's jobs.
//
// The server is picked once per test binary, in this order:
// HOPPER_TEST_DATABASE_URL, DATABASE_URL, the libpq defaults (PG* variables,
// localhost:5432); when none answers and PostgreSQL's server programs are
// installed (initdb on the PATH or in /usr/lib/postgresql/*/bin), a
// throwaway cluster of the binary's own (package pgcluster), stopped and
// removed when its tests end. With no database at all a test is skipped,
// or fails when the CI variable is set.
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

	"github.com/hopperq/hopper/internal/freshschema"
	"github.com/hopperq/hopper/internal/pgcluster"
	"github.com/hopperq/hopper/internal/pgurl"
	"github.com/hopperq/hopper/schema"
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
	serverOnce.Do(func() { serverDSN, serverErr = findServer() })
	if serverErr != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("testdb: no PostgreSQL for tests (CI is set, so this fails): %v", serverErr)
		}
		t.Skipf("testdb: no PostgreSQL for tests: %v", serverErr)
	}
	return serverDSN
}

// New gives the test a fresh schema with Hopper's migrations applied. The
// schema is dropped when the test ends.
func New(t testing.TB) *DB {
	t.Helper()
	d := NewEmpty(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := schema.Up(ctx, d.Pool); err != nil {
		t.Fatalf("testdb: migrate %s: %v", d.Schema, err)
	}
	return d
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

	d := &DB{Schema: name, URL: WithSearchPath(dsn, name)}
	cfg, err := pgxpool.ParseConfig(d.URL)
	if err != nil {
		t.Fatalf("testdb: parse config: %v", err)
	}
	cfg.MaxConns = 16
	d.Pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("testdb: pool: %v", err)
	}
	t.Cleanup(d.Pool.Close)
	return d
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

func findServer() (string, error) {
	var tried []string
	for _, candidate := range []struct{ name, dsn string }{
		{"HOPPER_TEST_DATABASE_URL", os.Getenv("HOPPER_TEST_DATABASE_URL")},
		{"DATABASE_URL", os.Getenv("DATABASE_URL")},
		{"libpq defaults", ""},
	} {
		if candidate.dsn == "" && candidate.name != "libpq defaults" {
			continue
		}
		err := ping(candidate.dsn)
		if err == nil {
			return candidate.dsn, nil
		}
		tried = append(tried, fmt.Sprintf("%s: %v", candidate.name, err))
	}
	dsn, err := startScratch()
	if err == nil {
		return dsn, nil
	}
	tried = append(tried, fmt.Sprintf("scratch cluster: %v", err))
	return "", errors.New(strings.Join(tried, "; "))
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
