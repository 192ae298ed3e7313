package worker

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
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/silentpeer"
	"github.com/hopperq/hopper/internal/worker/producer"
)

// notifier carries wake-ups between workers: it LISTENs on a session of its
// own, wakes the producers' queues and rewinds their cursors to the jobs
// announced, passes on cancel notices and schedule triggers, and announces
// the jobs this worker made ready other than by an insert.
//
// Invariant: listening is true only while the subscription is live; the
// producers' scan cursors may be trusted only then (a wake-up missed
// while it is false may announce a job behind a cursor).
type notifier struct {
	q          *db.Queries
	connConfig *pgx.ConnConfig // the listener's own session (never the pool's)
	log        *slog.Logger
	owner      string // Config.ID: cancel notices for this worker's claims
	schema     string // where hopper_jobs lives: wake-ups for others are ignored
	queues     map[string]queueWaker
	// onCancel: an operator cancelled the held job (id, attempt).
	onCancel func(id int64, attempt int32)
	// onSchedule: the named schedule was triggered or resumed.
	onSchedule func(name string)

	// listening is shared with the producers, which read it; only the
	// notifier writes it.
	listening *atomic.Bool
	timings   listenTimings
	// up mirrors listening for Prometheus (hopper_listener_up); nil in
	// tests.
	up prometheus.Gauge
}

// queueWaker is a queue's claim loop as the notifier sees it: its producer
// (internal/worker/producer), whose cursor a wake-up moves back to the job
// announced before waking it.
type queueWaker interface {
	Rewind(producer.Key)
	Wake()
}

// listenTimings bound how long the listener takes to notice a session that
// went silent without closing (a primary cut off by the network, a failover
// that leaves the old server's sockets open): it pings after pingAfter
// without a notification and gives the session up when the ping, or the
// LISTEN on a new session, takes longer than timeout. A silent session is
// given up within pingAfter + timeout; each host a reconnect tries gets
// the config's connect timeout.
type listenTimings struct {
	pingAfter time.Duration
	timeout   time.Duration
}

// defaultListenTimings notice a silent session within 15 s.
var defaultListenTimings = listenTimings{pingAfter: 10 * time.Second, timeout: 5 * time.Second}

// notifierConfig is what a notifier works with: each field as the
// notifier's own of the same name, connConfig copied and adjusted.
type notifierConfig struct {
	q          *db.Queries
	connConfig *pgx.ConnConfig
	log        *slog.Logger
	owner      string
	schema     string
	queues     map[string]queueWaker
	listening  *atomic.Bool
	onCancel   func(id int64, attempt int32)
	onSchedule func(name string)
	timings    listenTimings
	up         prometheus.Gauge // nil: not exported (tests)
}

func newNotifier(c notifierConfig) *notifier {
	cc := c.connConfig.Copy()
	// A dead server is noticed by TCP (keepalives, user timeout) within
	// silentpeer.Bound, a silent one by the ping.
	silentpeer.Apply(&cc.Config)
	// A wait for notifications that ends at pingAfter sets a deadline on
	// the socket, pgx's default; a pool configured to send a cancel
	// request instead would open a connection to the server every
	// pingAfter for nothing running.
	cc.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	return &notifier{q: c.q, connConfig: cc, log: c.log, owner: c.owner, schema: c.schema, queues: c.queues,
		listening: c.listening, onCancel: c.onCancel, onSchedule: c.onSchedule, timings: c.timings, up: c.up}
}

// Run keeps a session of its own subscribed to wake-ups, wakes the queue
// each one names and moves its claim cursor back to the job announced. A
// lost session is re-established with backoff; after every (re)connect all
// queues look for work from the start, since wake-ups sent meanwhile were
// missed. A session silent past a ping is given up like a broken one
// (listenTimings). Polling goes on regardless, so a broken LISTEN only
// costs latency; while it is broken, claims scan from the start.
func (n *notifier) Run(ctx context.Context) {
	for failures := 0; ctx.Err() == nil; failures++ {
		if failures > 0 && !sleep(ctx, retryDelay(failures)) {
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
				n.log.Warn("wake-up listener cannot connect; polling meanwhile", "error", err)
			}
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, n.timings.timeout)
		err = db.New(conn).Listen(lctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				n.log.Warn("wake-up listener cannot LISTEN; polling meanwhile", "error", err)
			}
			closeQuietly(conn)
			continue
		}
		failures = 0
		// Wake-ups sent before LISTEN took effect were missed: every queue
		// scans from the start, and cursors are usable from now on.
		n.setListening(true)
		n.rewindAll()
		n.wakeAll()
		err = n.listenOn(ctx, conn)
		n.setListening(false)
		if ctx.Err() == nil {
			n.log.Warn("wake-up listener lost its session; reconnecting, polling meanwhile", "error", err)
		}
		closeQuietly(conn)
	}
}

// listenOn hands on the notifications conn receives until ctx ends or the
// session fails: it breaks, or stays silent past a ping (timings).
func (n *notifier) listenOn(ctx context.Context, conn *pgx.Conn) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, n.timings.pingAfter)
		note, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			// Quiet for pingAfter: a live session answers a ping at once.
			pctx, cancel := context.WithTimeout(ctx, n.timings.timeout)
			err = conn.Ping(pctx)
			cancel()
			if err != nil {
				return fmt.Errorf("no answer to a ping within %v after %v without a notification: %w", n.timings.timeout, n.timings.pingAfter, err)
			}
			continue
		}
		n.deliver(note.Payload)
	}
}

// deliver acts on one notification's payload.
func (n *notifier) deliver(payload string) {
	wake, ok := parseWakeup(payload)
	if !ok || wake.Schema != n.schema {
		return
	}
	switch {
	case wake.Schedule != "":
		n.onSchedule(wake.Schedule)
	case wake.Cancel != nil:
		if wake.Attempt != nil && wake.Owner == n.owner {
			n.onCancel(*wake.Cancel, *wake.Attempt)
		}
	default:
		if p := n.queues[wake.Queue]; p != nil {
			p.Rewind(wake.key())
			p.Wake()
		}
	}
}

func (n *notifier) setListening(on bool) {
	n.listening.Store(on)
	if n.up != nil {
		v := 0.0
		if on {
			v = 1
		}
		n.up.Set(v)
	}
}

// rewindAll makes every queue's next claim scan from the start.
func (n *notifier) rewindAll() {
	for _, p := range n.queues {
		p.Rewind(producer.FromStart)
	}
}

func (n *notifier) wakeAll() {
	for _, p := range n.queues {
		p.Wake()
	}
}

// closeQuietly closes the listener's session without waiting long on a
// server that no longer answers.
func closeQuietly(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}
