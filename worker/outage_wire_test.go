package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// TestOutageLoggedOnce: a worker whose database goes away (every
// connection cut, new ones refused) logs one line when it loses it,
// reminders no more often than their schedule allows, and one line when it
// is back; no record it writes spans lines, though its connection errors
// name two hosts (pgconn puts each on a line of its own).
func TestOutageLoggedOnce(t *testing.T) {
	h := newWF(t)
	p := h.proxy(t)
	cfg, err := pgxpool.ParseConfig(p.URL(h.b.URL))
	require.NoError(t, err)
	cfg.MaxConns = 6
	// A second host, the same proxy: a failed connect reports both.
	cfg.ConnConfig.Fallbacks = append(cfg.ConnConfig.Fallbacks, &pgconn.FallbackConfig{
		Host: cfg.ConnConfig.Host, Port: cfg.ConnConfig.Port})
	pool, err := pgxpool.NewWithConfig(h.b.Ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	logs := &captured{}
	w, err := worker.New(pool, fast(worker.Config{
		Queues:         map[string]int{"default": 2},
		BeatInterval:   100 * time.Millisecond,
		ExtendInterval: 100 * time.Millisecond,
		Logger:         slog.New(logs),
	}))
	require.NoError(t, err)
	noop := kind(t, "outage.noop")
	require.NoError(t, worker.Handle(w, noop, func(context.Context, *jobs.Job[Task]) error { return nil }))
	ctx, cancel := context.WithCancel(h.b.Ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	testdb.WaitFor(t, "the heartbeat runs", func() bool { return worker.Extensions(w) > 0 })

	p.Refuse(true)
	p.CutAll()
	testdb.WaitFor(t, "a reminder of the outage", func() bool { return logs.count(reminderMsg) > 0 })
	p.Refuse(false)
	testdb.WaitFor(t, "the worker back", func() bool { return logs.count(backMsg) > 0 })
	beats := worker.Extensions(w)
	testdb.WaitFor(t, "three lease extensions after it is back", func() bool { return worker.Extensions(w) >= beats+3 })
	cancel()
	require.NoError(t, <-done)

	records := logs.all()
	for _, r := range records {
		require.NotContains(t, r.line, "\n", "a record spans lines")
		require.NotContains(t, r.line, "\r", "a record spans lines")
	}
	require.Equal(t, 1, logs.count(lostMsg), "lines saying the database was lost:\n%s", logs)
	require.Equal(t, 1, logs.count(backMsg), "lines saying the database is back:\n%s", logs)
	back := logs.first(backMsg)
	after, err := time.ParseDuration(back.attrs["after"])
	require.NoError(t, err)
	// after is rounded to the millisecond.
	bound := worker.OutageReminderBound(after + time.Millisecond)
	require.LessOrEqual(t, logs.count(reminderMsg), bound, "reminders in %v:\n%s", after, logs)
	require.Contains(t, logs.first(reminderMsg).attrs["error"], "failed to connect", "the reminder's error is a failed connect")
	t.Logf("records:\n%s", logs)
	t.Logf("outage of %v: %d records, %d reminders (at most %d)", after, len(records), logs.count(reminderMsg), bound)
}

const (
	lostMsg     = "hopper worker lost the database"
	reminderMsg = "hopper worker still cannot reach the database"
	backMsg     = "hopper worker reached the database again"
)

// captured is a slog.Handler keeping every record, as one line of text
// and its attributes (those of With included) as strings.
type captured struct {
	mu      sync.Mutex
	records []capturedRecord
	with    []slog.Attr // this handler's own, from WithAttrs
	parent  *captured   // where records go; nil: here
}

type capturedRecord struct {
	msg   string
	line  string
	attrs map[string]string
}

func (c *captured) root() *captured {
	if c.parent != nil {
		return c.parent.root()
	}
	return c
}

func (c *captured) Enabled(context.Context, slog.Level) bool { return true }

func (c *captured) Handle(_ context.Context, r slog.Record) error {
	rec := capturedRecord{msg: r.Message, attrs: map[string]string{}}
	var line strings.Builder
	fmt.Fprintf(&line, "%s %s %s", r.Time.Format("15:04:05.000"), r.Level, r.Message)
	add := func(a slog.Attr) bool {
		v := a.Value.Resolve().String()
		rec.attrs[a.Key] = v
		fmt.Fprintf(&line, " %s=%s", a.Key, v)
		return true
	}
	for _, a := range c.with {
		add(a)
	}
	r.Attrs(add)
	rec.line = line.String()
	root := c.root()
	root.mu.Lock()
	defer root.mu.Unlock()
	root.records = append(root.records, rec)
	return nil
}

func (c *captured) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &captured{with: append(append([]slog.Attr(nil), c.with...), attrs...), parent: c.root()}
}

func (c *captured) WithGroup(string) slog.Handler { return c }

func (c *captured) all() []capturedRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]capturedRecord(nil), c.records...)
}

func (c *captured) count(prefix string) int {
	n := 0
	for _, r := range c.all() {
		if strings.HasPrefix(r.msg, prefix) {
			n++
		}
	}
	return n
}

func (c *captured) first(prefix string) capturedRecord {
	for _, r := range c.all() {
		if strings.HasPrefix(r.msg, prefix) {
			return r
		}
	}
	return capturedRecord{}
}

func (c *captured) String() string {
	var b strings.Builder
	for _, r := range c.all() {
		b.WriteString(r.line)
		b.WriteByte('\n')
	}
	return b.String()
}
