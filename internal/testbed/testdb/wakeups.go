package testdb

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper/db"
)

// WakeUp is a wake-up's payload, as the trigger on hopper_jobs and the
// Notify statement send it: the schema, the queue, and the place in claim
// order at or before the jobs it announces.
type WakeUp struct {
	Schema   string    `json:"schema"`
	Queue    string    `json:"queue"`
	Priority int16     `json:"priority"`
	RunAt    time.Time `json:"run_at"`
	ID       int64     `json:"id"`
}

// sentinelQueue is the queue of the wake-up WakeUps sends to know it has
// seen everything sent before.
const sentinelQueue = "sentinel"

// Listen opens a session of its own, subscribed to wake-ups.
func (b *Bundle) Listen(t testing.TB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(b.Ctx, b.URL)
	if err != nil {
		t.Fatalf("testdb: listen: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if err := db.New(conn).Listen(b.Ctx); err != nil {
		t.Fatalf("testdb: listen: %v", err)
	}
	return conn
}

// WakeUps returns the wake-ups of the bundle's schema that conn (Listen)
// received before a wake-up it sends now for the queue "sentinel":
// notifications arrive in commit order, so nothing sent before it can
// still be on its way. Other schemas' are skipped, as workers skip them;
// RunAt is in UTC.
func (b *Bundle) WakeUps(t testing.TB, conn *pgx.Conn) []WakeUp {
	t.Helper()
	err := b.Queries.Notify(b.Ctx, db.NotifyParams{Queues: []string{sentinelQueue}, Priorities: []int16{0},
		RunAts: []time.Time{time.Now()}, Ids: []int64{0}})
	if err != nil {
		t.Fatalf("testdb: send the sentinel wake-up: %v", err)
	}
	var got []WakeUp
	for {
		n, err := conn.WaitForNotification(b.Ctx)
		if err != nil {
			t.Fatalf("testdb: wait for wake-ups: %v", err)
		}
		var w WakeUp
		if err := json.Unmarshal([]byte(n.Payload), &w); err != nil {
			t.Fatalf("testdb: wake-up %q: %v", n.Payload, err)
		}
		switch {
		case w.Schema != b.Schema: // another test's
		case w.Queue == sentinelQueue:
			return got
		default:
			w.RunAt = w.RunAt.UTC()
			got = append(got, w)
		}
	}
}
