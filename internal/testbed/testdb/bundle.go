package testdb

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/db"
)

// SetupTimeout bounds a test that Setup prepared: its Ctx is cancelled
// then, so a stuck test fails instead of hanging the binary.
const SetupTimeout = 3 * time.Minute

// Bundle is what a database test starts from: a migrated schema of its
// own, a pool on it, the generated queries bound to that pool, and a
// context that ends with the test.
//
// Packages add their own helpers by embedding it in a local type.
type Bundle struct {
	// Ctx is cancelled when the test ends, or after its timeout.
	Ctx context.Context
	// Pool connects with the test's schema first in search_path.
	Pool *pgxpool.Pool
	// Queries are the generated statements (package db) on Pool.
	Queries *db.Queries
	// Schema is the name of the test's schema.
	Schema string
	// URL connects to the same schema: hand it to child processes.
	URL string
}

// Setup marks the test parallel and gives it a fresh migrated schema
// (New) and a context bounded by SetupTimeout.
func Setup(t *testing.T) *Bundle {
	t.Helper()
	return SetupWithin(t, SetupTimeout)
}

// SetupWithin is Setup with the test's context bounded by timeout.
func SetupWithin(t *testing.T, timeout time.Duration) *Bundle {
	t.Helper()
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	d := New(t)
	return &Bundle{Ctx: ctx, Pool: d.Pool, Queries: db.New(d.Pool), Schema: d.Schema, URL: d.URL}
}

// Totals counts the schema's live jobs (ready, scheduled or running) and
// its dead ones (not cancelled), through the Stats query.
func (b *Bundle) Totals(t testing.TB) (live, dead int64) {
	t.Helper()
	rows, err := b.Queries.Stats(b.Ctx)
	if err != nil {
		t.Fatalf("testdb: stats: %v", err)
	}
	for _, r := range rows {
		live += r.Ready + r.Scheduled + r.Running
		dead += r.Dead
	}
	return live, dead
}
