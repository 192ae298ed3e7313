package worker

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/testbed/wirefault"
	"github.com/hopperq/hopper/internal/worker/announce"
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
	n := newNotifier(notifierConfig{q: q, connConfig: tdb.Pool.Config().ConnConfig, log: log, owner: "me", schema: tdb.Schema,
		producers: map[string]*producer{"default": p}, listening: new(atomic.Bool),
		onCancel:   func(id int64, attempt int32) { cancels <- cancelNote{id, attempt} },
		onSchedule: func(name string) { schedules <- name }, timings: defaultListenTimings})

	listenCtx, stopListening := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); n.Run(listenCtx) }()
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
	var wk announce.Set
	wk.Add("default", 5, at, 7)
	announce.NewAnnouncer(q, log).Announce(ctx, &wk, "test")
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

// A session that goes silent without closing (the proxy stops forwarding
// both ways and sends no FIN or RST) is noticed by the listener's ping and
// given up, and once the server answers again the listener subscribes
// anew and wake-ups flow: nothing waits for the kernel to give up on the
// socket.
func TestNotifierNoticesASilentSession(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tdb := testdb.New(t)
	c, err := tdb.Pool.Acquire(ctx)
	require.NoError(t, err)
	upstream := net.JoinHostPort(c.Conn().Config().Host, strconv.Itoa(int(c.Conn().Config().Port)))
	if strings.HasPrefix(c.Conn().Config().Host, "/") { // a socket: the proxy speaks TCP
		upstream = net.JoinHostPort("127.0.0.1", strconv.Itoa(int(c.Conn().Config().Port)))
	}
	c.Release()
	proxy := wirefault.Start(t, upstream)
	cc, err := pgx.ParseConfig(proxy.URL(tdb.URL))
	require.NoError(t, err)
	p := &producer{name: "default", wake: make(chan struct{}, 1), cursor: newScanCursor(time.Hour)}
	listening := new(atomic.Bool)
	// A generous timeout: on a loaded machine a live ping must not look
	// silent.
	timings := listenTimings{pingAfter: 200 * time.Millisecond, timeout: 5 * time.Second}
	n := newNotifier(notifierConfig{q: db.New(tdb.Pool), connConfig: cc, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		owner: "me", schema: tdb.Schema, producers: map[string]*producer{"default": p}, listening: listening,
		onCancel: func(int64, int32) {}, onSchedule: func(string) {}, timings: timings})
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	defer func() { cancel(); <-done }()

	testdb.WaitFor(t, "the notifier listening", listening.Load)
	time.Sleep(3 * timings.pingAfter) // pings go through on a live session
	require.True(t, listening.Load(), "a quiet but live session is kept")

	proxy.Stall()
	testdb.WaitFor(t, "the silent session given up", func() bool { return !listening.Load() })
	proxy.Unstall()
	testdb.WaitFor(t, "the notifier listening again", listening.Load)
	select { // drain the wake-up of subscribing
	case <-p.wake:
	default:
	}
	_, err = tdb.Pool.Exec(ctx, "SELECT pg_notify('hopper_jobs', $1)", `{"schema": "`+tdb.Schema+`", "queue": "default"}`)
	require.NoError(t, err)
	select {
	case <-p.wake:
	case <-ctx.Done():
		t.Fatal("no wake-up after the session was replaced")
	}
}
