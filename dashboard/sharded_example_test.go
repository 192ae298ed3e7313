package dashboard_test

import (
	"context"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/dashboard"
	"github.com/hopperq/hopper/shard"
)

// Serve the dashboard of a sharded Hopper: an overview of every shard
// (its node and jobs), a job id lookup, and each shard's own dashboard
// under s/<shard>/. (It needs a Citus coordinator with a sharded Hopper,
// so it is not run here; tests/citus runs it.)
func ExampleNewSharded() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL")) // the Citus coordinator
	if err != nil {
		log.Fatal(err)
	}
	set, err := shard.Open(ctx, pool)
	if err != nil {
		log.Fatal(err)
	}
	d, err := dashboard.NewSharded(dashboard.ShardedConfig{Set: set, Config: dashboard.Config{
		DB: pool, Token: os.Getenv("HOPPER_UI_TOKEN"), AllowedHosts: []string{"ops.example.com"}}})
	if err != nil {
		log.Fatal(err)
	}
	go d.Run(ctx) // samples every shard for its charts
	http.Handle("/hopper/", http.StripPrefix("/hopper", d))
}
