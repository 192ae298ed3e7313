package notifier

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
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

func TestMain(m *testing.M) { testdb.Main(m) }

// wake is one call of a Waker: from the start, or back to a place.
type wake struct {
	fromStart bool
	priority  int16
	runAt     time.Time
	id        int64
}

// waker records its wake-ups.
type waker struct{ woken chan wake }

func newWaker() *waker { return &waker{woken: make(chan wake, 16)} }

func (w *waker) WakeAt(priority int16, runAt time.Time, id int64) {
	w.woken <- wake{priority: priority, runAt: runAt, id: id}
}

func (w *waker) WakeFromStart() { w.woken <- wake{fromStart: true} }

// next is the next wake-up, within a while.
func (w *waker) next(t *testing.T, what string) wake {
	t.Helper()
	select {
	case k := <-w.woken:
		return k
	case <-time.After(10 * time.Second):
		t.Fatalf("no wake-up: %s", what)
		return wake{}
	}
}

// metrics records what ListenerUp was told, in order.
type metrics struct {
	mu sync.Mutex
	up []bool
}

func (m *metrics) ListenerUp(up bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.up = append(m.up, up)
}

func (m *metrics) said() []bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]bool(nil), m.up...)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// config is a whole Config listening on tdb's schema for the queue
// default.
func config(tdb *testdb.DB, w Waker) Config {
	return Config{ConnConfig: tdb.Pool.Config().ConnConfig, Log: quiet, Owner: "me", Schema: tdb.Schema,
		Wakers: map[string]Waker{"default": w}, Listening: new(atomic.Bool),
		OnCancel: func(int64, int32) {}, OnSchedule: func(string) {}, Timings: DefaultTimings, Metrics: &metrics{}}
}

// New refuses a Config it cannot work with, saying what is missing.
func TestNewRefusesAnIncompleteConfig(t *testing.T) {
	t.Parallel()
	whole := Config{ConnConfig: &pgx.ConnConfig{}, Log: quiet, Owner: "me", Schema: "s",
		Wakers: map[string]Waker{"default": newWaker()}, Listening: new(atomic.Bool),
		OnCancel: func(int64, int32) {}, OnSchedule: func(string) {}, Timings: DefaultTimings, Metrics: &metrics{}}
	_, err := New(whole)
	require.NoError(t, err)
	noWakers := whole
	noWakers.Wakers = nil
	_, err = New(noWakers)
	require.NoError(t, err, "a worker that claims from no queue still listens (schedules, cancels)")

	const required = "ConnConfig, Log, Listening, OnCancel, OnSchedule and Metrics are required"
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no ConnConfig", func(c *Config) { c.ConnConfig = nil }, required},
		{"no Listening", func(c *Config) { c.Listening = nil }, required},
		{"no OnCancel", func(c *Config) { c.OnCancel = nil }, required},
		{"no Metrics", func(c *Config) { c.Metrics = nil }, required},
		{"no Owner", func(c *Config) { c.Owner = "" }, `Owner ("") and Schema ("s") are required`},
		{"no Schema", func(c *Config) { c.Schema = "" }, `Owner ("me") and Schema ("") are required`},
		{"no ping", func(c *Config) { c.Timings.PingAfter = 0 }, "Timings.PingAfter (0s) and Timings.Timeout (5s) must be positive"},
		{"a nil waker", func(c *Config) { c.Wakers = map[string]Waker{"q": nil} }, `Wakers["q"] is nil`},
	} {
		c := whole
		tc.change(&c)
		n, err := New(c)
		require.Nil(t, n, tc.name)
		require.EqualError(t, err, "notifier: "+tc.want, tc.name)
	}
}

