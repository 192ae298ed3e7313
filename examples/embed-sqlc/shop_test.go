package shop_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"example.com/shop"
	"example.com/shop/internal/shopdb"
	"github.com/hopperq/hopper/worker"
)

// setup gives a test its own pair of schemas (the shop's and Hopper's),
// migrated, on HOPPER_TEST_DATABASE_URL, DATABASE_URL or the libpq
// defaults. Without a database the test skips, or fails under CI.
func setup(t *testing.T) (context.Context, *pgxpool.Pool) {
	t.Helper()
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	dsn := os.Getenv("HOPPER_TEST_DATABASE_URL")
	if dsn == "" {
		dsn = os.Getenv("DATABASE_URL")
	}
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no PostgreSQL (CI is set): %v", err)
		}
		t.Skipf("no PostgreSQL: %v", err)
	}
	defer admin.Close(ctx)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	app, jobs := "shop_"+hex.EncodeToString(b), "shop_jobs_"+hex.EncodeToString(b)
	for _, s := range []string{app, jobs} {
		_, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{s}.Sanitize())
		require.NoError(t, err)
		t.Cleanup(func() {
			c, err := pgx.Connect(context.Background(), dsn)
			if err == nil {
				_, _ = c.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{s}.Sanitize()+" CASCADE")
				c.Close(context.Background())
			}
		})
	}
	pool, err := shop.Connect(ctx, dsn, app, jobs)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, shop.Migrate(ctx, pool, app, jobs))
	return ctx, pool
}

func pending(t *testing.T, ctx context.Context, q *shopdb.Queries) map[int64]int64 {
	t.Helper()
	rows, err := q.OrdersWithPendingEmails(ctx)
	require.NoError(t, err)
	out := map[int64]int64{}
	for _, r := range rows {
		out[r.ID] = r.PendingEmails
	}
	return out
}

// The order and its email job commit together, or neither exists.
func TestOrderAndEmailShareATransaction(t *testing.T) {
	ctx, pool := setup(t)
	q := shopdb.New(pool)
	id, err := shop.PlaceOrder(ctx, pool, "Ada", 4200)
	require.NoError(t, err)
	require.Equal(t, map[int64]int64{id: 1}, pending(t, ctx, q), "the shop's own query joins hopper_jobs")

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	ghost, err := shop.InsertOrderWithEmail(ctx, tx, "Ghost", 100)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = q.GetOrder(ctx, ghost)
	require.ErrorIs(t, err, pgx.ErrNoRows)
	require.Equal(t, map[int64]int64{id: 1}, pending(t, ctx, q), "the rolled-back order left no job")

	_, err = shop.PlaceOrder(ctx, pool, "Broke", -1) // violates the orders CHECK
	require.Error(t, err)
	require.Len(t, pending(t, ctx, q), 1, "a failed order enqueues nothing")
}

// A Hopper worker handles the job enqueued by the shop's generated code and
// confirms the order in the same transaction as its acknowledgement.
func TestWorkerConfirmsOrder(t *testing.T) {
	ctx, pool := setup(t)
	q := shopdb.New(pool)
	id, err := shop.PlaceOrder(ctx, pool, "Grace", 900)
	require.NoError(t, err)
	w, err := shop.NewWorker(pool, worker.Config{PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	// The condition runs on a goroutine of its own, so it reports through
	// CollectT rather than t.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		o, err := q.GetOrder(ctx, id)
		require.NoError(c, err)
		require.NotNil(c, o.ConfirmedAt, "order confirmed")
	}, 90*time.Second, 20*time.Millisecond)
	stop()
	require.NoError(t, <-done)
	require.Equal(t, map[int64]int64{id: 0}, pending(t, ctx, q), "acked with the confirmation")
}
