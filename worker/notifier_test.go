package worker

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
	"github.com/hopperq/hopper/internal/worker/producer"
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
	p := newFakeQueue()

	type cancelNote struct {
		id      int64
		attempt int32
	}
	cancels, schedules := make(chan cancelNote, 4), make(chan string, 4)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	n := newNotifier(notifierConfig{q: q, connConfig: tdb.Pool.Config().ConnConfig, log: log, owner: "me", schema: tdb.Schema,
		queues: map[string]queueWaker{"default": p}, listening: new(atomic.Bool),
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
	require.Equal(t, producer.FromStart, p.rewoundTo(), "and rewinds its cursor")

	at := time.Now().Truncate(time.Microsecond)
	var wk announce.Set
	wk.Add("default", 5, at, 7)
	announce.NewAnnouncer(q, log).Announce(ctx, &wk, "test")
	woken("an announcement")
	require.Equal(t, producer.Key{Priority: 5, RunAt: at, ID: 7}, p.rewoundTo(), "back to the job announced")

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
	p := newFakeQueue()
	listening := new(atomic.Bool)
	// A generous timeout: on a loaded machine a live ping must not look
	// silent.
	timings := listenTimings{pingAfter: 200 * time.Millisecond, timeout: 5 * time.Second}
	n := newNotifier(notifierConfig{q: db.New(tdb.Pool), connConfig: cc, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		owner: "me", schema: tdb.Schema, queues: map[string]queueWaker{"default": p}, listening: listening,
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

// fakeQueue is a queue's producer as the notifier sees it: it records
// where it was last rewound to, and its wake-ups.
type fakeQueue struct {
	wake chan struct{}
	mu   sync.Mutex
	at   producer.Key
}

func newFakeQueue() *fakeQueue {
	return &fakeQueue{wake: make(chan struct{}, 1), at: producer.Key{Priority: 100, RunAt: time.Now(), ID: 1 << 40}}
}

func (f *fakeQueue) Rewind(k producer.Key) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = k
}

func (f *fakeQueue) Wake() { signal(f.wake) }

func (f *fakeQueue) rewoundTo() producer.Key {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at
}
