package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper/db"
)

// listen keeps a session of its own subscribed to wake-ups and wakes the
// queue each one names. A lost session is re-established with backoff;
// after every (re)connect all queues look for work, since wake-ups sent
// meanwhile were missed. Polling goes on regardless, so a broken LISTEN
// only costs latency.
func (w *Worker) listen(ctx context.Context) {
	for failures := 0; ctx.Err() == nil; failures++ {
		if failures > 0 && !sleep(ctx, retryDelay(failures)) {
			return
		}
		conn, err := pgx.ConnectConfig(ctx, w.pool.Config().ConnConfig)
		if err != nil {
			w.log.Warn("wake-up listener cannot connect; polling meanwhile", "error", err)
			continue
		}
		if err := db.New(conn).Listen(ctx); err != nil {
			w.log.Warn("wake-up listener cannot LISTEN; polling meanwhile", "error", err)
			closeQuietly(conn)
			continue
		}
		failures = 0
		w.wakeAll()
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				if ctx.Err() == nil {
					w.log.Warn("wake-up listener lost its connection; reconnecting", "error", err)
				}
				break
			}
			var wake struct {
				Schema string `json:"schema"`
				Queue  string `json:"queue"`
			}
			if json.Unmarshal([]byte(n.Payload), &wake) != nil || wake.Schema != w.schema {
				continue
			}
			if qr := w.queues[wake.Queue]; qr != nil {
				signal(qr.wake)
			}
		}
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
