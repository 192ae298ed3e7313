package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// Every background loop of a worker retries on its own when the database
// is unreachable, and each used to say so on every failed pass: two
// workers wrote about 400 warnings, many of them several lines long, in a
// 51 s node loss. An outage is one event, so it is told as one: the first
// connection-level failure of any loop logs that the worker lost the
// database, further ones are counted and recalled at a slowing pace, and
// the first success of any loop logs that it is back and for how long it
// was gone.
//
// The loops keep logging as they did; the worker's logger goes through
// outageHandler, which takes their WARN records about a lost connection
// to the outage instead of the log. Every other record passes, with its
// message and values on one line each.

// The reminders of an outage under way: the first reminderFirst after the
// outage began, each next one twice as far from the one before, at most
// reminderMax.
const (
	reminderFirst = 5 * time.Second
	reminderMax   = 5 * time.Minute
)

// reminderGap is the pause before reminder n (from 0) of an outage: after
// the outage's first line for n = 0, after reminder n-1 otherwise.
func reminderGap(n int) time.Duration {
	if n >= 6 { // 5s << 6 is past the cap; a larger shift would overflow
		return reminderMax
	}
	return min(reminderFirst<<n, reminderMax)
}

// outage is whether the worker reaches its database, shared by every loop
// that uses it. Invariant: while lost, since is when the first failure was
// reported, failures counts the failures reported since, and next is when
// a failure may log the next reminder.
type outage struct {
	log *slog.Logger // the worker's logger, without outageHandler
	now func() time.Time

	lost atomic.Bool // written under mu; read without it by reached's fast path

	mu        sync.Mutex
	since     time.Time
	failures  int
	reminders int
	next      time.Time
}

func newOutage(log *slog.Logger, now func() time.Time) *outage {
	return &outage{log: log, now: now}
}

// failed reports a connection-level failure of a loop: what the loop was
// doing (its log message) and the error. The first of an outage logs; the
// rest are counted, and log a reminder when one is due.
func (o *outage) failed(what string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.now()
	if !o.lost.Load() {
		o.since, o.failures, o.reminders, o.next = now, 1, 0, now.Add(reminderGap(0))
		o.lost.Store(true)
		o.log.Warn("hopper worker lost the database; its loops retry on their own, and it says when it is back",
			"error", oneLine(err.Error()), "while", oneLine(what))
		return
	}
	o.failures++
	if now.Before(o.next) {
		return
	}
	o.log.Warn("hopper worker still cannot reach the database",
		"for", now.Sub(o.since).Round(time.Second), "failed_attempts", o.failures, "error", oneLine(err.Error()))
	o.reminders++
	o.next = now.Add(reminderGap(o.reminders))
}

// reached reports a statement that succeeded: the end of an outage, if
// one was under way. Loops call it after every success, so it costs an
// atomic load while the database is there.
func (o *outage) reached() {
	if !o.lost.Load() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.lost.Load() {
		return // another loop told it first
	}
	o.lost.Store(false)
	o.log.Info("hopper worker reached the database again",
		"after", o.now().Sub(o.since).Round(time.Millisecond), "failed_attempts", o.failures)
}

// connectionLost reports whether err says that the database could not be
// reached or the session was lost, rather than anything about the
// statement: the statement never left (pgconn.SafeToRetry), a connection
// could not be made or broke, the server is shutting down, restarting or
// not yet accepting connections (57P01, 57P02, 57P03), a connection
// exception (class 08), or a server no longer taking writes after a
// failover (25006).
func connectionLost(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == pgerrcode.AdminShutdown, pgErr.Code == pgerrcode.CrashShutdown, pgErr.Code == pgerrcode.CannotConnectNow,
			pgErr.Code == pgerrcode.ReadOnlySQLTransaction, strings.HasPrefix(pgErr.Code, "08"):
			return true
		}
		return false // the server answered about the statement
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return pgconn.SafeToRetry(err) || errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, pgconn.ErrConnClosed)
}

// oneLine puts a message that spans lines on one: pgconn's error for a
// connection tried on several hosts, errors.Join's, a server message
// with line breaks. Each line's indentation goes; lines are joined with
// "; ", or a space after a line ending in a colon.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	var b strings.Builder
	for _, line := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if b.Len() > 0 {
			if strings.HasSuffix(b.String(), ":") {
				b.WriteByte(' ')
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(line)
	}
	return b.String()
}

// outageHandler is the worker's log handler around the one Config.Logger
// gives. A WARN record whose "error" is connectionLost goes to the
// outage, unless it concerns a job (a "job_id" attribute): what became of
// a job is always told. Every other record goes on, each of its values on
// one line.
type outageHandler struct {
	inner    slog.Handler
	o        *outage
	aboutJob bool // WithAttrs gave a job_id
}

func (h *outageHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *outageHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && !h.aboutJob {
		var lost error
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "job_id" {
				lost = nil
				return false
			}
			if err, ok := a.Value.Any().(error); ok && a.Key == "error" && connectionLost(err) {
				lost = err
			}
			return true
		})
		if lost != nil {
			h.o.failed(r.Message, lost)
			return nil
		}
	}
	out := slog.NewRecord(r.Time, r.Level, oneLine(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(oneLineAttr(a))
		return true
	})
	return h.inner.Handle(ctx, out)
}

func (h *outageHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	aboutJob := h.aboutJob
	flat := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		aboutJob = aboutJob || a.Key == "job_id"
		flat[i] = oneLineAttr(a)
	}
	return &outageHandler{inner: h.inner.WithAttrs(flat), o: h.o, aboutJob: aboutJob}
}

func (h *outageHandler) WithGroup(name string) slog.Handler {
	return &outageHandler{inner: h.inner.WithGroup(name), o: h.o, aboutJob: h.aboutJob}
}

// oneLineAttr is a with its value on one line: an error or a string that
// spans lines, or any other value that prints on several.
func oneLineAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if s := v.String(); strings.ContainsAny(s, "\r\n") {
			return slog.String(a.Key, oneLine(s))
		}
	case slog.KindGroup:
		group := v.Group()
		flat := make([]any, len(group))
		for i, g := range group {
			flat[i] = oneLineAttr(g)
		}
		return slog.Group(a.Key, flat...)
	case slog.KindAny:
		var s string
		if err, ok := v.Any().(error); ok {
			s = err.Error()
		} else {
			s = fmt.Sprint(v.Any())
		}
		if strings.ContainsAny(s, "\r\n") {
			return slog.String(a.Key, oneLine(s))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
