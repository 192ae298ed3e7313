// Package registry keeps a worker's row in hopper_workers: written at
// start, refreshed by each beat, deleted at a clean stop.
package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/buildinfo"
	"github.com/hopperq/hopper/internal/migrated"
	"github.com/hopperq/hopper/internal/worker/loop"
)

// Config is what a Registry works with.
type Config struct {
	Queries *db.Queries
	// Log is the worker's logger: a failed beat warns on it with the
	// error as "error".
	Log *slog.Logger
	// ID is the worker's (Config.ID); Schema where hopper_jobs lives;
	// Queues the queues it serves, sorted (none when it only fires
	// schedules).
	ID     string
	Schema string
	Queues []string
	// BeatInterval and LeaseDuration are the worker's.
	BeatInterval, LeaseDuration time.Duration
	// MigrateUp is what to run to migrate the schema, for errors.
	MigrateUp string
	// IDInUse is the sentinel a start refused for an ID held by another
	// live worker wraps (worker.ErrWorkerIDInUse).
	IDInUse error
	// Identity is the host name and pid recorded in the row (nil: the
	// process's own); tests make two processes look alike with it.
	Identity func() (host string, pid int)
}

func (c *Config) validate() error {
	switch {
	case c.Queries == nil, c.Log == nil, c.IDInUse == nil:
		return errors.New("registry: Queries, Log and IDInUse are required")
	case c.ID == "" || c.Schema == "":
		return errors.New("registry: ID and Schema are required")
	case c.BeatInterval <= 0 || c.LeaseDuration <= 0:
		return fmt.Errorf("registry: BeatInterval (%v) and LeaseDuration (%v) must be positive", c.BeatInterval, c.LeaseDuration)
	}
	return nil
}

// The worker registry (hopper_workers): every running worker is a row,
// written at start, refreshed by each beat and deleted at a clean
// stop. A worker is live while its last beat is younger than
// staleBeats beats; a gone worker's jobs are handed back by the next
// beat of any live worker (internal/worker/releaser), and its row is
// pruned a day later (internal/worker/pruner). The clients list the
// workers (hopper.Client.ListWorkers) and count the live ones serving each
// queue (hopper.QueueInfo.Workers).
const (
	// staleBeats is how many beats a worker may miss before it is
	// taken to be gone: one late or failed beat does not make it so.
	staleBeats = 3
	// removeTimeout bounds the removal of the row at a clean stop:
	// should it fail, the row goes stale by itself.
	removeTimeout = 5 * time.Second
)

// Registry keeps this worker's row in hopper_workers: it writes it at
// start (Register), refreshes it on every beat (Beat) and deletes it
// at a clean stop (Remove).
//
// Invariant: startedAt, under mu, is zero until the row was first written,
// then the start the database recorded, which every rewrite keeps: it,
// not the host and pid, tells this run's row from another's.
type Registry struct {
	cfg Config
	// claimed: this worker holds its ID in idsInUse (ClaimID, Run's
	// goroutine only).
	claimed bool

	mu        sync.Mutex
	startedAt time.Time // as the database recorded it; zero until registered

	// liveSince is when the current run of beats that went through on
	// time began (zero after a failed beat): the worker judges others gone
	// only once it has been live for their whole stale window. Written by
	// Register, then by Beat only (the heartbeat's goroutine, started
	// after Register).
	liveSince time.Time
}

// New returns a Registry working with cfg.
func New(cfg Config) (*Registry, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Identity == nil {
		cfg.Identity = processIdentity
	}
	return &Registry{cfg: cfg}, nil
}

// processIdentity is the host name and pid a worker records in its row,
// for operators only: containers run as pid 1 and may share a host name,
// so they tell no process from another.
func processIdentity() (host string, pid int) {
	host, _ = os.Hostname()
	return host, os.Getpid()
}

// Schema is where hopper_jobs lives, as the Registry was given it.
func (r *Registry) Schema() string { return r.cfg.Schema }

// Queues are the queues the worker serves, as the Registry was given them.
func (r *Registry) Queues() []string { return r.cfg.Queues }

// beatInterval is how often the worker refreshes its row: every
// BeatInterval.
func (r *Registry) beatInterval() time.Duration { return r.cfg.BeatInterval }

