package schedule

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func berlin(t *testing.T, y int, mo time.Month, d, h, mi int) time.Time {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	return time.Date(y, mo, d, h, mi, 0, 0, loc)
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr, zone string
		want       error
	}{
		{"61 * * * *", "", ErrExpression},
		{"* * * *", "", ErrExpression},
		{"", "", ErrExpression},
		{"@every 0s", "", ErrExpression},
		{"0 0 30 2 *", "", ErrExpression}, // February 30th: never
		{"CRON_TZ=Europe/Berlin 0 * * * *", "", ErrExpression},
		{"@bogus", "", ErrExpression},
		{"0 * * * *", "Mars/Olympus", ErrZone},
		{"0 * * * *", "Local", ErrZone},
	} {
		_, err := Parse(tc.expr, tc.zone)
		require.ErrorIs(t, err, tc.want, "%q in %q", tc.expr, tc.zone)
	}
	for _, ok := range []string{"*/5 * * * *", "0 30 2 * * *", "@every 10m", "@daily", "@hourly", "15 14 1 * *", "0 9 * * MON-FRI"} {
		_, err := Parse(ok, "Europe/Berlin")
		require.NoError(t, err, ok)
	}
}

// TestDST: a daily 02:30 in Europe/Berlin around the 2026 transitions, and
// an hourly and an interval expression over the same nights. The injected
// times are the clock.
func TestDST(t *testing.T) {
	t.Parallel()
	utc := func(ts []time.Time) []string {
		out := make([]string, len(ts))
		for i, x := range ts {
			out[i] = x.UTC().Format("01-02 15:04")
		}
		return out
	}
	walk := func(expr string, from time.Time, n int) []time.Time {
		s, err := Parse(expr, "Europe/Berlin")
		require.NoError(t, err)
		var out []time.Time
		for x := from; len(out) < n; {
			x = s.Next(x)
			out = append(out, x)
		}
		return out
	}
	for _, tc := range []struct {
		name, expr string
		from       time.Time
		want       []string // UTC
	}{
		// Spring forward, 29 March: 02:00 CET becomes 03:00 CEST. 02:30 does
		// not exist that day: it fires once, at 03:30 CEST (01:30 UTC).
		{"02:30 daily, spring forward", "30 2 * * *", berlin(t, 2026, 3, 28, 3, 0),
			[]string{"03-29 01:30", "03-30 00:30", "03-31 00:30"}},
		// Fall back, 25 October: 03:00 CEST becomes 02:00 CET. 02:30 happens
		// twice that day: it fires once, at the first (00:30 UTC).
		{"02:30 daily, fall back", "30 2 * * *", berlin(t, 2026, 10, 24, 3, 0),
			[]string{"10-25 00:30", "10-26 01:30", "10-27 01:30"}},
		// Every hour follows real time: both 02:00s of the fall-back night.
		{"hourly, fall back", "0 * * * *", berlin(t, 2026, 10, 25, 1, 30),
			[]string{"10-25 00:00", "10-25 01:00", "10-25 02:00"}},
		// …and the hour that does not exist is not invented.
		{"hourly, spring forward", "0 * * * *", berlin(t, 2026, 3, 29, 0, 30),
			[]string{"03-29 00:00", "03-29 01:00", "03-29 02:00"}},
		{"every 30m, fall back", "@every 30m", time.Date(2026, 10, 25, 0, 15, 0, 0, time.UTC), // 02:15 CEST
			[]string{"10-25 00:45", "10-25 01:15", "10-25 01:45"}},
	} {
		require.Equal(t, tc.want, utc(walk(tc.expr, tc.from, len(tc.want))), tc.name)
	}
}

// TestDuePolicies: a schedule every minute, due at 10:00, looked at later.
func TestDuePolicies(t *testing.T) {
	t.Parallel()
	s, err := Parse("* * * * *", "")
	require.NoError(t, err)
	at := func(h, m, sec int) time.Time { return time.Date(2026, 11, 22, h, m, sec, 0, time.UTC) }
	hm := func(ts []time.Time) []string {
		out := []string{}
		for _, x := range ts {
			out = append(out, x.Format("15:04"))
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		now       time.Time
		p         Policy
		fire      []string
		following string
	}{
		{"not due yet", at(9, 59, 30), Policy{Kind: Once}, []string{}, "10:00"},
		{"on time, once", at(10, 0, 1), Policy{Kind: Once}, []string{"10:00"}, "10:01"},
		{"on time, skip", at(10, 0, 1), Policy{Kind: Skip}, []string{"10:00"}, "10:01"},
		{"on time, catch up", at(10, 0, 1), Policy{Kind: CatchUp, CatchUp: 5}, []string{"10:00"}, "10:01"},
		{"missed 10 min, once: the latest", at(10, 10, 5), Policy{Kind: Once}, []string{"10:10"}, "10:11"},
		{"missed 10 min, skip: the latest is on time", at(10, 10, 5), Policy{Kind: Skip}, []string{"10:10"}, "10:11"},
		{"missed 10 min, skip: even the latest is late", at(10, 10, 45), Policy{Kind: Skip}, []string{}, "10:11"},
		{"missed 10 min, catch up 3", at(10, 10, 45), Policy{Kind: CatchUp, CatchUp: 3}, []string{"10:08", "10:09", "10:10"}, "10:11"},
		{"missed 2 min, catch up 5: all", at(10, 2, 0), Policy{Kind: CatchUp, CatchUp: 5}, []string{"10:00", "10:01", "10:02"}, "10:03"},
	} {
		fire, following := s.Due(at(10, 0, 0), tc.now, tc.p)
		require.Equal(t, tc.fire, hm(fire), tc.name)
		require.Equal(t, tc.following, following.Format("15:04"), tc.name)
	}
}

// TestDueAfterALongOutage: a schedule every second missed for a year does
// not walk a year of seconds to find its last slots.
func TestDueAfterALongOutage(t *testing.T) {
	t.Parallel()
	s, err := Parse("@every 1s", "")
	require.NoError(t, err)
	next := time.Date(2025, 11, 22, 0, 0, 0, 0, time.UTC)
	now := next.AddDate(1, 0, 0).Add(500 * time.Millisecond)
	began := time.Now()
	fire, following := s.Due(next, now, Policy{Kind: CatchUp, CatchUp: 3})
	require.Less(t, time.Since(began), 5*time.Second, "a stuck walk, not a slow one")
	require.Len(t, fire, 3)
	require.Equal(t, time.Second, fire[2].Sub(fire[1]))
	require.False(t, fire[2].After(now))
	require.True(t, following.After(now))
	require.LessOrEqual(t, following.Sub(now), time.Second)
}
