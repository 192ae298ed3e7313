package worker

import (
	"context"
	"log/slog"
	"sync"

	"github.com/hopperq/hopper/db"
)

// executor runs handlers (execute.go): each job on a handler goroutine of
// its queue, under its own context, through the middleware and hooks
// (middleware.go), then turns what the handler returned into a verdict
// (verdict.go) and hands the result to the completer.
//
// Invariants: handlerWG counts dispatched jobs not yet executed to the end,
// poolWG every goroutine the executor started (handler goroutines and the
// rate claims' statements), so Run waits for both; inFlight holds exactly
// the jobs whose handler runs now, held or not, for the stuck watch.
type executor struct {
	q       *db.Queries
	log     *slog.Logger
	metrics *metrics
	cfg     *Config // middleware, hooks, the default backoff and timeout
	// completer records results; report settles one at once (a result the
	// completer no longer takes, a job acked in the handler's transaction).
	completer *completer
	report    func(completion, outcome)

	// handlerBase is the parent of every handler's context. It is never
	// cancelled, so a job's context does not register with it (one shared
	// parent with thousands of children was a hot lock); shutdown cancels
	// each running job's context instead. hard ends at the shutdown's hard
	// deadline. Both are set as Run starts.
	handlerBase context.Context
	hard        context.Context

	inFlight  handlerSet     // running handlers, held jobs or not
	handlerWG sync.WaitGroup // jobs being handled
	poolWG    sync.WaitGroup // handler goroutines
}

func newExecutor(q *db.Queries, log *slog.Logger, m *metrics, cfg *Config, cp *completer, report func(completion, outcome)) *executor {
	return &executor{q: q, log: log, metrics: m, cfg: cfg, completer: cp, report: report,
		handlerBase: context.Background(), hard: context.Background()}
}