// staleAfter is how long after its last beat the worker is taken to be
// gone.
func (r *Registry) staleAfter() time.Duration { return staleBeats * r.beatInterval() }

// idsInUse are the (schema, ID) pairs of the Workers running in this
// process: a second Worker with one of them is refused at once, rather
// than after waiting out the first's stale window as the database would.
var idsInUse = struct {
	sync.Mutex
	m map[[2]string]bool
}{m: map[[2]string]bool{}}

// ClaimID takes the worker's ID for this process, or refuses it.
func (r *Registry) ClaimID() error {
	idsInUse.Lock()
	defer idsInUse.Unlock()
	key := [2]string{r.cfg.Schema, r.cfg.ID}
	if idsInUse.m[key] {
		return fmt.Errorf("worker: start: %w: %s is held by another Worker running in this process; give each worker its own ID, or leave ID empty",
			r.cfg.IDInUse, r.cfg.ID)
	}
	idsInUse.m[key] = true
	r.claimed = true
	return nil
}

// FreeID gives the worker's ID back at the end of Run.
func (r *Registry) FreeID() {
	if !r.claimed {
		return
	}
	idsInUse.Lock()
	delete(idsInUse.m, [2]string{r.cfg.Schema, r.cfg.ID})
	idsInUse.Unlock()
}

// Register writes the worker's row at start. An ID held by a worker that
// still beats is waited for: a crashed predecessor's row goes stale within
// its stale window, and a live holder beats meanwhile, which refuses the
// start with r.cfg.IDInUse. It reports whether an earlier holder's row
// was taken over, whose jobs the caller hands back.
func (r *Registry) Register(ctx context.Context) (tookOver bool, err error) {
	var seen time.Time // the holder's last beat when first found live
	for {
		took, taken, err := r.write(ctx)
		if err != nil || taken {
			if taken {
				r.liveSince = time.Now()
			}
			return took, err
		}
		holders, err := r.cfg.Queries.ListWorkers(ctx, &r.cfg.ID)
		if err != nil {
			return false, fmt.Errorf("worker: start: read the worker holding ID %s: %w", r.cfg.ID, err)
		}
		if len(holders) == 0 {
			continue // it stopped meanwhile: write again
		}
		h := holders[0]
		if !seen.IsZero() && h.LastSeenAt.After(seen) {
			return false, fmt.Errorf("worker: start: %w: %s is held by the worker on host %s with pid %d, which beat %v ago; give each worker its own ID, or leave ID empty",
				r.cfg.IDInUse, r.cfg.ID, h.Host, h.Pid, h.ReadAt.Sub(h.LastSeenAt).Round(time.Millisecond))
		}
		if seen.IsZero() {
			seen = h.LastSeenAt
			r.cfg.Log.Info("worker ID held by another worker: waiting to see whether it still beats",
				"holder_host", h.Host, "holder_pid", h.Pid, "last_beat", h.LastSeenAt)
		}
		// Until the holder's stale window ends, and at least one of its
		// beats: a live holder shows a new beat by then.
		wait := max(h.LastSeenAt.Add(time.Duration(h.StaleAfterMs)*time.Millisecond).Sub(h.ReadAt), 0) + 10*time.Millisecond
		if !loop.Sleep(ctx, min(wait, time.Duration(h.StaleAfterMs)*time.Millisecond)) {
			return false, ctx.Err()
		}
	}
}

// write writes the worker's row: at start (startedAt zero: now), and again
// should its row be gone while it runs (its own startedAt kept). taken is
// false when a live worker holds the ID.
func (r *Registry) write(ctx context.Context) (tookOver, taken bool, err error) {
	host, pid := r.cfg.Identity()
	p := db.RegisterWorkerParams{
		ID: r.cfg.ID, Host: host, Pid: int32(pid), HopperVersion: buildinfo.Version(),
		Queues: r.cfg.Queues, StaleAfterMs: r.staleAfter().Milliseconds(),
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.startedAt.IsZero() {
		p.StartedAt = &r.startedAt
	}
	row, err := r.cfg.Queries.RegisterWorker(ctx, p)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, false, nil
	}
	if err != nil {
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedTable:
			return false, false, migrated.Errorf(r.cfg.MigrateUp, "schema %s lacks hopper_workers, which migration %s adds", r.cfg.Schema, migrated.Migration(10))
		case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedColumn:
			return false, false, migrated.Errorf(r.cfg.MigrateUp, "schema %s lacks hopper_workers.released_at, which migration %s adds", r.cfg.Schema, migrated.Migration(11))
		case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InsufficientPrivilege:
			return false, false, fmt.Errorf("worker: start: register the worker in hopper_workers: %w (grant SELECT, INSERT, UPDATE, DELETE ON hopper_workers to the role workers connect as)", err)
		}
		return false, false, fmt.Errorf("worker: start: register the worker: %w", err)
	}
	r.startedAt = row.StartedAt
	return row.TookOver, true, nil
}

