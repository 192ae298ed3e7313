package queries_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
)

type wakeUp struct {
	Schema string `json:"schema"`
	Queue  string `json:"queue"`
}

// listen opens a session of its own subscribed to wake-ups.
func listen(t *testing.T, b *bundle) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(b.ctx, b.tdb.URL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	require.NoError(t, db.New(conn).Listen(b.ctx))
	return conn
}

// drain returns the wake-ups received before the sentinel queue's, which
// the caller sent last: notifications arrive in commit order, so nothing
// sent before the sentinel can still be on its way.
func drain(t *testing.T, b *bundle, conn *pgx.Conn) []wakeUp {
	t.Helper()
	require.NoError(t, b.q.Notify(b.ctx, []string{"sentinel"}))
	var got []wakeUp
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		n, err := conn.WaitForNotification(ctx)
		cancel()
		require.NoError(t, err)
		require.Equal(t, "hopper_jobs", n.Channel)
		var w wakeUp
		require.NoError(t, json.Unmarshal([]byte(n.Payload), &w))
		if w.Schema != b.tdb.Schema {
			continue // another test's schema: workers ignore these too
		}
		if w.Queue == "sentinel" {
			return got
		}
		got = append(got, w)
	}
}

func TestWakeUps(t *testing.T) {
	b := setup(t)
	conn := listen(t, b)

	b.enqueue(t, jobSpec{queue: "email"})
	require.Equal(t, []wakeUp{{Schema: b.tdb.Schema, Queue: "email"}}, drain(t, b, conn))

	b.enqueue(t, jobSpec{queue: "email", delay: time.Hour})
	require.Empty(t, drain(t, b, conn), "a scheduled job wakes nobody")

	rows := make([]db.EnqueueBatchParams, 5000)
	for i := range rows {
		queue := "a"
		if i%2 == 1 {
			queue = "b"
		}
		rows[i] = db.EnqueueBatchParams{Queue: queue, Kind: "k", Version: 1, Payload: json.RawMessage(`{}`), MaxAttempts: 1}
	}
	_, err := b.q.EnqueueBatch(b.ctx, rows)
	require.NoError(t, err)
	require.ElementsMatch(t, []wakeUp{{b.tdb.Schema, "a"}, {b.tdb.Schema, "b"}}, drain(t, b, conn),
		"one wake-up per queue for a whole COPY batch")

	// A rolled-back enqueue wakes nobody.
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = db.New(tx).Enqueue(b.ctx, params(jobSpec{queue: "ghost"}))
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.ctx))
	require.Empty(t, drain(t, b, conn))

	require.NoError(t, b.q.Notify(b.ctx, []string{"x", "x", "y"}))
	require.ElementsMatch(t, []wakeUp{{b.tdb.Schema, "x"}, {b.tdb.Schema, "y"}}, drain(t, b, conn))
}
