package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/schedule"
	"github.com/hopperq/hopper/jobs"
)

// scheduler puts this worker's schedules in force at start (define) and
// fires them as they fall due (run), each slot once across every worker
// that defines the schedule: a fire takes the schedule's row SKIP LOCKED
// and moves it on by compare-and-set in the transaction that enqueues its
// jobs. A worker without schedules has none.
type scheduler struct {
	q *db.Queries
	// pool and dbtx begin each fire's transaction (scoped to
	// Config.Schema).
	pool       *pgxpool.Pool
	dbtx       func(db.DBTX) db.DBTX
	log        *slog.Logger
	metrics    *metrics
	pollEvery  time.Duration // Config.PollInterval
	staleAfter time.Duration // Config.ScheduleStaleAfter
	schedules  map[string]*scheduled
	names      []string      // the schedules' names, sorted
	wake       chan struct{} // a schedule was triggered or resumed
}

// newScheduler fires schedules, the definitions Worker.Schedule made
// (read-only from now on).
func newScheduler(q *db.Queries, pool *pgxpool.Pool, dbtx func(db.DBTX) db.DBTX, log *slog.Logger, m *metrics, cfg *Config,
	schedules map[string]*scheduled) *scheduler {
	names := make([]string, 0, len(schedules))
	for name := range schedules {
		names = append(names, name)
	}
	sort.Strings(names)
	return &scheduler{q: q, pool: pool, dbtx: dbtx, log: log, metrics: m, pollEvery: cfg.PollInterval,
		staleAfter: cfg.ScheduleStaleAfter, schedules: schedules, names: names, wake: make(chan struct{}, 1)}
}

// triggered wakes the firing loop when name is one of this worker's
// schedules (a notification said it was triggered or resumed).
func (m *scheduler) triggered(name string) {
	if m.schedules[name] != nil {
		signal(m.wake)
	}
}

// define reports this worker's definitions and puts them in force
// where they are the newest, at start. It logs the definitions in force
// that differ from its own (a newer deploy's) and the schedules no running
// worker defines any more.
func (m *scheduler) define(ctx context.Context) error {
	if err := m.seeSchedules(ctx); err != nil {
		return fmt.Errorf("worker: start: report schedules: %w", err)
	}
	for _, name := range m.names {
		s := m.schedules[name]
		p := db.DefineScheduleParams{
			Name: s.name, DefinitionHash: s.hash, Kind: s.kind, Expression: s.spec.Expression(), TimeZone: s.spec.Zone(),
			Policy: string(s.policy.Kind), CatchUp: int32(s.policy.CatchUp), Queue: s.queue, NextFireAt: s.spec.Next(time.Now()),
		}
		row, err := m.q.DefineSchedule(ctx, p)
		if errors.Is(err, pgx.ErrNoRows) {
			// Another worker created the schedule while this statement ran:
			// its insert waited for that one and left the row alone, which
			// this statement's snapshot cannot see. Once more sees it.
			row, err = m.q.DefineSchedule(ctx, p)
		}
		if err != nil {
			return fmt.Errorf("worker: start: define schedule %q: %w", name, err)
		}
		if row.ReplacedLiveKind != "" && row.ReplacedLiveKind != s.kind {
			m.log.Warn("this worker's definition of the schedule replaced one of another kind that a running worker defines: "+
				"a renamed kind, or another application's schedule of the same name (names are shared by every application in the schema: rename one)",
				"schedule", name, "kind", s.kind, "replaced_kind", row.ReplacedLiveKind)
		}
		if !row.InForce {
			m.log.Warn("another (newer) definition of this schedule is in force; this worker fires it on that one's times, with its own payload function",
				"schedule", name, "in_force", row.Expression+" in "+row.TimeZone, "here", s.spec.Expression()+" in "+s.spec.Zone())
		}
	}
	m.reportStaleSchedules(ctx)
	return nil
}

// seeSchedules tells the database that this worker still defines its
// schedules (first seen now if new).
func (m *scheduler) seeSchedules(ctx context.Context) error {
	p := db.SeeScheduleVersionsParams{StaleAfterMs: m.staleAfter.Milliseconds()}
	for _, name := range m.names {
		p.Names = append(p.Names, name)
		p.Hashes = append(p.Hashes, m.schedules[name].hash)
	}
	return m.q.SeeScheduleVersions(ctx, p)
}

// reportStaleSchedules logs the schedules whose definition in force no
// running worker has reported lately: kept, not fired, until a worker
// defines them again.
func (m *scheduler) reportStaleSchedules(ctx context.Context) {
	rows, err := m.q.ListSchedules(ctx)
	if err != nil {
		m.log.Warn("listing schedules failed", "error", err)
		return
	}
	for _, r := range rows {
		if r.Stale && m.schedules[r.Name] == nil {
			m.log.Warn("schedule defined by no running worker: kept, but not fired until a worker defines it again",
				"schedule", r.Name, "last_reported", r.LastSeenAt)
		}
	}
}

