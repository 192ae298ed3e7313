package testdb

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/schema"
)

// Main runs a package's tests and examples when a PostgreSQL answers. When
// none does it skips them all (examples cannot skip one by one), unless the
// CI variable is set, where it fails.
func Main(m *testing.M) {
	serverOnce.Do(func() { serverDSN, serverErr = findServer() })
	if serverErr != nil {
		if os.Getenv("CI") != "" {
			fmt.Fprintf(os.Stderr, "testdb: no PostgreSQL for tests (CI is set, so this fails): %v\n", serverErr)
			os.Exit(1)
		}
		fmt.Printf("testdb: skipping every test of this package, no PostgreSQL: %v\n", serverErr)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// ForExample gives a runnable example a pool on a fresh migrated schema,
// and a function that drops it. It panics when there is no database: call
// it only from packages whose TestMain is Main.
func ForExample() (*pgxpool.Pool, func()) {
	serverOnce.Do(func() { serverDSN, serverErr = findServer() })
	if serverErr != nil {
		panic(serverErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := "hopper_example_" + randomSuffix()
	admin, err := pgx.Connect(ctx, serverDSN)
	if err != nil {
		panic(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		panic(err)
	}
	pool, err := pgxpool.New(ctx, WithSearchPath(serverDSN, name))
	if err != nil {
		panic(err)
	}
	if err := schema.Up(ctx, pool); err != nil {
		panic(err)
	}
	return pool, func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, serverDSN)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	}
}
