package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// fakeClock is a clock a test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// TestOutageReminderSchedule: an outage logs one line when it begins; each
// failure after that logs a reminder only once the gap since the last line
// (5s, 10s, 20s, ... at most 5 min) has passed; a success logs the return
// once, with the duration and the failures counted.
func TestOutageReminderSchedule(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	tests := []struct {
		name      string
		failAt    []time.Duration // failures, from the outage's start
		backAt    time.Duration   // then a success
		reminders []time.Duration // when reminders are logged
		wantBack  string          // the return's "after"
		wantCount int             // and its "failed_attempts"
	}{
		{name: "one failure", failAt: []time.Duration{0}, backAt: time.Second, wantBack: "1s", wantCount: 1},
		{name: "just before the first reminder", failAt: []time.Duration{0, time.Second, 4999 * time.Millisecond}, backAt: 6 * time.Second,
			wantBack: "6s", wantCount: 3},
		{name: "every second for a minute", failAt: every(time.Second, 61), backAt: 61 * time.Second,
			// 5, then +10 = 15, +20 = 35; the next is due at 75.
			reminders: []time.Duration{5 * time.Second, 15 * time.Second, 35 * time.Second}, wantBack: "1m1s", wantCount: 61},
		{name: "late failures push the schedule", failAt: []time.Duration{0, 7 * time.Second, 12 * time.Second, 18 * time.Second},
			backAt: 20 * time.Second, reminders: []time.Duration{7 * time.Second, 18 * time.Second}, wantBack: "20s", wantCount: 4},
		{name: "capped at five minutes", failAt: every(10*time.Second, 200), backAt: 2000 * time.Second,
			// 5→10, +10→20, +20→40, +40→80, +80→160, +160→320, +320 > 300 capped: 620, 920, 1220, 1520, 1820.
			reminders: secs(10, 20, 40, 80, 160, 320, 620, 920, 1220, 1520, 1820), wantBack: "33m20s", wantCount: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			clock := &fakeClock{t: start}
			var buf bytes.Buffer
			o := newOutage(slog.New(slog.NewTextHandler(&buf, nil)), clock.now)
			var got []time.Duration
			for _, at := range tt.failAt {
				clock.t = start.Add(at)
				before := buf.Len()
				o.failed("claim failed; retrying", refused)
				if line := buf.String()[before:]; strings.Contains(line, "still cannot reach") {
					got = append(got, at)
					require.Contains(t, line, fmt.Sprintf("for=%v", at.Round(time.Second)))
				}
			}
			require.Equal(t, tt.reminders, got)
			clock.t = start.Add(tt.backAt)
			o.reached()
			o.reached() // the second success says nothing
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			require.Len(t, lines, 2+len(tt.reminders), buf.String())
			require.Contains(t, lines[0], "hopper worker lost the database")
			require.Contains(t, lines[0], `while="claim failed; retrying"`)
			require.Contains(t, lines[len(lines)-1], "hopper worker reached the database again")
			require.Contains(t, lines[len(lines)-1], fmt.Sprintf("after=%s failed_attempts=%d", tt.wantBack, tt.wantCount))
			require.LessOrEqual(t, len(tt.reminders), reminderBound(tt.backAt))
		})
	}
}

func every(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i) * d
	}
	return out
}

func secs(s ...int) []time.Duration {
	out := make([]time.Duration, len(s))
	for i, v := range s {
		out[i] = time.Duration(v) * time.Second
	}
	return out
}

// TestReminderGap pins the schedule itself.
func TestReminderGap(t *testing.T) {
	t.Parallel()
	for n, want := range secs(5, 10, 20, 40, 80, 160, 300, 300, 300) {
		require.Equal(t, want, reminderGap(n), "gap %d", n)
	}
	require.Equal(t, reminderMax, reminderGap(1000))
}

// TestConnectionLost: what counts as losing the database, and what is an
// answer about the statement.
func TestConnectionLost(t *testing.T) {
	t.Parallel()
	pg := func(code string) error {
		return fmt.Errorf("claim: %w", &pgconn.PgError{Severity: "FATAL", Code: code, Message: "m"})
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"cancelled", fmt.Errorf("x: %w", context.Canceled), false},
		{"admin shutdown", pg("57P01"), true},
		{"crash shutdown", pg("57P02"), true},
		{"cannot connect now", pg("57P03"), true},
		{"connection failure", pg("08006"), true},
		{"protocol violation", pg("08P01"), true},
		{"read-only", pg("25006"), true},
		{"query cancelled", pg("57014"), false},
		{"unique violation", pg("23505"), false},
		{"serialization", pg("40001"), false},
		{"net error", fmt.Errorf("x: %w", &net.OpError{Op: "read", Err: errors.New("reset")}), true},
		{"eof", fmt.Errorf("receive: %w", io.ErrUnexpectedEOF), true},
		{"conn closed", fmt.Errorf("x: %w", pgconn.ErrConnClosed), true},
		{"plain", errors.New("payload too large"), false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, connectionLost(tt.err), tt.name)
	}
}

// TestOneLine: a message over several lines comes out on one.
func TestOneLine(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"", ""},
		{"failed to connect to `user=u database=d`:\n\t127.0.0.1:1 (h): refused\n\t127.0.0.1:2 (h): refused",
			"failed to connect to `user=u database=d`: 127.0.0.1:1 (h): refused; 127.0.0.1:2 (h): refused"},
		{errors.Join(errors.New("a"), errors.New("b")).Error(), "a; b"},
		{"trailing\n", "trailing"},
		{"crlf\r\nnext", "crlf; next"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, oneLine(tt.in), "%q", tt.in)
	}
}

// TestOutageHandler: a loop's WARN about a lost connection goes to the
// outage; one about a job, one at another level or about another error
// passes, on one line.
func TestOutageHandler(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	base := slog.New(slog.NewTextHandler(&buf, nil)).With("worker", "w1")
	o := newOutage(base, time.Now)
	log := slog.New(&outageHandler{inner: base.Handler(), o: o})
	lost := fmt.Errorf("claim: %w", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")})
	joined := fmt.Errorf("sweep: %w", errors.Join(errors.New("first"), errors.New("second")))

	log.Warn("sweep failed; retrying at the next interval", "error", lost)
	log.Warn("claim failed; retrying", "queue", "q", "error", lost) // counted only
	log.With("job_id", 7).Warn("job failed", "error", lost)
	log.Warn("lease lost", "job_id", 8, "error", lost)
	log.Error("could not give back unfinished jobs", "error", lost)
	log.Warn("pruning failed", "error", joined, "detail", "a\nb")
	o.reached()

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 6, buf.String())
	require.Contains(t, lines[0], `msg="hopper worker lost the database`)
	require.Contains(t, lines[0], "worker=w1")
	require.Contains(t, lines[1], "job_id=7")
	require.Contains(t, lines[2], "job_id=8")
	require.Contains(t, lines[3], "level=ERROR")
	require.Contains(t, lines[4], `error="sweep: first; second" detail="a; b"`)
	require.Contains(t, lines[5], "hopper worker reached the database again")
	require.Contains(t, lines[5], "failed_attempts=2")
}
