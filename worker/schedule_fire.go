package worker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/schedule"
	"github.com/hopperq/hopper/jobs"
)

// scheduleNames lists the schedules this worker defines, sorted.
func (w *Worker) scheduleNames() []string {
	names := make([]string, 0, len(w.schedules))
	for name := range w.schedules {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// defineSchedules reports this worker's definitions and puts them in force
// where they are the newest, at start. It logs the definitions in force
// that differ from its own (a newer deploy's) and the schedules no running
// worker defines any more.
func (w *Worker) defineSchedules(ctx context.Context) error {
	if len(w.schedules) == 0 {
		return nil
	}
	if err := w.seeSchedules(ctx); err != nil {
		return fmt.Errorf("hopper: worker: start: report schedules: %w", err)
	}
	for _, name := range w.scheduleNames() {
		s := w.schedules[name]
		p := db.DefineScheduleParams{
			Name: s.name, DefinitionHash: s.hash, Kind: s.kind, Expression: s.spec.Expression(), TimeZone: s.spec.Zone(),
			Policy: string(s.policy.Kind), CatchUp: int32(s.policy.CatchUp), Queue: s.queue, NextFireAt: s.spec.Next(time.Now()),
		}
		row, err := w.q.DefineSchedule(ctx, p)
		if errors.Is(err, pgx.ErrNoRows) {
			// Another worker created the schedule while this statement ran:
			// its insert waited for that one and left the row alone, which
			// this statement's snapshot cannot see. Once more sees it.
			row, err = w.q.DefineSchedule(ctx, p)
		}
		if err != nil {
			return fmt.Errorf("hopper: worker: start: define schedule %q: %w", name, err)
		}
		if !row.InForce {
			w.log.Warn("another (newer) definition of this schedule is in force; this worker fires it on that one's times, with its own payload function",
				"schedule", name, "in_force", row.Expression+" in "+row.TimeZone, "here", s.spec.Expression()+" in "+s.spec.Zone())
		}
	}
	w.reportStaleSchedules(ctx)
	return nil
}

// seeSchedules tells the database that this worker still defines its
// schedules (first seen now if new).
func (w *Worker) seeSchedules(ctx context.Context) error {
	p := db.SeeScheduleVersionsParams{StaleAfterMs: w.cfg.ScheduleStaleAfter.Milliseconds()}
	for _, name := range w.scheduleNames() {
		p.Names = append(p.Names, name)
		p.Hashes = append(p.Hashes, w.schedules[name].hash)
	}
	return w.q.SeeScheduleVersions(ctx, p)
}

// reportStaleSchedules logs the schedules whose definition in force no
// running worker has reported lately: kept, not fired, until a worker
// defines them again.
func (w *Worker) reportStaleSchedules(ctx context.Context) {
	rows, err := w.q.ListSchedules(ctx)
	if err != nil {
		w.log.Warn("listing schedules failed", "error", err)
		return
	}
	for _, r := range rows {
		if r.Stale && w.schedules[r.Name] == nil {
			w.log.Warn("schedule defined by no running worker: kept, but not fired until a worker defines it again",
				"schedule", r.Name, "last_reported", r.LastSeenAt)
		}
	}
}

// fireSchedules fires this worker's schedules as they fall due, until ctx
// ends: it sleeps until the first is due (at most PollInterval, to notice
// changes made elsewhere; a trigger or resume wakes it at once), fires what
// is due, and reports its definitions now and then.
func (w *Worker) fireSchedules(ctx context.Context) {
	names := w.scheduleNames()
	heartbeat := max(w.cfg.ScheduleStaleAfter/5, time.Second)
	lastSeen := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-w.scheduleWake:
		}
		if time.Since(lastSeen) >= heartbeat {
			if err := w.seeSchedules(ctx); err != nil && ctx.Err() == nil {
				w.log.Warn("reporting schedules failed; retrying", "error", err)
			} else {
				lastSeen = time.Now()
			}
		}
		wait := w.cfg.PollInterval
		if err := w.fireDue(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			wait = retryDelay(failures)
			w.log.Warn("firing schedules failed; retrying", "error", err, "in", wait)
		} else {
			failures = 0
			next, err := w.q.NextScheduleFire(ctx, names)
			if err == nil {
				wait = min(max(time.Until(next), 0), w.cfg.PollInterval)
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

// fireDue fires every schedule of this worker that is due, one
// transaction each.
func (w *Worker) fireDue(ctx context.Context) error {
	names := w.scheduleNames()
	for range 1000 { // bounded: whatever is left waits for the next pass
		fired, err := w.fireOne(ctx, names)
		if err != nil || !fired {
			return err
		}
	}
	return nil
}

// specs caches the parsed expressions in force, which may be another
// deploy's.
var specs sync.Map // "expression\x00zone" → *schedule.Spec

func specOf(expr, zone string) (*schedule.Spec, error) {
	key := expr + "\x00" + zone
	if s, ok := specs.Load(key); ok {
		return s.(*schedule.Spec), nil
	}
	s, err := schedule.Parse(expr, zone)
	if err != nil {
		return nil, err
	}
	specs.Store(key, s)
	return s, nil
}

// fireOne takes one due schedule (locked, SKIP LOCKED), enqueues its jobs
// and moves it on by compare-and-set, in one transaction: the slots fire
// once, or (on any failure) not at all and are fired again. It reports
// whether it found one.
func (w *Worker) fireOne(ctx context.Context, names []string) (bool, error) {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	q := db.New(w.dbtx(tx))
	row, err := q.DueSchedule(ctx, names)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	s := w.schedules[row.Name]
	spec, err := specOf(row.Expression, row.TimeZone)
	if err != nil {
		return false, fmt.Errorf("schedule %q: the definition in force does not parse here: %w", row.Name, err)
	}
	var slots []time.Time
	following := row.NextFireAt
	var last *time.Time
	if !row.Paused && !row.NextFireAt.After(row.Now) {
		var fire []time.Time
		fire, following = spec.Due(row.NextFireAt, row.Now, schedule.Policy{Kind: schedule.PolicyKind(row.Policy), CatchUp: int(row.CatchUp)})
		slots = fire
		if len(fire) > 0 {
			last = &fire[len(fire)-1]
		}
	}
	if row.TriggeredAt != nil {
		slots = append(slots, *row.TriggeredAt)
	}
	entries, err := s.entries(slots)
	if err != nil {
		return false, fmt.Errorf("schedule %q: %w", row.Name, err)
	}
	res, err := jobs.EnqueueBatch(ctx, w.dbtx(tx), entries)
	if err != nil {
		return false, fmt.Errorf("schedule %q: %w", row.Name, err)
	}
	moved, err := q.AdvanceSchedule(ctx, db.AdvanceScheduleParams{
		Name: row.Name, Following: following, Fired: len(slots) > 0, LastSlot: last,
		ExpectedNext: row.NextFireAt, ExpectedTrigger: row.TriggeredAt,
	})
	if err != nil {
		return false, fmt.Errorf("schedule %q: %w", row.Name, err)
	}
	if moved != 1 {
		return false, fmt.Errorf("schedule %q moved meanwhile: nothing fired", row.Name)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("schedule %q: %w", row.Name, err)
	}
	w.metrics.scheduleFired(row.Name, res.Inserted)
	if res.Duplicates > 0 {
		w.log.Warn("a slot's job was enqueued already (its unique key is held): not enqueued again", "schedule", row.Name, "duplicates", res.Duplicates)
	}
	if len(slots) > 0 {
		w.log.Debug("schedule fired", "schedule", row.Name, "slots", len(slots), "next", following)
	}
	return true, nil
}
