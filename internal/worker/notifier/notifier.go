// Package notifier carries wake-ups between workers: a LISTEN session of
// its own, kept up across reconnects and given up when it goes silent,
// wakes the queues a wake-up names and passes on cancel notices and
// schedule triggers.
package notifier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/silentpeer"
	"github.com/hopperq/hopper/internal/worker/loop"
)

// Waker is a queue's claim loop, as the notifier wakes it.
type Waker interface {
	// WakeAt: a job became ready at (priority, runAt, id) in claim order.
	// The queue's scan cursor moves back to it, and the queue looks for
	// work now.
	WakeAt(priority int16, runAt time.Time, id int64)
	// WakeFromStart: wake-ups may have been missed (or one named no
	// place). The queue's next claim scans from the start, and the queue
	// looks for work now.
	WakeFromStart()
}

// Metrics reports the listener's state.
type Metrics interface {
	// ListenerUp reports whether the LISTEN session is subscribed
	// (hopper_listener_up); it follows Config.Listening.
	ListenerUp(up bool)
}

// Timings bound how long the listener takes to notice a session that went
// silent without closing (a primary cut off by the network, a failover
// that leaves the old server's sockets open): it pings after PingAfter
// without a notification and gives the session up when the ping, or the
// LISTEN on a new session, takes longer than Timeout. A silent session is
// given up within PingAfter + Timeout; each host a reconnect tries gets
// the connection config's connect timeout.
type Timings struct {
	PingAfter time.Duration
	Timeout   time.Duration
}

// DefaultTimings notice a silent session within 15 s.
var DefaultTimings = Timings{PingAfter: 10 * time.Second, Timeout: 5 * time.Second}

// Config is what a Notifier works with.
type Config struct {
	// ConnConfig is the worker's pool's: the listener opens a session of
	// its own from a copy, never one of the pool's.
	ConnConfig *pgx.ConnConfig
	// Log is the worker's logger: a lost session warns on it with the
	// error as "error", which the worker's logger tells as an outage when
	// the connection was lost.
	Log *slog.Logger
	// Owner is the worker's ID: cancel notices for the claims it holds.
	Owner string
	// Schema is where hopper_jobs lives: wake-ups for another are ignored.
	Schema string
	// Wakers are the worker's queues by name; wake-ups for another queue
	// are ignored. None: the worker claims from no queue.
	Wakers map[string]Waker
	// Listening is shared with the queues, which read it; only the
	// Notifier writes it. It is true only while the subscription is live:
	// the queues' scan cursors may be trusted only then (a wake-up missed
	// while it is false may announce a job behind a cursor).
	Listening *atomic.Bool
	// OnCancel: an operator cancelled the held job (id, attempt).
	OnCancel func(id int64, attempt int32)
	// OnSchedule: the named schedule was triggered or resumed.
	OnSchedule func(name string)
	Timings    Timings // DefaultTimings but in tests
	Metrics    Metrics
}

func (c *Config) validate() error {
	switch {
	case c.ConnConfig == nil, c.Log == nil, c.Listening == nil, c.OnCancel == nil, c.OnSchedule == nil, c.Metrics == nil:
		return errors.New("notifier: ConnConfig, Log, Listening, OnCancel, OnSchedule and Metrics are required")
	case c.Owner == "" || c.Schema == "":
		return fmt.Errorf("notifier: Owner (%q) and Schema (%q) are required", c.Owner, c.Schema)
	case c.Timings.PingAfter <= 0 || c.Timings.Timeout <= 0:
		return fmt.Errorf("notifier: Timings.PingAfter (%v) and Timings.Timeout (%v) must be positive", c.Timings.PingAfter, c.Timings.Timeout)
	}
	for name, w := range c.Wakers {
		if w == nil {
			return fmt.Errorf("notifier: Wakers[%q] is nil", name)
		}
	}
	return nil
}

// Notifier carries wake-ups between workers: it LISTENs on a session of
// its own, wakes the queues and rewinds their cursors to the jobs
// announced, and passes on cancel notices and schedule triggers. (The jobs
// a worker makes ready other than by an insert are announced by
// internal/worker/announce, and reach every worker's Notifier, its own
// included.)
//
// Invariant: Config.Listening is true only while the subscription is
// live.
type Notifier struct {
	cfg        Config
	connConfig *pgx.ConnConfig // the listener's own session: cfg.ConnConfig, copied and adjusted
}

