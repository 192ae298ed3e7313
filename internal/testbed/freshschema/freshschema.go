// Package freshschema makes and drops the throwaway schemas tests run in:
// one per test, so that tests run in parallel without seeing each other's
// jobs. Used by the test bed (internal/testbed/testdb) and by hoppertest.Schema.
package freshschema

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/internal/pgurl"
	"github.com/hopperq/hopper/schema"
)

// Create makes an empty schema named prefix and a random suffix, and
// returns its name.
func Create(ctx context.Context, dsn, prefix string) (string, error) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := prefix + hex.EncodeToString(b)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	// DDL takes no bind parameters; the name is ours and quoted.
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create schema %s: %w", name, err)
	}
	return name, nil
}

// Drop drops the schema and everything in it.
func Drop(ctx context.Context, dsn, name string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect to drop %s: %w", name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", name, err)
	}
	return nil
}

// Migrated makes a schema with Hopper's migrations applied and a pool
// whose search_path leads to it; drop closes the pool and drops the
// schema.
func Migrated(ctx context.Context, dsn, prefix string) (pool *pgxpool.Pool, drop func(context.Context) error, err error) {
	name, err := Create(ctx, dsn, prefix)
	if err != nil {
		return nil, nil, err
	}
	drop = func(ctx context.Context) error {
		if pool != nil {
			pool.Close()
		}
		return Drop(ctx, dsn, name)
	}
	pool, err = pgxpool.New(ctx, pgurl.WithSearchPath(dsn, name))
	if err == nil {
		err = schema.Up(ctx, pool)
	}
	if err != nil {
		_ = drop(ctx)
		return nil, nil, fmt.Errorf("schema %s: %w", name, err)
	}
	return pool, drop, nil
}