// Run fires this worker's schedules as they fall due, until ctx ends: it sleeps until the first is due (at most PollInterval, to notice
// changes made elsewhere; a trigger or resume wakes it at once), fires what
// is due, and reports its definitions now and then. A schedule whose fire
// fails waits out a backoff of its own; the others fire on time.
func (m *scheduler) Run(ctx context.Context) {
	names := m.names
	heartbeat := max(m.staleAfter/5, time.Second)
	lastSeen := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	failures := 0
	backoff := scheduleBackoff{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-m.wake:
		}
		if time.Since(lastSeen) >= heartbeat {
			if err := m.seeSchedules(ctx); err != nil && ctx.Err() == nil {
				m.log.Warn("reporting schedules failed; retrying", "error", err)
			} else {
				lastSeen = time.Now()
			}
		}
		wait := m.pollEvery
		if err := m.fireDue(ctx, names, backoff); err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			wait = retryDelay(failures)
			m.log.Warn("firing schedules failed; retrying", "error", err, "in", wait)
		} else {
			failures = 0
			if ready := backoff.ready(names, time.Now()); len(ready) > 0 {
				next, err := m.q.NextScheduleFire(ctx, ready)
				if err == nil {
					wait = min(max(time.Until(next), 0), m.pollEvery)
				}
			}
			if retry := backoff.nextRetry(); !retry.IsZero() {
				wait = min(wait, max(time.Until(retry), 0))
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

// fireDue fires every schedule of names that is due and not waiting out a
// failure, one transaction each. A schedule whose fire fails is logged,
// counted and set to wait (backoff), and the pass goes on with the
// others; an error returned is the database's, not a schedule's.
func (m *scheduler) fireDue(ctx context.Context, names []string, backoff scheduleBackoff) error {
	ready := backoff.ready(names, time.Now())
	for range 1000 { // bounded: whatever is left waits for the next pass
		if len(ready) == 0 {
			return nil
		}
		name, err := m.fireOne(ctx, ready)
		var failed *scheduleError
		switch {
		case errors.As(err, &failed):
			if ctx.Err() != nil {
				return err
			}
			m.metrics.scheduleFailed(failed.name)
			wait := backoff.failed(failed.name, time.Now())
			m.log.Error("schedule failed to fire: its slots are tried again after a backoff; other schedules fire on time",
				"schedule", failed.name, "error", failed.err, "retry_in", wait)
			ready = backoff.ready(names, time.Now())
		case err != nil:
			return err
		case name == "":
			return nil // nothing due
		default:
			backoff.succeeded(name)
		}
	}
	return nil
}

// scheduleError is the failure of one schedule's fire: its payload
// function, its enqueue or its compare-and-set. It costs that schedule a
// backoff, not the others their turn.
type scheduleError struct {
	name string
	err  error
}

func (e *scheduleError) Error() string { return fmt.Sprintf("schedule %q: %v", e.name, e.err) }
func (e *scheduleError) Unwrap() error { return e.err }

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
// once, or (on any failure) not at all and are fired again. It returns the
// name of the schedule it fired, "" when none was due; a failure after it
// took one is a *scheduleError.
func (m *scheduler) fireOne(ctx context.Context, names []string) (string, error) {
	tx, err := m.pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	q := db.New(m.dbtx(tx))
	row, err := q.DueSchedule(ctx, names)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	fired, err := m.fireTaken(ctx, tx, q, row)
	if err != nil {
		return "", &scheduleError{name: row.Name, err: err}
	}
	if err := tx.Commit(ctx); err != nil {
		return "", &scheduleError{name: row.Name, err: err}
	}
	m.metrics.scheduleFired(row.Name, fired.Inserted)
	if fired.Duplicates > 0 {
		m.log.Warn("a slot's job was enqueued already (its unique key is held): not enqueued again", "schedule", row.Name, "duplicates", fired.Duplicates)
	}
	return row.Name, nil
}

// fireTaken enqueues the jobs of a schedule taken by DueSchedule and moves
// it on, in the transaction tx.
func (m *scheduler) fireTaken(ctx context.Context, tx pgx.Tx, q *db.Queries, row db.DueScheduleRow) (jobs.BatchResult, error) {
	s := m.schedules[row.Name]
	spec, err := specOf(row.Expression, row.TimeZone)
	if err != nil {
		return jobs.BatchResult{}, fmt.Errorf("the definition in force does not parse here: %w", err)
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
		return jobs.BatchResult{}, err
	}
	res, err := jobs.EnqueueBatch(ctx, m.dbtx(tx), entries)
	if err != nil {
		return jobs.BatchResult{}, err
	}
	moved, err := q.AdvanceSchedule(ctx, db.AdvanceScheduleParams{
		Name: row.Name, Following: following, Fired: len(slots) > 0, LastSlot: last,
		ExpectedNext: row.NextFireAt, ExpectedTrigger: row.TriggeredAt,
	})
	if err != nil {
		return jobs.BatchResult{}, err
	}
	if moved != 1 {
		return jobs.BatchResult{}, errors.New("moved meanwhile: nothing fired")
	}
	if len(slots) > 0 {
		m.log.Debug("schedule fired", "schedule", row.Name, "slots", len(slots), "next", following)
	}
	return res, nil
}
