package testdb

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/hopperq/hopper/internal/testbed/freshschema"
)

// Main runs a package's tests and examples when a PostgreSQL answers. When
// none does it skips them all (examples cannot skip one by one), unless the
// CI variable is set, where it fails.
//
// When every test passed, Main then fails the binary if goroutines are still
// running (a pool, worker, listener or timer that a test did not stop), and
// prints their stacks. ignore adds goleak options for goroutines that a
// package legitimately keeps for the whole binary; none is needed for pgx
// pools, which end theirs on Close.
func Main(m *testing.M, ignore ...goleak.Option) {
	resolveServer()
	if serverErr != nil {
		if os.Getenv("CI") != "" {
			fmt.Fprintf(os.Stderr, "testdb: no PostgreSQL for tests (CI is set, so this fails): %v\n", serverErr)
			os.Exit(1)
		}
		fmt.Printf("testdb: skipping every test of this package, no PostgreSQL: %v\n", serverErr)
		os.Exit(0)
	}
	code := m.Run()
	DropSpares()
	if scratch != nil {
		scratch.Stop()
	}
	if docker != nil {
		docker.stop()
	}
	// A failed test may have skipped its cleanups: its leaks are noise.
	if code == 0 {
		if err := findLeaks(ignore...); err != nil {
			fmt.Fprintf(os.Stderr, "testdb: every test passed, but goroutines were still running %v later (a pool, worker or timer not stopped?): %v\n", leakWait, err)
			code = 1
		}
	}
	os.Exit(code)
}

// leakWait bounds how long findLeaks waits for goroutines that end on their
// own: pgconn closes a connection whose query was cancelled in a goroutine
// of its own (a cancel request, then Terminate) that may take up to 15s.
const leakWait = 20 * time.Second

// findLeaks returns goleak's report of the goroutines still running, beyond
// the testing package's and those ignore matches, once leakWait has passed
// without them ending; nil as soon as there are none.
func findLeaks(ignore ...goleak.Option) error {
	deadline := time.Now().Add(leakWait)
	for {
		err := goleak.Find(ignore...) // retries for about half a second itself
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

// ForExample gives a runnable example a pool on a fresh migrated schema,
// and a function that drops it. It panics when there is no database: call
// it only from packages whose TestMain is Main.
func ForExample() (*pgxpool.Pool, func()) {
	resolveServer()
	if serverErr != nil {
		panic(serverErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, drop, err := freshschema.Migrated(ctx, serverDSN, "hopper_example_")
	if err != nil {
		panic(err)
	}
	return pool, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = drop(ctx)
	}
}

// URL is the test server's connection string, for examples (which have no
// testing.TB); it panics when there is none: call it only from packages
// whose TestMain is Main.
func URL() string {
	resolveServer()
	if serverErr != nil {
		panic(serverErr)
	}
	return serverDSN
}
