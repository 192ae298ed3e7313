package worker

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper/db"
)

// warnIfPooled says at start-up what will go wrong when the pool reaches
// PostgreSQL through a pooler such as PgBouncer (the server's process id
// differs from the one the connection was given) and the worker is set up
// for a direct connection: pgx's statement cache names prepared statements
// per client connection, which a transaction pooler shares ("prepared
// statement already exists"), and LISTEN needs a session of its own. It is
// advice only: a session-mode pooler supports both.
func (w *Worker) warnIfPooled(ctx context.Context) {
	conn, err := w.pool.Acquire(ctx)
	if err != nil {
		return // start's own statements report the connection's trouble
	}
	defer conn.Release()
	told := conn.Conn().PgConn().PID()
	pid, err := db.New(w.dbtx(conn.Conn())).BackendPID(ctx)
	if err != nil || uint32(pid) == told {
		return
	}
	cached := conn.Conn().Config().DefaultQueryExecMode == pgx.QueryExecModeCacheStatement
	if !cached && w.cfg.PollOnly {
		return
	}
	w.log.Warn("the pool reaches PostgreSQL through a pooler: in transaction mode (PgBouncer's pool_mode=transaction) "+
		"set default_query_exec_mode=exec in the connection string and Config.PollOnly, and name the schema with Config.Schema "+
		"(docs/workers.md: \"Which schema, and PgBouncer\")",
		"statement_cache", cached, "poll_only", w.cfg.PollOnly)
}
