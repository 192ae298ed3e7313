package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hopperq/hopper/internal/schemascope"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// Worker serves every shard it was given: it is one worker runtime (a
// worker.Worker scoped to the shard's schema, Config.Schema) per shard,
// all on one pool, registered with the same handlers, started and stopped
// together by Run.
//
// Each runtime is a whole worker of its shard, with nothing shared but the
// pool and the Config: it registers in the shard's hopper_workers, claims
// from the shard (every claim a single-node statement, routed by the
// coordinator to the shard's node), extends its leases there, listens for
// the shard's wake-ups, and takes its turn at the shard's maintenance
// (sweeps, promotions, pruning, the hand-back of gone workers' jobs)
// under the shard's own advisory locks. So any worker serving a shard may
// do that shard's maintenance, and a shard stays watched as long as one
// worker serves it, whichever workers come and go.
//
// Create it with NewWorker, register handlers with Handle or
// HandleWithResult (or Each, for anything else a worker.Worker takes),
// then call Run.
type Worker struct {
	shards   []string
	runtimes []*worker.Worker // runtimes[i] serves shards[i]
	id       string
	pool     *pgxpool.Pool
	log      *slog.Logger

	mu      sync.Mutex
	running bool
}

// NewWorker prepares a Worker on pool that serves the shards named, each
// the name of a Hopper schema (a distributed schema on Citus, migrated by
// schema.Up). The pool connects to the coordinator; its search_path does
// not matter, every statement is scoped to its shard.
//
// cfg is every shard's configuration, with these differences:
//
//   - Queues' concurrency is per shard: a queue of concurrency 10 runs
//     up to 10 jobs of each shard at once, so up to 10 × len(shards) in
//     all. A shard's throughput then does not depend on how many shards
//     the worker serves, and no shard waits for slots another holds; size
//     it down when a process should not run that many handlers at once.
//   - ID, given or made up, is suffixed with "/" and the shard's name in
//     each runtime: "pod-7/hopper_s03" leases the jobs of hopper_s03 and
//     holds its row in hopper_s03's registry. A stable ID stays stable per
//     shard, so a restart hands back its previous run's jobs in each.
//   - Schema must be empty: the shards name the schemas.
//   - Registerer gets every runtime's metrics, each with a "shard" label.
//   - MetricsAddr and MetricsReadPool are refused: their database gauges
//     read one schema; serve Registerer's metrics instead.
//
// Errors wrap worker.ErrInvalidConfig: shards empty, named twice or a
// name no schema can have, or cfg invalid (as worker.New says).
func NewWorker(pool *pgxpool.Pool, shards []string, cfg worker.Config) (*Worker, error) {
	if pool == nil {
		return nil, fmt.Errorf("shard: worker: %w: nil pool", worker.ErrInvalidConfig)
	}
	if err := checkShards(shards); err != nil {
		return nil, fmt.Errorf("shard: worker: %w: %w", worker.ErrInvalidConfig, err)
	}
	switch {
	case cfg.Schema != "":
		return nil, fmt.Errorf("shard: worker: %w: Schema is %q, but a sharded worker's schemas are its shards", worker.ErrInvalidConfig, cfg.Schema)
	case cfg.MetricsAddr != "" || cfg.MetricsReadPool != nil:
		return nil, fmt.Errorf("shard: worker: %w: MetricsAddr and MetricsReadPool read one schema's gauges; a sharded worker's metrics go to Registerer, with a shard label", worker.ErrInvalidConfig)
	}
	w := &Worker{shards: slices.Clone(shards), id: cfg.ID, pool: pool, log: cfg.Logger}
	if w.log == nil {
		w.log = slog.Default()
	}
	if w.id == "" {
		// As worker.New makes one up: host, pid, a random suffix.
		host, _ := os.Hostname()
		w.id = fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), rand.Uint32()&0xffff)
	}
	for _, name := range w.shards {
		c := cfg
		c.Schema = name
		c.ID = w.id + "/" + name
		if cfg.Registerer != nil {
			c.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"shard": name}, cfg.Registerer)
		}
		var rt *worker.Worker
		c.OnOutcome = append(slices.Clone(cfg.OnOutcome), func(job *jobs.Row, o worker.Outcome, _ error) {
			if releases(job, o) {
				rt.Wake()
			}
		})
		rt, err := worker.New(pool, c)
		if err != nil {
			return nil, fmt.Errorf("shard: worker on shard %s: %w", name, err)
		}
		w.runtimes = append(w.runtimes, rt)
	}
	return w, nil
}

