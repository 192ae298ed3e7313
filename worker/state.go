package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/migrated"
	"github.com/hopperq/hopper/internal/schemascope"
	"github.com/hopperq/hopper/internal/worker/announce"
	"github.com/hopperq/hopper/internal/worker/completer"
	"github.com/hopperq/hopper/internal/worker/executor"
	"github.com/hopperq/hopper/internal/worker/heartbeat"
	"github.com/hopperq/hopper/internal/worker/notifier"
	"github.com/hopperq/hopper/internal/worker/producer"
	"github.com/hopperq/hopper/internal/worker/promoter"
	"github.com/hopperq/hopper/internal/worker/pruner"
	"github.com/hopperq/hopper/internal/worker/registry"
	"github.com/hopperq/hopper/internal/worker/releaser"
	"github.com/hopperq/hopper/internal/worker/scheduler"
	"github.com/hopperq/hopper/internal/worker/sweeper"
)

// The state the worker's wiring shares, declared apart from the functions
// that use it, so that every arrow between worker/'s files runs down
// (files_test.go): Worker, what New builds for the worker's life
// (worker.go); run, the components of one Run (built and run by run.go,
// its other methods in the files named for what they do: dispatch.go,
// finish.go, settle.go, shutdown.go, rate_start.go, flow_record.go,
// shared_limit.go, middleware.go); dispatched, a claimed job on its way
// to a handler.

// Worker claims and runs jobs. Create it with New, register handlers with
// Handle and schedules with Schedule, then call Run.
//
// What New builds serves the worker's whole life: its configuration, its
// metrics and the maintenance services anyone may run at any time
// (sweeper, promoter, pruner, releaser: maintenance.go). What one Run works with, from the heartbeat to the
// producers, is built when Run knows the schema: see run.go.
type Worker struct {
	pool      *pgxpool.Pool
	q         *db.Queries
	scope     *schemascope.DB // Config.Schema's scope; nil: the pool's search_path
	cfg       Config
	log       *slog.Logger // through outageHandler: an outage is told once (outage.go)
	outage    *outage
	metrics   *metrics
	announcer announce.Announcer
	sweeper   *sweeper.Sweeper
	promoter  *promoter.Promoter
	pruner    *pruner.Pruner
	releaser  *releaser.Releaser

	mu         sync.Mutex
	handlers   *handlerTable
	schedules  map[string]*scheduler.Definition // Schedule's definitions; read-only once running
	running    bool
	metricsSrv *metricsServer

	// active is the Run under way, for the test helpers (export_test.go);
	// nil before it is built.
	active atomic.Pointer[run]

	// observe, when set (tests), sees every settled result.
	observe func(id int64, attempt int32, o completer.Outcome)
}

// dbtx is what the worker runs statements on, given a pool or a
// transaction: scoped to Config.Schema when one is set.
func (w *Worker) dbtx(d db.DBTX) db.DBTX {
	if w.scope == nil {
		return d
	}
	return w.scope.On(d)
}

// migrateUp is what to run to migrate the worker's schema, for errors.
func (w *Worker) migrateUp() string { return migrated.Run(w.cfg.Schema) }

// run is one Run of a Worker: the components it works with, each built
// whole by its constructor once the schema is known (newRun), started up
// in order (start), their loops started from one list (services), and
// stopped in the order the shutdown needs (work).
type run struct {
	w      *Worker
	schema string          // where hopper_jobs lives
	hard   context.Context // ends at the shutdown's hard deadline

	registry  *registry.Registry // this worker's row in hopper_workers
	held      *heldJobs
	guard     *readOnlyGuard // what the components' ReadOnly funcs check
	completer *completer.Completer
	executor  *runExecutor         // runs the handlers: a queue of goroutines for each queue
	heartbeat *heartbeat.Heartbeat // the worker's beat and its claims' lease extension
	producers map[string]*producer.Producer
	scheduler *scheduler.Scheduler // nil: the worker defines no schedules
	notifier  *notifier.Notifier

	// unrecorded counts results not recorded (OutcomeUnrecorded): their
	// jobs may still be held in this worker's name at its stop.
	unrecorded atomic.Int64
}

// runExecutor is the run's executor (internal/worker/executor), running
// dispatched jobs, whose claims are held jobs (finish.go builds it).
type runExecutor = executor.Executor[dispatched, *heldJob]

// dispatched is a claimed, decoded job on its way to a handler goroutine.
type dispatched struct {
	h       *handler
	row     db.HopperJob
	job     *heldJob
	call    func(context.Context) (json.RawMessage, error) // nil when decoding failed
	timeout time.Duration                                  // the run's timeout; 0: none
	keep    time.Duration                                  // how long its completion is kept; 0: not
	err     error                                          // why decoding failed
	rate    *producer.RateClaim                            // the claim it came in, under a global rate limit; nil: none
}

// Claim, Timeout and Runs are the job as the executor runs it
// (executor.Task).
func (d dispatched) Claim() *heldJob        { return d.job }
func (d dispatched) Timeout() time.Duration { return d.timeout }
func (d dispatched) Runs() bool             { return d.call != nil }
