// Package heartbeat keeps a running worker's word to the database, on a
// connection of its own. It has two rhythms, which the docs name apart:
// the worker's beat (every BeatInterval: its row in hopper_workers, and the
// jobs of workers gone meanwhile handed back), and the lease extension of
// the claims it holds (every ExtendInterval, in batches), which also
// abandons handlers past their hard deadline.
package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/db"
)

// extendBatch bounds one Extend statement.
const extendBatch = 5000

// BeatResult is what one beat learnt (the registry's answer, converted by
// the worker's wiring: the fields are the registry's own).
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

// Handler is a running handler of the worker's (its executor's in-flight
// set), as the watch for stuck handlers sees it.
type Handler interface {
	// Overdue reports whether the handler should have returned by now:
	// its hard deadline passed. ranFor is how long it has run.
	Overdue(now time.Time) (due bool, ranFor time.Duration)
	// Abandon gives up on a handler whose claim the worker still holds:
	// its lease is no longer extended and its slot is freed. False when
	// the claim no longer runs (lost, cancelled, finished).
	Abandon() bool
	// GiveUp stops waiting for a handler whose claim was taken from it:
	// its slot is freed. False when it returned or was given up on before.
	GiveUp() bool
	// LogAttrs names the handler's job in the log (job_id, kind, queue,
	// attempt).
	LogAttrs() []any
}

// Config is what a Heartbeat works with.
type Config struct {
	// Pool gives the heartbeat a connection of its own, held for the
	// worker's life, and DBTX scopes what runs on it to the worker's
	// schema; nil Pool: it runs on Queries only (DBTX is then unused).
	Pool    *pgxpool.Pool
	DBTX    func(db.DBTX) db.DBTX
	Queries *db.Queries
	// Log is the worker's logger: a failed extension warns on it with the
	// error as "error"; an abandoned handler is an error.
	Log *slog.Logger
	// Beat refreshes the worker's row in hopper_workers on q
	// (registry.Registry.Beat), bounded by its own timeout.
	Beat func(ctx context.Context, q *db.Queries) BeatResult
	// ReleaseGone hands back the jobs of the gone workers whose stale
	// window liveFor covers (releaser.Releaser.ReleaseGone).
	ReleaseGone func(ctx context.Context, liveFor time.Duration)
	// ReadOnly reports whether err is a read-only server's refusal (and
	// then replaces the pool's sessions): the heartbeat then drops its
	// connection, which the pool's reset closes only once released.
	ReadOnly func(err error) bool
	// Extend extends the lease of every claim held to at least lease from
	// now, on q, and settles the claims found lost; it returns the error
	// that stopped it. InBatches makes one from the held claims.
	Extend func(ctx context.Context, q *db.Queries, lease time.Duration) error
	// Running lists the handlers running now, for the stuck watch.
	Running func() []Handler
	// BeatInterval is how often the worker beats; ExtendInterval how often
	// the leases of the claims held are extended (<= 0: never, in tests of
	// lease expiry; the heartbeat then only beats); LeaseDuration is how
	// long each extension makes a lease.
	BeatInterval, ExtendInterval, LeaseDuration time.Duration
}

func (c *Config) validate() error {
	switch {
	case c.Queries == nil, c.Log == nil:
		return errors.New("heartbeat: Queries and Log are required")
	case c.Pool != nil && c.DBTX == nil:
		return errors.New("heartbeat: DBTX is required with a Pool")
	case c.Beat == nil, c.ReleaseGone == nil, c.ReadOnly == nil, c.Extend == nil, c.Running == nil:
		return errors.New("heartbeat: Beat, ReleaseGone, ReadOnly, Extend and Running are required")
	case c.BeatInterval <= 0 || c.LeaseDuration <= 0:
		return fmt.Errorf("heartbeat: BeatInterval (%v) and LeaseDuration (%v) must be positive", c.BeatInterval, c.LeaseDuration)
	}
	return nil
}

// Heartbeat says on every beat that this worker is alive (its row in
// hopper_workers), hands back the jobs of workers gone meanwhile, and on
// every ExtendInterval extends the leases of every claim held and abandons
// handlers that outlived their hard deadline. A claim the database no
// longer has for us is lost (Config.Extend settles it): its handler is
// cancelled. With ExtendInterval <= 0 it only beats.
type Heartbeat struct {
	cfg        Config
	extensions atomic.Int64 // lease extensions done, for tests that must see one pass
}

// New returns a Heartbeat working with cfg.
func New(cfg Config) (*Heartbeat, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Heartbeat{cfg: cfg}, nil
}

// Extensions is how many times the heartbeat extended the held claims'
// leases (or checked them, after the worker was taken to be gone).
func (h *Heartbeat) Extensions() int64 { return h.extensions.Load() }

