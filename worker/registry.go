package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/buildinfo"
	"github.com/hopperq/hopper/internal/migrated"
)

// The worker registry (hopper_workers): every running worker is a row,
// written at start, refreshed by each heartbeat and deleted at a clean
// stop. A worker is live while its last beat is younger than
// workerStaleBeats beats; a gone worker's jobs are handed back by the next
// beat of any live worker (releaser.Releaser.ReleaseGone), and its row is
// pruned a day later (internal/worker/pruner). The clients list the
// workers (hopper.Client.ListWorkers) and count the live ones serving each
// queue (hopper.QueueInfo.Workers).
const (
	// workerStaleBeats is how many beats a worker may miss before it is
	// taken to be gone: one late or failed beat does not make it so.
	workerStaleBeats = 3
	// workerRemoveTimeout bounds the removal of the row at a clean stop:
	// should it fail, the row goes stale by itself.
	workerRemoveTimeout = 5 * time.Second
)

// registry keeps this worker's row in hopper_workers: it writes it at
// start (register), refreshes it on every heartbeat (beat) and deletes it
// at a clean stop (remove).
//
// Invariant: startedAt, under mu, is zero until the row was first written,
// then the start the database recorded, which every rewrite keeps: it,
// not the host and pid, tells this run's row from another's.
type registry struct {
	q   *db.Queries
	log *slog.Logger
	cfg *Config // ID, Schema, BeatInterval, LeaseDuration
	// queues: the queues the worker serves; schema: where hopper_jobs
	// lives (errors).
	queues []string
	schema string
	// claimed: this worker holds its ID in idsInUse (claimID, Run's
	// goroutine only).
	claimed bool

	mu        sync.Mutex
	startedAt time.Time // as the database recorded it; zero until registered

	// liveSince is when the current run of beats that went through on
	// time began (zero after a failed beat): the worker judges others gone
	// only once it has been live for their whole stale window. Written by
	// register, then by beat only (the heartbeat's goroutine, started
	// after register).
	liveSince time.Time
}

// processIdentity is the host name and pid a worker records in its row,
// for operators only: containers run as pid 1 and may share a host name,
// so they tell no process from another. Tests make two processes look
// alike with it.
var processIdentity = func() (host string, pid int) {
	host, _ = os.Hostname()
	return host, os.Getpid()
}

func newRegistry(q *db.Queries, log *slog.Logger, cfg *Config, schema string, queues []string) *registry {
	return &registry{q: q, log: log, cfg: cfg, schema: schema, queues: queues}
}

// beatInterval is how often the worker refreshes its row: every
// BeatInterval.
func (r *registry) beatInterval() time.Duration { return r.cfg.BeatInterval }

// staleAfter is how long after its last beat the worker is taken to be
// gone.
func (r *registry) staleAfter() time.Duration { return workerStaleBeats * r.beatInterval() }

