package worker

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper/db"
)

// listen keeps a session of its own subscribed to wake-ups, wakes the queue
// each one names and moves its claim cursor back to the job announced. A
// lost session is re-established with backoff; after every (re)connect all
// queues look for work from the start, since wake-ups sent meanwhile were
// missed. Polling goes on regardless, so a broken LISTEN
// only costs latency; while it is broken, claims scan from the start.
func (w *Worker) listen(ctx context.Context) {
	for failures := 0; ctx.Err() == nil; failures++ {
		if failures > 0 && !sleep(ctx, retryDelay(failures)) {
			return
		}
		conn, err := pgx.ConnectConfig(ctx, w.pool.Config().ConnConfig)
		if err != nil {
			// A shutdown cancels a connect under way ("context canceled"):
			// nothing failed, and a worker stopped soon after it started
			// must not warn.
			if ctx.Err() == nil {
				w.log.Warn("wake-up listener cannot connect; polling meanwhile", "error", err)
			}
			continue
		}
		if err := db.New(conn).Listen(ctx); err != nil {
			if ctx.Err() == nil {
				w.log.Warn("wake-up listener cannot LISTEN; polling meanwhile", "error", err)
			}
			closeQuietly(conn)
			continue
		}
		failures = 0
		// Wake-ups sent before LISTEN took effect were missed: every queue
		// scans from the start, and cursors are usable from now on.
		w.listening.Store(true)
		w.rewindAll()
		w.wakeAll()
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				if ctx.Err() == nil {
					w.log.Warn("wake-up listener lost its connection; reconnecting", "error", err)
				}
				break
			}
			wake, ok := parseWakeup(n.Payload)
			if !ok || wake.Schema != w.schema {
				continue
			}
			if wake.Schedule != "" {
				if w.schedules[wake.Schedule] != nil {
					signal(w.scheduleWake)
				}
				continue
			}
			if wake.Cancel != nil {
				if wake.Attempt != nil && wake.Owner == w.cfg.ID {
					w.cancelNotice(*wake.Cancel, *wake.Attempt)
				}
				continue
			}
			if qr := w.queues[wake.Queue]; qr != nil {
				qr.cursor.rewind(wake.key())
				signal(qr.wake)
			}
		}
		w.listening.Store(false)
		closeQuietly(conn)
	}
}

// closeQuietly closes the listener's session without waiting long on a
// server that no longer answers.
func closeQuietly(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}
