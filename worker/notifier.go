package worker

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper/db"
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
	producers  map[string]*producer
	// onCancel: an operator cancelled the held job (id, attempt).
	onCancel func(id int64, attempt int32)
	// onSchedule: the named schedule was triggered or resumed.
	onSchedule func(name string)

	// listening is shared with the producers, which read it; only the
	// notifier writes it.
	listening *atomic.Bool
}

func newNotifier(q *db.Queries, connConfig *pgx.ConnConfig, log *slog.Logger, owner, schema string,
	producers map[string]*producer, listening *atomic.Bool, onCancel func(int64, int32), onSchedule func(string)) *notifier {
	return &notifier{q: q, connConfig: connConfig, log: log, owner: owner, schema: schema, producers: producers,
		listening: listening, onCancel: onCancel, onSchedule: onSchedule}
}

// listen keeps a session of its own subscribed to wake-ups, wakes the queue
// each one names and moves its claim cursor back to the job announced. A
// lost session is re-established with backoff; after every (re)connect all
// queues look for work from the start, since wake-ups sent meanwhile were
// missed. Polling goes on regardless, so a broken LISTEN
// only costs latency; while it is broken, claims scan from the start.
func (n *notifier) run(ctx context.Context) {
	for failures := 0; ctx.Err() == nil; failures++ {
		if failures > 0 && !sleep(ctx, retryDelay(failures)) {
			return
		}
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
		if err := db.New(conn).Listen(ctx); err != nil {
			if ctx.Err() == nil {
				n.log.Warn("wake-up listener cannot LISTEN; polling meanwhile", "error", err)
			}
			closeQuietly(conn)
			continue
		}
		failures = 0
		// Wake-ups sent before LISTEN took effect were missed: every queue
		// scans from the start, and cursors are usable from now on.
		n.listening.Store(true)
		n.rewindAll()
		n.wakeAll()
		for {
			note, err := conn.WaitForNotification(ctx)
			if err != nil {
				if ctx.Err() == nil {
					n.log.Warn("wake-up listener lost its connection; reconnecting", "error", err)
				}
				break
			}
			wake, ok := parseWakeup(note.Payload)
			if !ok || wake.Schema != n.schema {
				continue
			}
			if wake.Schedule != "" {
				n.onSchedule(wake.Schedule)
				continue
			}
			if wake.Cancel != nil {
				if wake.Attempt != nil && wake.Owner == n.owner {
					n.onCancel(*wake.Cancel, *wake.Attempt)
				}
				continue
			}
			if p := n.producers[wake.Queue]; p != nil {
				p.cursor.rewind(wake.key())
				signal(p.wake)
			}
		}
		n.listening.Store(false)
		closeQuietly(conn)
	}
}

// rewindAll makes every queue's next claim scan from the start.
func (n *notifier) rewindAll() {
	for _, p := range n.producers {
		p.cursor.rewind(fromStart)
	}
}

func (n *notifier) wakeAll() {
	for _, p := range n.producers {
		signal(p.wake)
	}
}

// closeQuietly closes the listener's session without waiting long on a
// server that no longer answers.
func closeQuietly(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}