// beatTimeout bounds a beat: half a beat, at least a second (one row, but
// on a busy server), and at most a quarter of the lease, since the lease
// extensions of the same heartbeat (internal/worker/heartbeat) wait for it.
func (r *Registry) beatTimeout() time.Duration {
	return min(max(r.beatInterval()/2, time.Second), r.cfg.LeaseDuration/4)
}

// BeatResult is what one beat learnt.
type BeatResult struct {
	// Released: this worker had been taken to be gone, and its jobs were
	// handed to others; the heartbeat checks its claims at once.
	Released bool
	// GoneWaiting: another worker is gone and still holds jobs.
	GoneWaiting bool
	// LiveFor is how long this worker had been live when it sent the beat:
	// it releases only the gone workers whose stale window that covers.
	LiveFor time.Duration
	// Err is why the beat failed, if it did.
	Err error
}

// Started is the start the database recorded for this run; zero until the
// row was first written.
func (r *Registry) Started() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.startedAt
}

// Beat refreshes the worker's row, and writes it again if it is gone.
// Failures are logged; the next beat tries again.
func (r *Registry) Beat(ctx context.Context, q *db.Queries) BeatResult {
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
			r.cfg.Log.Error("another worker now holds this worker's ID: two live workers share it; give each its own ID", "id", r.cfg.ID)
		} else if err == nil {
			r.cfg.Log.Info("this worker's row in hopper_workers was gone; wrote it again")
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			r.cfg.Log.Warn("refreshing this worker's row in hopper_workers failed; retrying at the next beat", "error", err)
		}
		return BeatResult{Err: err}
	}
	if row.Released {
		r.cfg.Log.Error("this worker missed its beats and was taken to be gone: the jobs it held were handed to other workers, and its results for them will be refused",
			"stale_after", r.staleAfter())
	}
	return BeatResult{Released: row.Released, GoneWaiting: row.GoneWaiting, LiveFor: liveFor}
}

// Remove deletes the worker's own row at a clean stop (ctx: the
// shutdown's hard deadline), or when Run fails after start.
func (r *Registry) Remove(ctx context.Context) {
	r.mu.Lock()
	started := r.startedAt
	r.mu.Unlock()
	if started.IsZero() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, removeTimeout)
	defer cancel()
	if _, err := r.cfg.Queries.RemoveWorker(ctx, db.RemoveWorkerParams{ID: r.cfg.ID, StartedAt: started}); err != nil {
		r.cfg.Log.Warn("removing this worker's row from hopper_workers failed; it goes stale by itself", "error", err)
	}
}

// CheckBeat warns when the stale window (three beats) reaches the lease:
// a crashed worker's jobs are then handed back by their leases' expiry,
// not by the registry, and recovery is as slow as the lease. A program
// that kept the old HeartbeatInterval (then the lease extension, a third
// of the lease) as BeatInterval does exactly that.
func (r *Registry) CheckBeat() {
	stale := r.staleAfter()
	if stale < r.cfg.LeaseDuration {
		return
	}
	r.cfg.Log.Warn("BeatInterval makes crash recovery as slow as the lease: a crashed worker is taken to be gone after three missed beats",
		"beat_interval", r.cfg.BeatInterval, "gone_after", stale, "lease_duration", r.cfg.LeaseDuration,
		"hint", "BeatInterval is the registry's beat (default 1s); leases are extended every ExtendInterval (the old HeartbeatInterval)")
}