// servedQueues lists the queues a worker claims from, sorted; none when
// it only fires schedules.
func servedQueues(handlers *handlerTable, queues map[string]int) []string {
	names := []string{}
	if handlers.empty() {
		return names
	}
	for name := range queues {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// idsInUse are the (schema, ID) pairs of the Workers running in this
// process: a second Worker with one of them is refused at once, rather
// than after waiting out the first's stale window as the database would.
var idsInUse = struct {
	sync.Mutex
	m map[[2]string]bool
}{m: map[[2]string]bool{}}

// claimID takes the worker's ID for this process, or refuses it.
func (r *registry) claimID() error {
	idsInUse.Lock()
	defer idsInUse.Unlock()
	key := [2]string{r.schema, r.cfg.ID}
	if idsInUse.m[key] {
		return fmt.Errorf("worker: start: %w: %s is held by another Worker running in this process; give each worker its own ID, or leave ID empty",
			ErrWorkerIDInUse, r.cfg.ID)
	}
	idsInUse.m[key] = true
	r.claimed = true
	return nil
}

// freeID gives the worker's ID back at the end of Run.
func (r *registry) freeID() {
	if !r.claimed {
		return
	}
	idsInUse.Lock()
	delete(idsInUse.m, [2]string{r.schema, r.cfg.ID})
	idsInUse.Unlock()
}

// register writes the worker's row at start. An ID held by a worker that
// still beats is waited for: a crashed predecessor's row goes stale within
// its stale window, and a live holder beats meanwhile, which refuses the
// start with ErrWorkerIDInUse. It reports whether an earlier holder's row
// was taken over, whose jobs the caller hands back.
func (r *registry) register(ctx context.Context) (tookOver bool, err error) {
	var seen time.Time // the holder's last beat when first found live
	for {
		took, taken, err := r.write(ctx)
		if err != nil || taken {
			if taken {
				r.liveSince = time.Now()
			}
			return took, err
		}
		holders, err := r.q.ListWorkers(ctx, &r.cfg.ID)
		if err != nil {
			return false, fmt.Errorf("worker: start: read the worker holding ID %s: %w", r.cfg.ID, err)
		}
		if len(holders) == 0 {
			continue // it stopped meanwhile: write again
		}
		h := holders[0]
		if !seen.IsZero() && h.LastSeenAt.After(seen) {
			return false, fmt.Errorf("worker: start: %w: %s is held by the worker on host %s with pid %d, which beat %v ago; give each worker its own ID, or leave ID empty",
				ErrWorkerIDInUse, r.cfg.ID, h.Host, h.Pid, h.ReadAt.Sub(h.LastSeenAt).Round(time.Millisecond))
		}
		if seen.IsZero() {
			seen = h.LastSeenAt
			r.log.Info("worker ID held by another worker: waiting to see whether it still beats",
				"holder_host", h.Host, "holder_pid", h.Pid, "last_beat", h.LastSeenAt)
		}
		// Until the holder's stale window ends, and at least one of its
		// beats: a live holder shows a new beat by then.
		wait := max(h.LastSeenAt.Add(time.Duration(h.StaleAfterMs)*time.Millisecond).Sub(h.ReadAt), 0) + 10*time.Millisecond
		if !sleep(ctx, min(wait, time.Duration(h.StaleAfterMs)*time.Millisecond)) {
			return false, ctx.Err()
		}
	}
}

// write writes the worker's row: at start (startedAt zero: now), and again
// should its row be gone while it runs (its own startedAt kept). taken is
// false when a live worker holds the ID.
func (r *registry) write(ctx context.Context) (tookOver, taken bool, err error) {
	host, pid := processIdentity()
	p := db.RegisterWorkerParams{
		ID: r.cfg.ID, Host: host, Pid: int32(pid), HopperVersion: buildinfo.Version(),
		Queues: r.queues, StaleAfterMs: r.staleAfter().Milliseconds(),
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.startedAt.IsZero() {
		p.StartedAt = &r.startedAt
	}
	row, err := r.q.RegisterWorker(ctx, p)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, false, nil
	}
	if err != nil {
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "42P01": // undefined_table
			return false, false, migrated.Errorf(migrated.Run(r.cfg.Schema), "schema %s lacks hopper_workers, which migration %s adds", r.schema, migrated.Migration(10))
		case errors.As(err, &pgErr) && pgErr.Code == "42703": // undefined_column
			return false, false, migrated.Errorf(migrated.Run(r.cfg.Schema), "schema %s lacks hopper_workers.released_at, which migration %s adds", r.schema, migrated.Migration(11))
		case errors.As(err, &pgErr) && pgErr.Code == "42501": // insufficient_privilege
			return false, false, fmt.Errorf("worker: start: register the worker in hopper_workers: %w (grant SELECT, INSERT, UPDATE, DELETE ON hopper_workers to the role workers connect as)", err)
		}
		return false, false, fmt.Errorf("worker: start: register the worker: %w", err)
	}
	r.startedAt = row.StartedAt
	return row.TookOver, true, nil
}

// beatTimeout bounds a beat: half a beat, at least a second (one row, but
// on a busy server), and at most a quarter of the lease, since the lease
// extensions of the same heartbeat wait for it.
func (r *registry) beatTimeout() time.Duration {
	return min(max(r.beatInterval()/2, time.Second), r.cfg.LeaseDuration/4)
}

// beatResult is what one beat learnt.
type beatResult struct {
	// released: this worker had been taken to be gone, and its jobs were
	// handed to others; the heartbeat checks its claims at once.
	released bool
	// goneWaiting: another worker is gone and still holds jobs.
	goneWaiting bool
	// liveFor is how long this worker had been live when it sent the beat:
	// it releases only the gone workers whose stale window that covers.
	liveFor time.Duration
	// err is why the beat failed, if it did.
	err error
}

// started is the start the database recorded for this run; zero until the
// row was first written.
func (r *registry) started() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.startedAt
}