// Run beats and extends until ctx ends.
func (h *Heartbeat) Run(ctx context.Context) {
	tick := h.cfg.BeatInterval
	if h.cfg.ExtendInterval > 0 {
		tick = min(tick, h.cfg.ExtendInterval)
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	var own ownConn
	defer own.release()
	// A duty is due when less than half a tick is left before its time.
	lastBeat, lastExtend := time.Now(), time.Now()
	due := func(last time.Time, every time.Duration) bool { return time.Since(last) >= every-tick/2 }
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		q := own.queries(ctx, h)
		var beat BeatResult
		if due(lastBeat, h.cfg.BeatInterval) {
			lastBeat = time.Now()
			// First, and bounded (the registry's beat timeout): one row, so
			// that the worker's liveness does not wait on a large extension.
			beat = h.cfg.Beat(ctx, q)
			if h.cfg.ReadOnly(beat.Err) {
				own.release() // the pool's reset closes it only once released
			}
			if beat.GoneWaiting {
				h.cfg.ReleaseGone(ctx, beat.LiveFor)
			}
		}
		// A worker taken to be gone checks its claims at once: their
		// handlers are cancelled, their results would be refused.
		if beat.Released || h.cfg.ExtendInterval > 0 && due(lastExtend, h.cfg.ExtendInterval) {
			lastExtend = time.Now()
			h.abandonStuck(lastExtend)
			// With extension off, a released worker's check moves no lease
			// (an extension to now() leaves every live lease as it is).
			lease := h.cfg.LeaseDuration
			if h.cfg.ExtendInterval <= 0 {
				lease = 0
			}
			if err := h.extendAll(ctx, q, lease); h.cfg.ReadOnly(err) {
				own.release()
			}
			h.extensions.Add(1)
		}
		own.check()
	}
}

// ownConn is the heartbeat's own pool connection, held for the worker's
// life: a beat that waited for a connection behind busy handlers would
// make a live worker look gone, and its jobs run twice. Should it not be
// had or break, the heartbeat uses the pool until the next tick tries
// again.
type ownConn struct {
	conn *pgxpool.Conn
}

// queries runs on the heartbeat's connection, acquiring it if needed.
func (o *ownConn) queries(ctx context.Context, h *Heartbeat) *db.Queries {
	if o.conn == nil && h.cfg.Pool != nil {
		actx, cancel := context.WithTimeout(ctx, h.cfg.BeatInterval)
		o.conn, _ = h.cfg.Pool.Acquire(actx)
		cancel()
	}
	if o.conn == nil {
		return h.cfg.Queries
	}
	return db.New(h.cfg.DBTX(o.conn))
}

// check drops a connection that broke, for the next tick to replace.
func (o *ownConn) check() {
	if o.conn != nil && o.conn.Conn().IsClosed() {
		o.release()
	}
}

func (o *ownConn) release() {
	if o.conn != nil {
		o.conn.Release()
		o.conn = nil
	}
}

// extendAll extends the lease of every claim held to at least lease from
// now and settles the claims found lost (Config.Extend). It returns the
// error that stopped it, logged. A failed extension settles nothing,
// whether the server refused it or its commit's outcome is unknown (a
// lost reply, a commit Citus could not see through): an extension never
// shortens a lease, so it is simply sent again at the next extension.
func (h *Heartbeat) extendAll(ctx context.Context, q *db.Queries, lease time.Duration) error {
	err := h.cfg.Extend(ctx, q, lease)
	if err != nil && ctx.Err() == nil {
		h.cfg.Log.Warn("extending the leases of the jobs held failed; retrying at the next extension", "error", err)
	}
	return err
}

// InBatches makes a Config.Extend from the worker's held claims: claims
// lists those held now, and extend extends the leases of some of them on q
// (and settles those found lost). The claims are extended in batches of
// at most extendBatch, each one statement; the first error stops it.
func InBatches[C any](claims func() []C, extend func(ctx context.Context, q *db.Queries, batch []C, lease time.Duration) (int, error)) func(context.Context, *db.Queries, time.Duration) error {
	return func(ctx context.Context, q *db.Queries, lease time.Duration) error {
		held := claims()
		for start := 0; start < len(held); start += extendBatch {
			if _, err := extend(ctx, q, held[start:min(start+extendBatch, len(held))], lease); err != nil {
				return err
			}
		}
		return nil
	}
}

// abandonStuck gives up on handlers still running past their deadline:
// their timeout plus AbandonAfter, or AbandonAfter after they were told to
// stop (lease lost, job cancelled). They ignore their cancelled context.
// A held job's lease is no longer extended (it runs again elsewhere after
// the lease); every such handler's slot goes back to the queue.
func (h *Heartbeat) abandonStuck(now time.Time) {
	for _, c := range h.cfg.Running() {
		due, ranFor := c.Overdue(now)
		if !due {
			continue
		}
		attrs := append(c.LogAttrs(), "running_for", ranFor.Round(time.Millisecond))
		switch {
		case c.Abandon():
			h.cfg.Log.Error("handler ignores its cancelled context past its timeout: abandoned; its job runs again after the lease expires", attrs...)
		case c.GiveUp():
			h.cfg.Log.Error("handler ignores its cancelled context after its job was taken from it: abandoned, its slot freed", attrs...)
		}
	}
}
