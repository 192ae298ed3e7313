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

// place is where a wake-up says its earliest job sits in claim order.
type place struct {
	Priority int16     `json:"priority"`
	RunAt    time.Time `json:"run_at"`
	ID       int64     `json:"id"`
}

// notify sends wake-ups for jobs at the places given, one per queue.
func notify(t *testing.T, b *bundle, queues []string, places ...place) {
	t.Helper()
	p := db.NotifyParams{Queues: queues}
	for i := range queues {
		at := place{RunAt: time.Now()}
		if i < len(places) {
			at = places[i]
		}
		p.Priorities = append(p.Priorities, at.Priority)
		p.RunAts = append(p.RunAts, at.RunAt)
		p.Ids = append(p.Ids, at.ID)
	}
	require.NoError(t, b.Queries.Notify(b.Ctx, p))
}

// listen opens a session of its own subscribed to wake-ups.
func listen(t *testing.T, b *bundle) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(b.Ctx, b.URL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	require.NoError(t, db.New(conn).Listen(b.Ctx))
	return conn
}

// drain returns the wake-ups received before the sentinel queue's, which
// the caller sent last: notifications arrive in commit order, so nothing
// sent before the sentinel can still be on its way.
func drain(t *testing.T, b *bundle, conn *pgx.Conn) []wakeUp {
	t.Helper()
	got, _ := drainPlaces(t, b, conn)
	return got
}

// drainPlaces is drain that also returns the place each wake-up names.
func drainPlaces(t *testing.T, b *bundle, conn *pgx.Conn) ([]wakeUp, []place) {
	t.Helper()
	notify(t, b, []string{"sentinel"})
	var got []wakeUp
	var places []place
	for {
		ctx, cancel := context.WithTimeout(b.Ctx, 10*time.Second)
		n, err := conn.WaitForNotification(ctx)
		cancel()
		require.NoError(t, err)
		require.Equal(t, "hopper_jobs", n.Channel)
		var w wakeUp
		require.NoError(t, json.Unmarshal([]byte(n.Payload), &w))
		if w.Schema != b.Schema {
			continue // another test's schema: workers ignore these too
		}
		if w.Queue == "sentinel" {
			return got, places
		}
		var at place
		require.NoError(t, json.Unmarshal([]byte(n.Payload), &at))
		got = append(got, w)
		places = append(places, at)
	}
}

func TestWakeUps(t *testing.T) {
	b := setup(t)
	conn := listen(t, b)

	b.enqueue(t, jobSpec{queue: "email"})
	require.Equal(t, []wakeUp{{Schema: b.Schema, Queue: "email"}}, drain(t, b, conn))

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
	_, err := b.Queries.EnqueueBatch(b.Ctx, withIDs(t, b.Queries, rows))
	require.NoError(t, err)
	require.ElementsMatch(t, []wakeUp{{b.Schema, "a"}, {b.Schema, "b"}}, drain(t, b, conn),
		"one wake-up per queue for a whole COPY batch")

	// A rolled-back enqueue wakes nobody.
	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	_, err = db.New(tx).Enqueue(b.Ctx, params(jobSpec{queue: "ghost"}))
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.Ctx))
	require.Empty(t, drain(t, b, conn))

	notify(t, b, []string{"x", "x", "y"})
	require.ElementsMatch(t, []wakeUp{{b.Schema, "x"}, {b.Schema, "y"}}, drain(t, b, conn))
}

// TestWakeUpsPlaceTheirJobs: a wake-up names a place in claim order at or
// before every job it announces, so that a worker whose claim cursor has
// moved past them moves it back there (internal/worker/producer/cursor.go).
func TestWakeUpsPlaceTheirJobs(t *testing.T) {
	b := setup(t)
	conn := listen(t, b)

	// An enqueue: its job's own place.
	id := b.enqueue(t, jobSpec{queue: "email", priority: 3})
	var runAt time.Time
	require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT run_at FROM hopper_jobs WHERE id = $1", id).Scan(&runAt))
	got, places := drainPlaces(t, b, conn)
	require.Len(t, got, 1)
	require.Equal(t, place{Priority: 3, RunAt: runAt.UTC(), ID: id}, normalize(places[0]))

	// A batch: the smallest priority, run_at and id of the statement's jobs.
	rows := []db.EnqueueBatchParams{
		{Queue: "a", Kind: "k", Version: 1, Payload: json.RawMessage(`{}`), MaxAttempts: 1, Priority: 5},
		{Queue: "a", Kind: "k", Version: 1, Payload: json.RawMessage(`{}`), MaxAttempts: 1, Priority: 2},
	}
	_, err := b.Queries.EnqueueBatch(b.Ctx, withIDs(t, b.Queries, rows))
	require.NoError(t, err)
	var first int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT min(id) FROM hopper_jobs WHERE queue = 'a'").Scan(&first))
	_, places = drainPlaces(t, b, conn)
	require.Len(t, places, 1)
	require.Equal(t, int16(2), places[0].Priority)
	require.Equal(t, first, places[0].ID)

	// Notify: the smallest of each, per queue.
	early := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	notify(t, b, []string{"x", "x"}, place{Priority: 4, RunAt: early.Add(time.Hour), ID: 7}, place{Priority: 6, RunAt: early, ID: 9})
	_, places = drainPlaces(t, b, conn)
	require.Equal(t, []place{{Priority: 4, RunAt: early, ID: 7}}, []place{normalize(places[0])})
}

// normalize drops the time zone a place's run_at was printed in.
func normalize(p place) place {
	p.RunAt = p.RunAt.UTC()
	return p
}
