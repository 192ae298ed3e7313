package hoppertest

import (
	"context"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/internal/testbed/freshschema"
)

// Schema gives a test a schema of its own with Hopper's tables migrated,
// and a pool whose search_path leads to it; both go when the test ends.
// Tests that each take one run in parallel without seeing each other's
// jobs. databaseURL names the server ("": $DATABASE_URL, else libpq's
// defaults); the role needs CREATE on the database.
func Schema(t TB, databaseURL string) *pgxpool.Pool {
	t.Helper()
	if databaseURL == "" {
		databaseURL = os.Getenv("DATABASE_URL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, drop, err := freshschema.Migrated(ctx, databaseURL, "hoppertest_")
	if err != nil {
		t.Fatalf("hoppertest: a fresh schema: %v", err)
		return nil
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := drop(ctx); err != nil {
			t.Fatalf("hoppertest: %v", err)
		}
	})
	return pool
}
