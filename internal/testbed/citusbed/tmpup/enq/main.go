package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/jobs"
)

type P struct{ N int }

var k = jobs.MustDefine[P]("tmp_p")

func main() {
	ctx := context.Background()
	cfg, _ := pgxpool.ParseConfig(os.Args[1])
	cfg.ConnConfig.RuntimeParams["search_path"] = "exp"
	cfg.ConnConfig.RuntimeParams["citus.log_remote_commands"] = "on"
	cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { fmt.Println("  >", n.Message[:min(len(n.Message), 200)]) }
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	_, err = k.Enqueue(ctx, pool, P{1}, jobs.Sequence("a"))
	fmt.Println("sequence:", err)
}