// releases says whether a run's end may have made other jobs of its shard
// ready: the next job of its sequence, the steps after it in its
// workflow. On plain PostgreSQL the triggers that promote them announce
// them (NOTIFY); a shard's are silent (migration 34), so the runtime that
// ran the job claims again in its shard at once, every queue of it, rather
// than at its next poll. Jobs made ready by another shard's worker or by
// a process outside this one still wait for a poll (Config.PollInterval).
func releases(job *jobs.Row, o worker.Outcome) bool {
	switch o {
	case worker.OutcomeDone, worker.OutcomeDead, worker.OutcomeCancelled:
	default:
		return false
	}
	_, seq := job.Meta[jobs.MetaSequence]
	_, flow := job.Meta[jobs.MetaWorkflow]
	return seq || flow
}

// checkShards: at least one shard, each a possible schema name, none
// twice.
func checkShards(shards []string) error {
	if len(shards) == 0 {
		return errors.New("no shards to serve")
	}
	seen := make(map[string]bool, len(shards))
	for i, name := range shards {
		if err := schemascope.CheckName(name); err != nil {
			return fmt.Errorf("shard %d: %w", i, err)
		}
		if seen[name] {
			return fmt.Errorf("shard %s is named twice", name)
		}
		seen[name] = true
	}
	return nil
}

// Shards are the shards the Worker serves, in the order given.
func (w *Worker) Shards() []string { return slices.Clone(w.shards) }

// ID is the Worker's ID, before the suffix each shard's runtime adds.
func (w *Worker) ID() string { return w.id }

// Each calls fn with every shard's runtime, in the order of the shards,
// and stops at the first error, which it returns naming the shard. It is
// for what Handle does not cover: worker.Schedule on one shard (a
// schedule fires into the shard whose runtime defines it), a handler
// registered on some shards only. Call it before Run.
func (w *Worker) Each(fn func(shard string, w *worker.Worker) error) error {
	for i, rt := range w.runtimes {
		if err := fn(w.shards[i], rt); err != nil {
			return fmt.Errorf("shard %s: %w", w.shards[i], err)
		}
	}
	return nil
}

// Connections is how many pool connections the runtimes' own statements
// may hold at once, added up over the shards (see
// worker.Worker.Connections): size the pool for it, plus what the handlers
// use. The wake-up listeners are outside the pool: one connection more
// per shard, unless Config.PollOnly.
func (w *Worker) Connections() worker.Connections {
	var sum worker.Connections
	for _, rt := range w.runtimes {
		c := rt.Connections()
		sum.Claims += c.Claims
		sum.Completer += c.Completer
		sum.Heartbeat += c.Heartbeat
		sum.Maintenance += c.Maintenance
		sum.Schedules += c.Schedules
		sum.Metrics += c.Metrics
	}
	return sum
}

// checkPoolSize warns when the pool cannot hold what every runtime's own
// statements may hold at once: each runtime checks the pool against its
// own needs only, and the shards share it.
func (w *Worker) checkPoolSize() {
	need, have := w.Connections(), int(w.pool.Config().MaxConns)
	if have >= need.Total() {
		return
	}
	w.log.Warn("the pool is smaller than this sharded worker needs: its shards' statements will wait for connections; set pool_max_conns (or pgxpool.Config.MaxConns) to at least what it needs plus what its handlers use",
		"worker", w.id, "shards", len(w.shards), "pool_max_conns", have, "needs", need.String())
}

// Run starts every shard's runtime and works until ctx is cancelled; then
// each shuts down as worker.Worker.Run says, and Run returns once all have
// returned. When one runtime fails (at start: a shard missing or not
// migrated, an ID in use; or later), the others are shut down as if ctx
// had ended, and Run returns its error, naming the shard. It returns nil
// after a shutdown.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return fmt.Errorf("shard: worker: %w: Run called twice", worker.ErrInvalidConfig)
	}
	w.running = true
	w.mu.Unlock()
	w.checkPoolSize()

	// One runtime's failure ends the others' context: a Worker serves all
	// its shards or none, so that no shard is left served by a process
	// that looks alive.
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	errs := make([]error, len(w.runtimes))
	var wg sync.WaitGroup
	for i, rt := range w.runtimes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := rt.Run(rctx)
			if err == nil && ctx.Err() == nil && rctx.Err() == nil {
				// worker.Run returns nil only after a shutdown, which
				// nothing but ctx asks for.
				err = errors.New("stopped on its own")
			}
			if err != nil {
				errs[i] = fmt.Errorf("shard: worker on shard %s: %w", w.shards[i], err)
				stop()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
