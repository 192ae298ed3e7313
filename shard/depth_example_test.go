package shard_test

import (
	"context"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hopperq/hopper/shard"
)

// Export a sharded Hopper's queue depths, per shard and in total, to
// Prometheus: each scrape reads every shard's depths from bounded index
// ranges. (It needs a Citus coordinator with a sharded Hopper, so it is
// not run here; tests/citus runs it.)
func ExampleSet_Collector() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL")) // the Citus coordinator
	if err != nil {
		log.Fatal(err)
	}
	set, err := shard.Open(ctx, pool)
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(set.Collector(shard.CollectorOptions{}))
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// hopper_queue_depth{shard,queue,state}, hopper_sharded_queue_depth{queue,state}, hopper_shard_up{shard}, …
}
