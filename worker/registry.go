package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/migrated"
)

// The worker registry (hopper_workers): every running worker is a row,
// written at start, refreshed by each heartbeat and deleted at a clean
// stop. A worker is live while its last beat is younger than
// workerStaleBeats beats; the clients count the live workers serving each
// queue (hopper.QueueInfo.Workers).
const (
	// workerStaleBeats is how many beats a worker may miss before it is
	// taken to be gone: one late or failed beat does not make it so.
	workerStaleBeats = 3
	// workerRowsKept is how long the row of a worker gone without a clean
	// stop is kept, past its stale window, before a sweep prunes it.
	workerRowsKept = 24 * time.Hour
	// workerPruneEvery spaces the prunes of one worker: rows to prune are
	// rare (crashed workers), so a sweep looks for them at most this often.
	workerPruneEvery = time.Minute
	// workerPruneBatch bounds one PruneWorkers statement.
	workerPruneBatch = 1000
	// workerRemoveTimeout bounds the removal of the row at a clean stop:
	// should it fail, the row goes stale by itself.
	workerRemoveTimeout = 5 * time.Second
)

// registry keeps this worker's row in hopper_workers: it writes it at
// start (register), refreshes it on every heartbeat (beat) and deletes it
// at a clean stop (remove).
//
// Invariant: startedAt, under mu, is zero until the row was first written,
// then the start the database recorded, which every rewrite keeps.
type registry struct {
	q   *db.Queries
	log *slog.Logger
	cfg *Config // ID, Schema, HeartbeatInterval, LeaseDuration
	// queues and schema are set as Run starts, before the row is written:
	// the queues the worker serves, and where hopper_jobs lives (errors).
	queues []string
	schema string

	mu        sync.Mutex
	startedAt time.Time // as the database recorded it; zero until registered
}

func newRegistry(q *db.Queries, log *slog.Logger, cfg *Config) *registry {
	return &registry{q: q, log: log, cfg: cfg}
}

// beatInterval is how often the worker refreshes its row: on every
// heartbeat, or, with the heartbeat disabled (tests of lease expiry), as
// often as the default heartbeat would beat.
func (r *registry) beatInterval() time.Duration {
	if r.cfg.HeartbeatInterval > 0 {
		return r.cfg.HeartbeatInterval
	}
	return r.cfg.LeaseDuration / 3
}

// staleAfter is how long after its last beat the worker is taken to be
// gone.
func (r *registry) staleAfter() time.Duration { return workerStaleBeats * r.beatInterval() }

// servedQueues lists the queues a worker claims from, sorted; none when
// it only fires schedules.
func servedQueues(handlers *handlerTable, producers map[string]*producer) []string {
	names := []string{}
	if handlers.empty() {
		return names
	}
	for name := range producers {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// register writes the worker's row: at start (startedAt zero: now), and
// again should its row be gone while it runs (its own startedAt kept).
func (r *registry) register(ctx context.Context) error {
	host, _ := os.Hostname()
	p := db.RegisterWorkerParams{
		ID: r.cfg.ID, Host: host, Pid: int32(os.Getpid()), HopperVersion: hopperVersion(),
		Queues: r.queues, StaleAfterMs: r.staleAfter().Milliseconds(),
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.startedAt.IsZero() {
		p.StartedAt = &r.startedAt
	}
	started, err := r.q.RegisterWorker(ctx, p)
	if err != nil {
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "42P01": // undefined_table
			return migrated.Errorf(migrated.Run(r.cfg.Schema), "schema %s lacks hopper_workers, which migration %s adds", r.schema, migrated.Migration(10))
		case errors.As(err, &pgErr) && pgErr.Code == "42501": // insufficient_privilege
			return fmt.Errorf("worker: start: register the worker in hopper_workers: %w (grant SELECT, INSERT, UPDATE, DELETE ON hopper_workers to the role workers connect as)", err)
		}
		return fmt.Errorf("worker: start: register the worker: %w", err)
	}
	r.startedAt = started
	return nil
}

// beatTimeout bounds a beat: half a beat, at least a second (one row, but
// on a busy server), and at most a quarter of the lease, since the lease
// extensions of the same heartbeat wait for it.
func (r *registry) beatTimeout() time.Duration {
	return min(max(r.beatInterval()/2, time.Second), r.cfg.LeaseDuration/4)
}

// beat refreshes the worker's row, and writes it again if it is gone.
// Failures are logged; the next beat tries again.
func (r *registry) beat(ctx context.Context) {
	bctx, cancel := context.WithTimeout(ctx, r.beatTimeout())
	defer cancel()
	n, err := r.q.BeatWorker(bctx, r.cfg.ID)
	if err == nil && n == 0 {
		r.log.Info("this worker's row in hopper_workers was gone; writing it again")
		err = r.register(bctx)
	}
	if err != nil && ctx.Err() == nil {
		r.log.Warn("refreshing this worker's row in hopper_workers failed; retrying at the next beat", "error", err)
	}
}

// remove deletes the worker's own row at a clean stop (ctx: the
// shutdown's hard deadline), or when Run fails after start.
func (r *registry) remove(ctx context.Context) {
	r.mu.Lock()
	started := r.startedAt
	r.mu.Unlock()
	if started.IsZero() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, workerRemoveTimeout)
	defer cancel()
	if _, err := r.q.RemoveWorker(ctx, db.RemoveWorkerParams{ID: r.cfg.ID, StartedAt: started}); err != nil {
		r.log.Warn("removing this worker's row from hopper_workers failed; it goes stale by itself", "error", err)
	}
}

// hopperVersion is the version of the Hopper module this program was built
// with, as the build recorded it; "" when unknown (a development build).
var hopperVersion = sync.OnceValue(func() string {
	const module = "github.com/hopperq/hopper"
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	version := func(m *debug.Module) string {
		if m.Replace != nil && m.Replace.Version != "" {
			return m.Replace.Version
		}
		if m.Version == "(devel)" {
			return ""
		}
		return m.Version
	}
	if info.Main.Path == module {
		return version(&info.Main)
	}
	for _, dep := range info.Deps {
		if dep.Path == module {
			return version(dep)
		}
	}
	return ""
})
