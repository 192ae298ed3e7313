// Command shop places an order (with its confirmation email job, in one
// transaction), shows a rolled-back order leaving no job, and runs a Hopper
// worker until the order is confirmed. DATABASE_URL, or the libpq defaults.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"example.com/shop"
	"example.com/shop/internal/shopdb"
	"github.com/hopperq/hopper/worker"
)

const appSchema, jobsSchema = "shop", "shop_jobs"

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "shop:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	for _, s := range []string{appSchema, jobsSchema} {
		// DDL takes no parameters; the names are constants.
		if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{s}.Sanitize()); err != nil {
			return err
		}
	}
	conn.Close(ctx)
	pool, err := shop.Connect(ctx, os.Getenv("DATABASE_URL"), appSchema, jobsSchema)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := shop.Migrate(ctx, pool, appSchema, jobsSchema); err != nil {
		return err
	}
	q := shopdb.New(pool)

	id, err := shop.PlaceOrder(ctx, pool, "Ada", 4200)
	if err != nil {
		return err
	}
	fmt.Printf("placed order %d with its confirmation job\n", id)

	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	ghost, err := shop.InsertOrderWithEmail(ctx, tx, "Ghost", 100)
	if err != nil {
		return err
	}
	_ = tx.Rollback(ctx)
	fmt.Printf("order %d rolled back: its job went with it\n", ghost)
	printOrders(ctx, q)

	w, err := shop.NewWorker(pool, worker.Config{})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	go func() {
		for runCtx.Err() == nil {
			if o, err := q.GetOrder(runCtx, id); err == nil && o.ConfirmedAt != nil {
				stop()
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	if err := w.Run(runCtx); err != nil {
		return err
	}
	printOrders(ctx, q)
	return nil
}

func printOrders(ctx context.Context, q *shopdb.Queries) {
	rows, err := q.OrdersWithPendingEmails(ctx)
	if err != nil {
		fmt.Println("orders:", err)
		return
	}
	for _, r := range rows {
		fmt.Printf("  order %d (%s): confirmed %v, pending emails %d\n", r.ID, r.Customer, r.ConfirmedAt != nil, r.PendingEmails)
	}
}