// beat refreshes the worker's row, and writes it again if it is gone.
// Failures are logged; the next beat tries again.
func (r *registry) beat(ctx context.Context, q *db.Queries) beatResult {
	bctx, cancel := context.WithTimeout(ctx, r.beatTimeout())
	defer cancel()
	r.mu.Lock()
	started := r.startedAt
	r.mu.Unlock()
	// A worker judges others only when its previous beat was on time, and
	// only those whose stale window it has been live for since its last
	// failed or late beat: after a database restart every row is stale,
	// and a peer whose first beat failed still has its window to beat.
	onTime := 2*r.beatInterval() + r.beatTimeout()
	var liveFor time.Duration
	if !r.liveSince.IsZero() {
		liveFor = time.Since(r.liveSince)
	}
	liveForMs := liveFor.Milliseconds()
	row, err := q.BeatWorker(bctx, db.BeatWorkerParams{ID: r.cfg.ID, StartedAt: started, OnTimeMs: onTime.Milliseconds(), LiveForMs: &liveForMs})
	switch {
	case err != nil:
		r.liveSince = time.Time{}
	case !row.OnTime || r.liveSince.IsZero():
		// Live again from this beat on (a beat of a lost row is not on
		// time: it had no previous beat).
		r.liveSince = time.Now()
	}
	if err == nil && !row.Found {
		var taken bool
		if _, taken, err = r.write(bctx); err == nil && !taken {
			r.log.Error("another worker now holds this worker's ID: two live workers share it; give each its own ID", "id", r.cfg.ID)
		} else if err == nil {
			r.log.Info("this worker's row in hopper_workers was gone; wrote it again")
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("refreshing this worker's row in hopper_workers failed; retrying at the next beat", "error", err)
		}
		return beatResult{err: err}
	}
	if row.Released {
		r.log.Error("this worker missed its beats and was taken to be gone: the jobs it held were handed to other workers, and its results for them will be refused",
			"stale_after", r.staleAfter())
	}
	return beatResult{released: row.Released, goneWaiting: row.GoneWaiting, liveFor: liveFor}
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

// checkBeat warns when the stale window (three beats) reaches the lease:
// a crashed worker's jobs are then handed back by their leases' expiry,
// not by the registry, and recovery is as slow as the lease. A program
// that kept the old HeartbeatInterval (then the lease extension, a third
// of the lease) as BeatInterval does exactly that.
func (r *registry) checkBeat() {
	stale := r.staleAfter()
	if stale < r.cfg.LeaseDuration {
		return
	}
	r.log.Warn("BeatInterval makes crash recovery as slow as the lease: a crashed worker is taken to be gone after three missed beats",
		"beat_interval", r.cfg.BeatInterval, "gone_after", stale, "lease_duration", r.cfg.LeaseDuration,
		"hint", "BeatInterval is the registry's beat (default 1s); leases are extended every ExtendInterval (the old HeartbeatInterval)")
}