// The notifier, on a session of its own: once subscribed it wakes every
// queue from the start; an announcement wakes its queue back to the job
// announced; cancel notices for this worker and schedule triggers reach
// their callbacks; wake-ups for another schema or queue, and notices for
// another worker, are ignored. Listening, and the metrics, follow the
// subscription.
func TestNotifierCarriesWakeups(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tdb := testdb.New(t)
	q := db.New(tdb.Pool)
	w := newWaker()

	type cancelNote struct {
		id      int64
		attempt int32
	}
	cancels, schedules := make(chan cancelNote, 4), make(chan string, 4)
	cfg := config(tdb, w)
	cfg.OnCancel = func(id int64, attempt int32) { cancels <- cancelNote{id, attempt} }
	cfg.OnSchedule = func(name string) { schedules <- name }
	m := &metrics{}
	cfg.Metrics = m
	n, err := New(cfg)
	require.NoError(t, err)
	require.Equal(t, tdb.Schema, n.Schema())
	require.False(t, n.Listening())

	listenCtx, stopListening := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); n.Run(listenCtx) }()
	testdb.WaitFor(t, "the notifier listening", n.Listening)
	require.Equal(t, wake{fromStart: true}, w.next(t, "subscribing"), "subscribing wakes every queue from the start")
	require.Equal(t, []bool{true}, m.said())

	at := time.Now().Truncate(time.Microsecond)
	var wk announce.Set
	wk.Add("default", 5, at, 7)
	announce.NewAnnouncer(q, quiet).Announce(ctx, &wk, "test")
	got := w.next(t, "an announcement")
	require.True(t, at.Equal(got.runAt), "run_at %v, want %v", got.runAt, at)
	got.runAt = at
	require.Equal(t, wake{priority: 5, runAt: at, id: 7}, got, "back to the job announced")

	notify := func(payload map[string]any) {
		t.Helper()
		b, err := json.Marshal(payload)
		require.NoError(t, err)
		_, err = tdb.Pool.Exec(ctx, "SELECT pg_notify('hopper_jobs', $1)", string(b))
		require.NoError(t, err)
	}
	notify(map[string]any{"schema": "elsewhere", "queue": "default"})
	notify(map[string]any{"schema": tdb.Schema, "queue": "another"})
	notify(map[string]any{"schema": tdb.Schema, "cancel": 41, "attempt": 1, "owner": "someone else"})
	notify(map[string]any{"schema": tdb.Schema, "cancel": 42, "attempt": 2, "owner": "me"})
	notify(map[string]any{"schema": tdb.Schema, "schedule": "nightly"})
	notify(map[string]any{"schema": tdb.Schema, "queue": "default"})
	require.Equal(t, wake{fromStart: true}, w.next(t, "a wake-up without a place"),
		"a wake-up without a place goes back to the start; the ones for another schema or queue woke nothing")
	// Notifications arrive in order: everything before it was seen.
	require.Equal(t, "nightly", <-schedules)
	require.Equal(t, cancelNote{42, 2}, <-cancels)
	require.Empty(t, cancels, "a notice for another worker is ignored")

	stopListening()
	<-done
	require.False(t, n.Listening(), "not listening once stopped")
	require.Equal(t, []bool{true, false}, m.said())
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
	w := newWaker()
	cfg := config(tdb, w)
	cfg.ConnConfig = cc
	// A generous timeout: on a loaded machine a live ping must not look
	// silent.
	cfg.Timings = Timings{PingAfter: 200 * time.Millisecond, Timeout: 5 * time.Second}
	n, err := New(cfg)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	defer func() { cancel(); <-done }()

	testdb.WaitFor(t, "the notifier listening", n.Listening)
	time.Sleep(3 * cfg.Timings.PingAfter) // pings go through on a live session
	require.True(t, n.Listening(), "a quiet but live session is kept")

	proxy.Stall()
	testdb.WaitFor(t, "the silent session given up", func() bool { return !n.Listening() })
	proxy.Unstall()
	testdb.WaitFor(t, "the notifier listening again", n.Listening)
	_, err = tdb.Pool.Exec(ctx, "SELECT pg_notify('hopper_jobs', $1)", `{"schema": "`+tdb.Schema+`", "queue": "default", "priority": 1, "run_at": "2026-11-22T10:00:00Z", "id": 3}`)
	require.NoError(t, err)
	for { // past the wake-ups of subscribing, from the start
		if k := w.next(t, "after the session was replaced"); !k.fromStart {
			require.Equal(t, int64(3), k.id)
			return
		}
	}
}

// TestWakeupPlaces: a wake-up's place in claim order, as the trigger and
// Notify send it; without one (sent by hand, or by the trigger of schema
// version 1) it names none, and the queue goes back to the start.
func TestWakeupPlaces(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 10, 0, 0, 123456000, time.UTC)
	for _, tc := range []struct {
		payload   string
		priority  int16
		id        int64
		placed    bool
		parseable bool
	}{
		{`{"schema":"s","queue":"q","priority":3,"run_at":"2026-11-22T10:00:00.123456+00:00","id":42}`, 3, 42, true, true},
		{`{"schema":"s","queue":"q","priority":3,"run_at":"2026-11-22T11:00:00.123456+01:00","id":42}`, 3, 42, true, true},
		{`{"schema":"s","queue":"q"}`, 0, 0, false, true},
		{`{"schema":"s","queue":"q","priority":3}`, 0, 0, false, true},
		{`not json`, 0, 0, false, false},
	} {
		wake, ok := parseWakeup(tc.payload)
		require.Equal(t, tc.parseable, ok, tc.payload)
		priority, runAt, id, placed := wake.place()
		require.Equal(t, tc.placed, placed, tc.payload)
		if placed {
			require.Equal(t, tc.priority, priority, tc.payload)
			require.True(t, at.Equal(runAt), tc.payload)
			require.Equal(t, tc.id, id, tc.payload)
		}
	}
}