// New returns a Notifier working with cfg, whose Wakers it only reads from
// now on.
func New(cfg Config) (*Notifier, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cc := cfg.ConnConfig.Copy()
	// A dead server is noticed by TCP (keepalives, user timeout) within
	// silentpeer.Bound, a silent one by the ping.
	silentpeer.Apply(&cc.Config)
	// A wait for notifications that ends at PingAfter sets a deadline on
	// the socket, pgx's default; a pool configured to send a cancel
	// request instead would open a connection to the server every
	// PingAfter for nothing running.
	cc.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	return &Notifier{cfg: cfg, connConfig: cc}, nil
}

// Schema is where hopper_jobs lives, as the Notifier was given it.
func (n *Notifier) Schema() string { return n.cfg.Schema }

// Listening reports whether the subscription is live.
func (n *Notifier) Listening() bool { return n.cfg.Listening.Load() }

// Run keeps a session of its own subscribed to wake-ups, wakes the queue
// each one names and moves its claim cursor back to the job announced. A
// lost session is re-established with backoff; after every (re)connect all
// queues look for work from the start, since wake-ups sent meanwhile were
// missed. A session silent past a ping is given up like a broken one
// (Timings). Polling goes on regardless, so a broken LISTEN only costs
// latency; while it is broken, claims scan from the start.
func (n *Notifier) Run(ctx context.Context) {
	for failures := 0; ctx.Err() == nil; failures++ {
		if failures > 0 && !loop.Sleep(ctx, loop.RetryDelay(failures)) {
			return
		}
		// Each host's attempt is bounded by the config's connect timeout
		// (silentpeer sets one): a bound on the whole connect would spend
		// itself on the first of several hosts, a silent one.
		conn, err := pgx.ConnectConfig(ctx, n.connConfig)
		if err != nil {
			// A shutdown cancels a connect under way ("context canceled"):
			// nothing failed, and a worker stopped soon after it started
			// must not warn.
			if ctx.Err() == nil {
				n.cfg.Log.Warn("wake-up listener cannot connect; polling meanwhile", "error", err)
			}
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, n.cfg.Timings.Timeout)
		err = db.New(conn).Listen(lctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				n.cfg.Log.Warn("wake-up listener cannot LISTEN; polling meanwhile", "error", err)
			}
			closeQuietly(conn)
			continue
		}
		failures = 0
		// Wake-ups sent before LISTEN took effect were missed: every queue
		// scans from the start, and cursors are usable from now on.
		n.setListening(true)
		for _, w := range n.cfg.Wakers {
			w.WakeFromStart()
		}
		err = n.listenOn(ctx, conn)
		n.setListening(false)
		if ctx.Err() == nil {
			n.cfg.Log.Warn("wake-up listener lost its session; reconnecting, polling meanwhile", "error", err)
		}
		closeQuietly(conn)
	}
}

// listenOn hands on the notifications conn receives until ctx ends or the
// session fails: it breaks, or stays silent past a ping (Timings).
func (n *Notifier) listenOn(ctx context.Context, conn *pgx.Conn) error {
	t := n.cfg.Timings
	for {
		wctx, cancel := context.WithTimeout(ctx, t.PingAfter)
		note, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			// Quiet for PingAfter: a live session answers a ping at once.
			pctx, cancel := context.WithTimeout(ctx, t.Timeout)
			err = conn.Ping(pctx)
			cancel()
			if err != nil {
				return fmt.Errorf("no answer to a ping within %v after %v without a notification: %w", t.Timeout, t.PingAfter, err)
			}
			continue
		}
		n.deliver(note.Payload)
	}
}

// deliver acts on one notification's payload.
func (n *Notifier) deliver(payload string) {
	wake, ok := parseWakeup(payload)
	if !ok || wake.Schema != n.cfg.Schema {
		return
	}
	switch {
	case wake.Schedule != "":
		n.cfg.OnSchedule(wake.Schedule)
	case wake.Cancel != nil:
		if wake.Attempt != nil && wake.Owner == n.cfg.Owner {
			n.cfg.OnCancel(*wake.Cancel, *wake.Attempt)
		}
	default:
		w, ok := n.cfg.Wakers[wake.Queue]
		if !ok {
			return
		}
		if priority, runAt, id, ok := wake.place(); ok {
			w.WakeAt(priority, runAt, id)
		} else {
			w.WakeFromStart()
		}
	}
}

func (n *Notifier) setListening(on bool) {
	n.cfg.Listening.Store(on)
	n.cfg.Metrics.ListenerUp(on)
}

// closeQuietly closes the listener's session without waiting long on a
// server that no longer answers.
func closeQuietly(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}
