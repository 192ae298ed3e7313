package worker

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testdb"
)

// The notifier, on a session of its own: once subscribed it rewinds and
// wakes every queue; an announcement wakes its queue and moves the cursor
// back to the job announced; cancel notices for this worker and schedule
// triggers reach their callbacks; wake-ups for another schema or notices
// for another worker are ignored.
func TestNotifierCarriesWakeups(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tdb := testdb.New(t)
	q := db.New(tdb.Pool)
	p := &producer{name: "default", wake: make(chan struct{}, 1), cursor: newScanCursor(time.Hour)}
	far := readyKey{priority: 100, runAt: time.Now(), id: 1 << 40}
	p.cursor.pos = far

	type cancelNote struct {
		id      int64
		attempt int32
	}
	cancels, schedules := make(chan cancelNote, 4), make(chan string, 4)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	n := newNotifier(q, tdb.Pool.Config().ConnConfig, log, "me", tdb.Schema,
		map[string]*producer{"default": p}, new(atomic.Bool),
		func(id int64, attempt int32) { cancels <- cancelNote{id, attempt} },
		func(name string) { schedules <- name })

	listenCtx, stopListening := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); n.run(listenCtx) }()
	testdb.WaitFor(t, "the notifier listening", n.listening.Load)
	woken := func(what string) {
		t.Helper()
		select {
		case <-p.wake:
		case <-time.After(10 * time.Second):
			t.Fatalf("no wake-up: %s", what)
		}
	}
	woken("subscribing wakes every queue")
	require.Equal(t, fromStart, p.cursor.at(), "and rewinds its cursor")

	p.cursor.mu.Lock()
	p.cursor.pos = far
	p.cursor.mu.Unlock()
	at := time.Now().Truncate(time.Microsecond)
	var wk wakeups
	wk.add("default", 5, at, 7)
	announcer{q: q, log: log}.announce(ctx, &wk, "test")
	woken("an announcement")
	require.Equal(t, readyKey{priority: 5, runAt: at, id: 7}.justBefore(), p.cursor.at())

	notify := func(payload map[string]any) {
		t.Helper()
		b, err := json.Marshal(payload)
		require.NoError(t, err)
		_, err = tdb.Pool.Exec(ctx, "SELECT pg_notify('hopper_jobs', $1)", string(b))
		require.NoError(t, err)
	}
	notify(map[string]any{"schema": "elsewhere", "queue": "default"})
	notify(map[string]any{"schema": tdb.Schema, "cancel": 41, "attempt": 1, "owner": "someone else"})
	notify(map[string]any{"schema": tdb.Schema, "cancel": 42, "attempt": 2, "owner": "me"})
	notify(map[string]any{"schema": tdb.Schema, "schedule": "nightly"})
	select {
	case name := <-schedules:
		require.Equal(t, "nightly", name)
	case <-time.After(10 * time.Second):
		t.Fatal("the schedule trigger never arrived")
	}
	// Notifications arrive in order: everything before the trigger was seen.
	require.Equal(t, cancelNote{42, 2}, <-cancels)
	require.Empty(t, cancels, "a notice for another worker is ignored")
	select {
	case <-p.wake:
		t.Fatal("a wake-up for another schema woke the queue")
	default:
	}

	stopListening()
	<-done
	require.False(t, n.listening.Load(), "not listening once stopped")
}
