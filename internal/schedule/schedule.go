// Package schedule computes when a periodic job is due: it parses cron
// expressions (with github.com/netresearch/go-cron, the maintained fork of
// robfig/cron) in a time zone, and decides, from a schedule's next fire
// time, the time now and a policy for missed slots, which slots fire and
// when the schedule is due next. It is pure: every time is given, so tests
// inject whatever clock they need (DST transitions included).
package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	cron "github.com/netresearch/go-cron"
)

// Errors of Parse.
var (
	// ErrExpression: the expression does not parse, or never fires.
	ErrExpression = errors.New("invalid schedule expression")
	// ErrZone: the time zone is not a known IANA name.
	ErrZone = errors.New("unknown time zone")
)

// parser takes standard 5-field expressions, an optional leading seconds
// field (6 fields), and descriptors (@every 10m, @daily, @hourly …).
var parser = cron.MustNewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Spec is a parsed expression in its time zone.
type Spec struct {
	expr string
	zone *time.Location
	s    cron.Schedule
	// fixedHour: the expression names hours (it is not every hour, nor an
	// interval): a wall-clock time that occurs twice (a DST fall-back) fires
	// once, as cron does for such jobs.
	fixedHour bool
}

// Parse reads an expression in a zone ("" is UTC). The expression may not
// carry a zone of its own (CRON_TZ=, TZ=): the zone is a field of the
// schedule.
func Parse(expr, zone string) (*Spec, error) {
	expr = strings.TrimSpace(expr)
	if strings.HasPrefix(expr, "CRON_TZ=") || strings.HasPrefix(expr, "TZ=") {
		return nil, fmt.Errorf("%w: %q: give the time zone as its own option, not in the expression", ErrExpression, expr)
	}
	loc := time.UTC
	if zone != "" {
		l, err := time.LoadLocation(zone)
		if err != nil || strings.EqualFold(zone, "local") {
			return nil, fmt.Errorf("%w %q (an IANA name such as Europe/Berlin or America/New_York)", ErrZone, zone)
		}
		loc = l
	}
	s, err := parser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrExpression, expr, err)
	}
	spec := &Spec{expr: expr, zone: loc, s: s}
	if ss, ok := s.(*cron.SpecSchedule); ok {
		const everyHour = 1<<24 - 1
		spec.fixedHour = ss.Hour&everyHour != everyHour
	}
	if first := spec.Next(time.Now()); first.IsZero() {
		return nil, fmt.Errorf("%w: %q never fires", ErrExpression, expr)
	}
	return spec, nil
}

// Expression and Zone are what the spec was parsed from.
func (s *Spec) Expression() string { return s.expr }
func (s *Spec) Zone() string       { return s.zone.String() }

// Next is the first slot strictly after t (zero if there is none). On the
// day a zone's clocks go back, a fixed-hour expression's wall-clock time
// that occurs twice fires at its first occurrence only; on the day they go
// forward, a wall-clock time that does not exist fires once, as far after
// midnight as it would have (02:30 becomes 03:30). Interval expressions
// (@every) and every-hour expressions follow real time.
func (s *Spec) Next(t time.Time) time.Time {
	n := s.s.Next(t.In(s.zone))
	for n.After(t) && s.fixedHour && s.repeated(n) {
		n = s.s.Next(n)
	}
	return n
}

// repeated reports whether n's wall-clock time already occurred a DST
// shift earlier (30 minutes to 2 hours: every shift in use).
func (s *Spec) repeated(n time.Time) bool {
	wall := n.In(s.zone).Format("2006-01-02T15:04:05")
	for _, d := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
		if n.Add(-d).In(s.zone).Format("2006-01-02T15:04:05") == wall {
			return true
		}
	}
	return false
}

// Interval is the typical time between two slots (measured at t).
func (s *Spec) Interval(t time.Time) time.Duration {
	a := s.Next(t)
	b := s.Next(a)
	if a.IsZero() || b.IsZero() {
		return 0
	}
	return b.Sub(a)
}

// Policy says what becomes of slots missed while no worker fired them.
type Policy struct {
	Kind PolicyKind
	// CatchUp is, for KindCatchUp, how many of the most recent due slots
	// fire.
	CatchUp int
}

// PolicyKind names a policy.
type PolicyKind string

// The policies.
const (
	// Skip: missed slots do not fire; the schedule goes on at its next
	// slot. A slot fires only if it is not later than its tolerance.
	Skip PolicyKind = "skip"
	// Once: however many slots were missed, one job fires, for the most
	// recent of them (the default).
	Once PolicyKind = "once"
	// CatchUp: up to CatchUp of the most recent due slots fire, one job
	// each; older ones are skipped.
	CatchUp PolicyKind = "catch_up"
)

// MaxCatchUp bounds a catch-up policy.
const MaxCatchUp = 10_000

// Tolerance is how late a slot may fire and still count as on time: a
// minute, or half the interval for expressions that fire more often.
func (s *Spec) Tolerance(at time.Time) time.Duration {
	if i := s.Interval(at); i > 0 && i/2 < time.Minute {
		return i / 2
	}
	return time.Minute
}

// Due decides, for a schedule whose next slot is next, at now, which slots
// fire (oldest first) and when the schedule is due next (the first slot
// after now). Slots before next are never fired again: next only moves
// forward.
func (s *Spec) Due(next, now time.Time, p Policy) (fire []time.Time, following time.Time) {
	following = s.Next(now)
	if next.After(now) {
		return nil, next
	}
	want := 1
	if p.Kind == CatchUp {
		want = max(1, min(p.CatchUp, MaxCatchUp))
	}
	due := s.lastSlots(next, now, want)
	switch p.Kind {
	case Skip:
		if last := due[len(due)-1]; now.Sub(last) <= s.Tolerance(last) {
			return due[len(due)-1:], following
		}
		return nil, following
	case CatchUp:
		return due, following
	default: // Once
		return due[len(due)-1:], following
	}
}

// lastSlots returns up to n of the most recent slots in [from, now], oldest
// first; from itself is a slot and not after now. It walks forward from a
// point far enough back to hold n slots, not from from: a schedule missed
// for a year does not walk a year of seconds.
func (s *Spec) lastSlots(from, now time.Time, n int) []time.Time {
	interval := max(s.Interval(now.Add(-time.Hour)), time.Second)
	for back := time.Duration(n+1) * interval; ; back *= 2 {
		start := now.Add(-back)
		var out []time.Time
		t := from
		if start.After(from) {
			t = s.Next(start.Add(-time.Nanosecond))
		}
		for ; !t.IsZero() && !t.After(now); t = s.Next(t) {
			out = append(out, t)
			if len(out) > n {
				out = out[1:]
			}
		}
		if len(out) >= n || !start.After(from) {
			return out
		}
	}
}
