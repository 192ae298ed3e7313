package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hopperq/hopper/internal/schedule"
	"github.com/hopperq/hopper/internal/worker/scheduler"
	"github.com/hopperq/hopper/jobs"
)

// MissedPolicy says what becomes of the slots of a schedule that no worker
// fired in time (every worker was down, or the schedule was behind).
type MissedPolicy struct{ p schedule.Policy }

// FireOnce coalesces missed slots: however many were missed, one job fires,
// for the most recent of them. The default.
func FireOnce() MissedPolicy { return MissedPolicy{schedule.Policy{Kind: schedule.Once}} }

// SkipMissed fires no missed slot: the schedule goes on at its next slot. A
// slot counts as missed once it is later than its tolerance: a minute, or
// half the interval for schedules that fire more often.
func SkipMissed() MissedPolicy { return MissedPolicy{schedule.Policy{Kind: schedule.Skip}} }

// CatchUp fires up to n of the most recent missed slots, a job each, oldest
// first; older ones are skipped. n is 1 to 10,000.
func CatchUp(n int) MissedPolicy {
	return MissedPolicy{schedule.Policy{Kind: schedule.CatchUp, CatchUp: n}}
}

// ScheduleOption configures one schedule.
type ScheduleOption func(*scheduleOptions)

type scheduleOptions struct {
	zone    string
	missed  MissedPolicy
	enqueue []jobs.EnqueueOption
}

// InZone reads the expression in an IANA time zone ("Europe/Berlin";
// default UTC). On the day its clocks go back, a fixed-time slot that
// occurs twice fires once; on the day they go forward, one that does not
// exist fires once, as long after midnight as it would have (02:30 fires at
// 03:30).
func InZone(name string) ScheduleOption { return func(o *scheduleOptions) { o.zone = name } }

// OnMissed sets the policy for missed slots (default FireOnce).
func OnMissed(p MissedPolicy) ScheduleOption { return func(o *scheduleOptions) { o.missed = p } }

// EnqueueOptions sets the options of the jobs the schedule enqueues (Queue,
// Priority, MaxAttempts …), over the kind's defaults. UniqueKey is not
// allowed: each job's unique key names its schedule and slot.
func EnqueueOptions(opts ...jobs.EnqueueOption) ScheduleOption {
	return func(o *scheduleOptions) { o.enqueue = append(o.enqueue, opts...) }
}

// Schedule defines a periodic job: at every slot of expr (standard five
// fields, an optional leading seconds field, or a descriptor such as
// @every 10m, @hourly or @daily) a job of kind is enqueued, with the
// payload payload(slot) returns. The name is the schedule's identity: every
// worker that defines a schedule of that name takes part in firing it, and
// each slot fires once, whatever crashes, restarts or deploys (see the
// package documentation). The slot is given to payload and written in the
// job's unique key, "schedule:<name>@<slot, RFC 3339 UTC>", so a handler
// can be idempotent per slot and an operator can find the job. Define every
// schedule before Run. Errors wrap ErrInvalidSchedule.
func Schedule[T any](w *Worker, name string, kind *jobs.Kind[T], expr string, payload func(slot time.Time) T, opts ...ScheduleOption) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("schedule %q: %w: %s", name, ErrInvalidSchedule, fmt.Sprintf(format, args...))
	}
	if err := checkScheduleName(name); err != nil {
		return fail("name %v", err)
	}
	if kind == nil || payload == nil {
		return fail("nil kind or payload function")
	}
	o := scheduleOptions{missed: FireOnce()}
	for _, opt := range opts {
		opt(&o)
	}
	spec, err := schedule.Parse(expr, o.zone)
	if err != nil {
		return fail("%v", err)
	}
	if o.missed.p.Kind == "" {
		o.missed = FireOnce()
	}
	if o.missed.p.Kind == schedule.CatchUp && (o.missed.p.CatchUp < 1 || o.missed.p.CatchUp > schedule.MaxCatchUp) {
		return fail("CatchUp(%d): give 1 to %d slots", o.missed.p.CatchUp, schedule.MaxCatchUp)
	}
	var zero T
	sample := kind.Entry(zero, o.enqueue...)
	if err := sample.Err(); err != nil {
		return fail("%v", err)
	}
	if sample.UniqueKey() != "" {
		return fail("EnqueueOptions(UniqueKey(…)): a scheduled job's unique key names its schedule and slot")
	}
	// The definition is what internal/worker/scheduler fires.
	s := &scheduler.Definition{
		Name:   name,
		Kind:   kind.Name(),
		Spec:   spec,
		Policy: o.missed.p,
		Queue:  sample.Queue(),
	}
	s.Hash = definitionHash(s)
	s.Entries = func(slots []time.Time) (out []jobs.Entry, err error) {
		defer func() {
			if r := recover(); r != nil {
				out, err = nil, fmt.Errorf("the payload function panicked: %v\n%s", r, debug.Stack())
			}
		}()
		for _, slot := range slots {
			e := kind.Entry(payload(slot), append(o.enqueue[:len(o.enqueue):len(o.enqueue)], jobs.UniqueKey(SlotKey(name, slot)))...)
			if err := e.Err(); err != nil {
				return nil, fmt.Errorf("the payload of slot %s: %w", slot.Format(time.RFC3339), err)
			}
			out = append(out, e)
		}
		return out, nil
	}
	return w.defineSchedule(s)
}

// SlotKey is the unique key of the job a schedule fires for a slot.
func SlotKey(schedule string, slot time.Time) string {
	return "schedule:" + schedule + "@" + slot.UTC().Format(time.RFC3339Nano)
}

// checkScheduleName applies the rules of kind and queue names.
func checkScheduleName(name string) error {
	switch n := utf8.RuneCountInString(name); {
	case name == "":
		return errors.New("is empty")
	case n > jobs.MaxNameLength:
		return fmt.Errorf("is %d characters long, over the limit of %d", n, jobs.MaxNameLength)
	case !utf8.ValidString(name) || strings.ContainsRune(name, 0):
		return errors.New("is not valid UTF-8 text")
	}
	return nil
}

// definitionHash names a definition by what its row holds: which kind
// fires when, into which queue. (A job's payload, priority and attempts
// come from the code of the worker that fires it.)
func definitionHash(s *scheduler.Definition) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%d\x00%s", s.Kind, s.Spec.Expression(), s.Spec.Zone(), s.Policy.Kind, s.Policy.CatchUp, s.Queue)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func (w *Worker) defineSchedule(s *scheduler.Definition) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running {
		return fmt.Errorf("schedule %q: %w: the worker is already running", s.Name, ErrInvalidSchedule)
	}
	if w.schedules[s.Name] != nil {
		return fmt.Errorf("schedule %q: %w: defined twice", s.Name, ErrInvalidSchedule)
	}
	w.schedules[s.Name] = s
	return nil
}
