package worker

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/worker/registry"
)

// extendBatch bounds one Extend statement.
const extendBatch = 5000

// heartbeat says on every beat that this worker is alive (its row in
// hopper_workers), hands back the jobs of workers gone meanwhile, and on
// every ExtendInterval extends the leases of every claim held and
// abandons handlers that outlived their hard deadline. A claim the
// database no longer has for us is lost: its handler is cancelled. With
// ExtendInterval negative (tests of lease expiry) it only beats.
type heartbeat struct {
	held        *heldJobs
	inFlight    interface{ Running() []*heldJob }                            // the executor's running handlers, for the stuck watch
	beatWorker  func(ctx context.Context, q *db.Queries) registry.BeatResult // registry.Registry.Beat
	releaseGone func(ctx context.Context, liveFor time.Duration)             // releaser.Releaser.ReleaseGone
	guard       *readOnlyGuard
	// pool gives the heartbeat a connection of its own (ownConn); q and
	// dbtx run on the pool when it has none.
	pool        *pgxpool.Pool
	q           *db.Queries
	dbtx        func(db.DBTX) db.DBTX
	log         *slog.Logger
	beatEvery   time.Duration // Config.BeatInterval: how often the heartbeat runs
	extendEvery time.Duration // Config.ExtendInterval; <= 0: leases are never extended
	lease       time.Duration // Config.LeaseDuration
	beats       atomic.Int64  // heartbeats done, for tests that must see one pass
}

func newHeartbeat(held *heldJobs, inFlight interface{ Running() []*heldJob }, beatWorker func(context.Context, *db.Queries) registry.BeatResult,
	releaseGone func(context.Context, time.Duration), guard *readOnlyGuard, pool *pgxpool.Pool, dbtx func(db.DBTX) db.DBTX, cfg *Config) *heartbeat {
	return &heartbeat{held: held, inFlight: inFlight, beatWorker: beatWorker, releaseGone: releaseGone, guard: guard,
		pool: pool, q: held.q, dbtx: dbtx, log: held.log,
		beatEvery: cfg.BeatInterval, extendEvery: cfg.ExtendInterval, lease: cfg.LeaseDuration}
}

func (h *heartbeat) Run(ctx context.Context) {
	tick := h.beatEvery
	if h.extendEvery > 0 {
		tick = min(tick, h.extendEvery)
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
		var beat registry.BeatResult
		if due(lastBeat, h.beatEvery) {
			lastBeat = time.Now()
			// First, and bounded (beatTimeout): one row, so that the
			// worker's liveness does not wait on a large extension.
			beat = h.beatWorker(ctx, q)
			if h.guard.check(beat.Err) {
				own.release() // the pool's reset closes it only once released
			}
			if beat.GoneWaiting {
				h.releaseGone(ctx, beat.LiveFor)
			}
		}
		// A worker taken to be gone checks its claims at once: their
		// handlers are cancelled, their results would be refused.
		if beat.Released || h.extendEvery > 0 && due(lastExtend, h.extendEvery) {
			lastExtend = time.Now()
			h.abandonStuck(lastExtend)
			// With extension off, a released worker's check moves no lease
			// (an extension to now() leaves every live lease as it is).
			lease := h.lease
			if h.extendEvery <= 0 {
				lease = 0
			}
			if err := h.extendAll(ctx, q, lease); h.guard.check(err) {
				own.release()
			}
			h.beats.Add(1)
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
func (o *ownConn) queries(ctx context.Context, h *heartbeat) *db.Queries {
	if o.conn == nil && h.pool != nil {
		actx, cancel := context.WithTimeout(ctx, h.beatEvery)
		o.conn, _ = h.pool.Acquire(actx)
		cancel()
	}
	if o.conn == nil {
		return h.q
	}
	return db.New(h.dbtx(o.conn))
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
// now, in bounded batches, and settles the claims found lost. It returns
// the error that stopped it, logged.
func (h *heartbeat) extendAll(ctx context.Context, q *db.Queries, lease time.Duration) error {
	held := h.held.snapshot()
	for start := 0; start < len(held); start += extendBatch {
		chunk := held[start:min(start+extendBatch, len(held))]
		if _, err := h.held.extendOn(ctx, q, chunk, lease); err != nil {
			if ctx.Err() == nil {
				h.log.Warn("heartbeat failed; retrying at the next beat", "error", err)
			}
			return err
		}
	}
	return nil
}

// abandonStuck gives up on handlers still running past their deadline:
// their timeout plus AbandonAfter, or AbandonAfter after they were told to
// stop (lease lost, job cancelled). They ignore their cancelled context.
// A held job is no longer extended (it runs again elsewhere after the
// lease); every such handler's slot goes back to the queue.
func (h *heartbeat) abandonStuck(now time.Time) {
	for _, c := range h.inFlight.Running() {
		due, ranFor := c.overdue(now)
		if !due {
			continue
		}
		attrs := []any{"job_id", c.id, "kind", c.kind, "queue", c.queue.Name(), "attempt", c.attempt, "running_for", ranFor.Round(time.Millisecond)}
		switch {
		case c.abandon():
			h.log.Error("handler ignores its cancelled context past its timeout: abandoned; its job runs again after the lease expires", attrs...)
		case c.giveUp():
			h.log.Error("handler ignores its cancelled context after its job was taken from it: abandoned, its slot freed", attrs...)
		}
	}
}
