// Package shop is a small application that compiles Hopper's SQL into its
// own sqlc build: its queries join hopper_jobs, and it enqueues a
// confirmation email in the same transaction as the order, with code it
// generated itself. Hopper's tables live in a schema of their own.
package shop

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"example.com/shop/internal/hopperdb"
	"example.com/shop/internal/shopdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/worker"
)

//go:embed schema/*.sql
var migrations embed.FS

// OrderConfirmation is the payload of a confirmation email job.
type OrderConfirmation struct {
	OrderID int64 `json:"order_id"`
}

// ConfirmationEmail is the job kind. The shop's own SQL joins on its name.
var ConfirmationEmail = jobs.MustDefine[OrderConfirmation]("order_confirmation", jobs.Defaults(jobs.Queue("email")))

// Connect opens a pool whose search_path finds the shop's tables first and
// Hopper's after them.
func Connect(ctx context.Context, dsn, appSchema, jobsSchema string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{appSchema}.Sanitize() + "," + pgx.Identifier{jobsSchema}.Sanitize()
	return pgxpool.NewWithConfig(ctx, cfg)
}

// Migrate installs Hopper's tables in jobsSchema (with Hopper's own
// migrations table) and the shop's in appSchema (with golang-migrate's
// default one). Both schemas must exist.
func Migrate(ctx context.Context, pool *pgxpool.Pool, appSchema, jobsSchema string) error {
	if err := schema.Up(ctx, pool, schema.Name(jobsSchema)); err != nil {
		return err
	}
	cfg := pool.Config().ConnConfig
	cfg.RuntimeParams["search_path"] = pgx.Identifier{appSchema}.Sanitize()
	src, err := iofs.New(migrations, "schema")
	if err != nil {
		return err
	}
	driver, err := migratepgx.WithInstance(stdlib.OpenDB(*cfg), &migratepgx.Config{})
	if err != nil {
		return err
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("shop migrations: %w", err)
	}
	return nil
}

// PlaceOrder inserts an order and enqueues its confirmation email in one
// transaction, both through the shop's own generated code: the email job
// exists if and only if the order does.
func PlaceOrder(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, customer string, totalCents int64) (orderID int64, err error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if orderID, err = InsertOrderWithEmail(ctx, tx, customer, totalCents); err != nil {
		return 0, err
	}
	return orderID, tx.Commit(ctx)
}

// InsertOrderWithEmail does PlaceOrder's writes inside the caller's
// transaction.
func InsertOrderWithEmail(ctx context.Context, tx pgx.Tx, customer string, totalCents int64) (int64, error) {
	orderID, err := shopdb.New(tx).CreateOrder(ctx, shopdb.CreateOrderParams{Customer: customer, TotalCents: totalCents})
	if err != nil {
		return 0, fmt.Errorf("create order: %w", err)
	}
	payload, err := json.Marshal(OrderConfirmation{OrderID: orderID})
	if err != nil {
		return 0, err
	}
	if _, err := hopperdb.New(tx).Enqueue(ctx, hopperdb.EnqueueParams{
		Queue:       "email",
		Kind:        ConfirmationEmail.Name(),
		Version:     int32(ConfirmationEmail.Version()),
		Payload:     payload,
		RunAt:       time.Unix(0, 0), // "now": Enqueue takes the later of this and now() + delay
		MaxAttempts: 10,
	}); err != nil {
		return 0, fmt.Errorf("enqueue confirmation: %w", err)
	}
	return orderID, nil
}

// NewWorker returns a Hopper worker that sends confirmations: it marks the
// order confirmed and acknowledges the job in one transaction.
func NewWorker(pool *pgxpool.Pool, cfg worker.Config) (*worker.Worker, error) {
	if cfg.Queues == nil {
		cfg.Queues = map[string]int{"email": 5}
	}
	w, err := worker.New(pool, cfg)
	if err != nil {
		return nil, err
	}
	err = worker.Handle(w, ConfirmationEmail, func(ctx context.Context, job *jobs.Job[OrderConfirmation]) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
		// ... send the email here (idempotently: a job can run twice) ...
		if _, err := shopdb.New(tx).ConfirmOrder(ctx, job.Payload.OrderID); err != nil {
			return err
		}
		if err := worker.AckTx(ctx, tx, job); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
	return w, err
}
