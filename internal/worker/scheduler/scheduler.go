// Package scheduler fires the schedules a worker defines
// (worker.Schedule): it puts their definitions in force at start and
// enqueues each slot's jobs as it falls due, once across every worker that
// defines the schedule.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/schedule"
	"github.com/hopperq/hopper/internal/worker/loop"
	"github.com/hopperq/hopper/jobs"
)

// Definition is a schedule the worker defines, as worker.Schedule made it.
type Definition struct {
	Name   string
	Kind   string // the kind of the jobs it enqueues
	Spec   *schedule.Spec
	Policy schedule.Policy
	Queue  string
	// Hash names the definition by what its row holds (kind, expression,
	// zone, policy, queue): the newest hash seen is the one in force.
	Hash string
	// Entries makes the jobs of the slots given; a panic of the payload
	// function comes back as its error.
	Entries func(slots []time.Time) ([]jobs.Entry, error)
}

// Metrics counts the fires.
type Metrics interface {
	// ScheduleFired counts the jobs a fire of the schedule name enqueued.
	ScheduleFired(name string, jobs int)
	// ScheduleFailed counts a fire of the schedule name that failed.
	ScheduleFailed(name string)
}

// Config is what a Scheduler works with.
type Config struct {
	Queries *db.Queries
	// Begin begins each fire's transaction (the worker's pool), and DBTX
	// scopes what runs on it to the worker's schema (Config.Schema).
	Begin func(context.Context) (pgx.Tx, error)
	DBTX  func(db.DBTX) db.DBTX
	// Log is the worker's logger: a failed pass warns on it with the
	// error as "error", which the worker's logger tells as an outage when
	// the connection was lost.
	Log     *slog.Logger
	Metrics Metrics
	// PollEvery is the longest the firing loop sleeps (the worker's
	// PollInterval), to notice changes made elsewhere.
	PollEvery time.Duration
	// StaleAfter is how long a definition no running worker reports is
	// held in force (the worker's ScheduleStaleAfter); the scheduler
	// reports its own every fifth of it.
	StaleAfter time.Duration
	// Schedules are the worker's definitions, one per name: at least one
	// (a worker without schedules builds no Scheduler).
	Schedules []*Definition
}

func (c *Config) validate() error {
	switch {
	case c.Queries == nil, c.Begin == nil, c.DBTX == nil, c.Log == nil, c.Metrics == nil:
		return errors.New("scheduler: Queries, Begin, DBTX, Log and Metrics are required")
	case c.PollEvery <= 0 || c.StaleAfter <= 0:
		return fmt.Errorf("scheduler: PollEvery (%v) and StaleAfter (%v) must be positive", c.PollEvery, c.StaleAfter)
	case len(c.Schedules) == 0:
		return errors.New("scheduler: no Schedules: a worker without schedules builds no Scheduler")
	}
	seen := make(map[string]bool, len(c.Schedules))
	for i, d := range c.Schedules {
		switch {
		case d == nil:
			return fmt.Errorf("scheduler: Schedules[%d] is nil", i)
		case d.Name == "" || d.Kind == "" || d.Hash == "":
			return fmt.Errorf("scheduler: Schedules[%d] (%q): Name, Kind and Hash are required", i, d.Name)
		case d.Spec == nil || d.Entries == nil:
			return fmt.Errorf("scheduler: schedule %q: Spec and Entries are required", d.Name)
		case seen[d.Name]:
			return fmt.Errorf("scheduler: schedule %q is given twice", d.Name)
		}
		seen[d.Name] = true
	}
	return nil
}

// Scheduler puts the worker's schedules in force at start (Define) and
// fires them as they fall due (Run), each slot once across every worker
// that defines the schedule: a fire takes the schedule's row SKIP LOCKED
// and moves it on by compare-and-set in the transaction that enqueues its
// jobs. A worker without schedules has none.
type Scheduler struct {
	cfg       Config
	schedules map[string]*Definition // by name; read-only
	names     []string               // the schedules' names, sorted
	wake      chan struct{}          // a schedule was triggered or resumed
}

// New returns a Scheduler working with cfg, whose definitions it only
// reads from now on.
func New(cfg Config) (*Scheduler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	schedules := make(map[string]*Definition, len(cfg.Schedules))
	names := make([]string, 0, len(cfg.Schedules))
	for _, d := range cfg.Schedules {
		schedules[d.Name] = d
		names = append(names, d.Name)
	}
	sort.Strings(names)
	return &Scheduler{cfg: cfg, schedules: schedules, names: names, wake: make(chan struct{}, 1)}, nil
}

// Names are the names of the schedules it fires, sorted.
func (s *Scheduler) Names() []string { return s.names }

// Trigger wakes the firing loop when name is one of the worker's
// schedules (a notification said it was triggered or resumed): the
// notifier's OnSchedule.
func (s *Scheduler) Trigger(name string) {
	if s.schedules[name] == nil {
		return
	}
	select {
	case s.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// Define reports this worker's definitions and puts them in force
// where they are the newest, at start. It logs the definitions in force
// that differ from its own (a newer deploy's) and the schedules no running
// worker defines any more.
func (s *Scheduler) Define(ctx context.Context) error {
	if err := s.seeSchedules(ctx); err != nil {
		return fmt.Errorf("worker: start: report schedules: %w", err)
	}
	for _, name := range s.names {
		d := s.schedules[name]
		p := db.DefineScheduleParams{
			Name: d.Name, DefinitionHash: d.Hash, Kind: d.Kind, Expression: d.Spec.Expression(), TimeZone: d.Spec.Zone(),
			Policy: string(d.Policy.Kind), CatchUp: int32(d.Policy.CatchUp), Queue: d.Queue, NextFireAt: d.Spec.Next(time.Now()),
		}
		row, err := s.cfg.Queries.DefineSchedule(ctx, p)
		if errors.Is(err, pgx.ErrNoRows) {
			// Another worker created the schedule while this statement ran:
			// its insert waited for that one and left the row alone, which
			// this statement's snapshot cannot see. Once more sees it.
			row, err = s.cfg.Queries.DefineSchedule(ctx, p)
		}
		if err != nil {
			return fmt.Errorf("worker: start: define schedule %q: %w", name, err)
		}
		if row.ReplacedLiveKind != "" && row.ReplacedLiveKind != d.Kind {
			s.cfg.Log.Warn("this worker's definition of the schedule replaced one of another kind that a running worker defines: "+
				"a renamed kind, or another application's schedule of the same name (names are shared by every application in the schema: rename one)",
				"schedule", name, "kind", d.Kind, "replaced_kind", row.ReplacedLiveKind)
		}
		if !row.InForce {
			s.cfg.Log.Warn("another (newer) definition of this schedule is in force; this worker fires it on that one's times, with its own payload function",
				"schedule", name, "in_force", row.Expression+" in "+row.TimeZone, "here", d.Spec.Expression()+" in "+d.Spec.Zone())
		}
	}
	s.reportStaleSchedules(ctx)
	return nil
}

// seeSchedules tells the database that this worker still defines its
// schedules (first seen now if new).
func (s *Scheduler) seeSchedules(ctx context.Context) error {
	p := db.SeeScheduleVersionsParams{StaleAfterMs: s.cfg.StaleAfter.Milliseconds()}
	for _, name := range s.names {
		p.Names = append(p.Names, name)
		p.Hashes = append(p.Hashes, s.schedules[name].Hash)
	}
	return s.cfg.Queries.SeeScheduleVersions(ctx, p)
}

// reportStaleSchedules logs the schedules whose definition in force no
// running worker has reported lately: kept, not fired, until a worker
// defines them again.
func (s *Scheduler) reportStaleSchedules(ctx context.Context) {
	rows, err := s.cfg.Queries.ListSchedules(ctx)
	if err != nil {
		s.cfg.Log.Warn("listing schedules failed", "error", err)
		return
	}
	for _, r := range rows {
		if r.Stale && s.schedules[r.Name] == nil {
			s.cfg.Log.Warn("schedule defined by no running worker: kept, but not fired until a worker defines it again",
				"schedule", r.Name, "last_reported", r.LastSeenAt)
		}
	}
}

// Run fires this worker's schedules as they fall due, until ctx ends: it
// sleeps until the first is due (at most PollEvery, to notice changes made
// elsewhere; a trigger or resume wakes it at once), fires what is due, and
// reports its definitions now and then. A schedule whose fire
// fails waits out a backoff of its own; the others fire on time.
func (s *Scheduler) Run(ctx context.Context) {
	names := s.names
	reportEvery := max(s.cfg.StaleAfter/5, time.Second) // within a fifth of the stale window
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
		case <-s.wake:
		}
		if time.Since(lastSeen) >= reportEvery {
			if err := s.seeSchedules(ctx); err != nil && ctx.Err() == nil {
				s.cfg.Log.Warn("reporting schedules failed; retrying", "error", err)
			} else {
				lastSeen = time.Now()
			}
		}
		wait := s.cfg.PollEvery
		if err := s.fireDue(ctx, names, backoff); err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			wait = loop.RetryDelay(failures)
			s.cfg.Log.Warn("firing schedules failed; retrying", "error", err, "in", wait)
		} else {
			failures = 0
			if ready := backoff.ready(names, time.Now()); len(ready) > 0 {
				next, err := s.cfg.Queries.NextScheduleFire(ctx, ready)
				if err == nil {
					wait = min(max(time.Until(next), 0), s.cfg.PollEvery)
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
func (s *Scheduler) fireDue(ctx context.Context, names []string, backoff scheduleBackoff) error {
	ready := backoff.ready(names, time.Now())
	for range 1000 { // bounded: whatever is left waits for the next pass
		if len(ready) == 0 {
			return nil
		}
		name, err := s.fireOne(ctx, ready)
		var failed *scheduleError
		switch {
		case errors.As(err, &failed):
			if ctx.Err() != nil {
				return err
			}
			s.cfg.Metrics.ScheduleFailed(failed.name)
			wait := backoff.failed(failed.name, time.Now())
			s.cfg.Log.Error("schedule failed to fire: its slots are tried again after a backoff; other schedules fire on time",
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
	if spec, ok := specs.Load(key); ok {
		return spec.(*schedule.Spec), nil
	}
	spec, err := schedule.Parse(expr, zone)
	if err != nil {
		return nil, err
	}
	specs.Store(key, spec)
	return spec, nil
}

// fireOne takes one due schedule (locked, SKIP LOCKED), enqueues its jobs
// and moves it on by compare-and-set, in one transaction: the slots fire
// once, or (on any failure) not at all and are fired again. It returns the
// name of the schedule it fired, "" when none was due; a failure after it
// took one is a *scheduleError.
func (s *Scheduler) fireOne(ctx context.Context, names []string) (string, error) {
	tx, err := s.cfg.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	q := db.New(s.cfg.DBTX(tx))
	row, err := q.DueSchedule(ctx, names)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	fired, err := s.fireTaken(ctx, tx, q, row)
	if err != nil {
		return "", &scheduleError{name: row.Name, err: err}
	}
	if err := tx.Commit(ctx); err != nil {
		return "", &scheduleError{name: row.Name, err: err}
	}
	s.cfg.Metrics.ScheduleFired(row.Name, fired.Inserted)
	if fired.Duplicates > 0 {
		s.cfg.Log.Warn("a slot's job was enqueued already (its unique key is held): not enqueued again", "schedule", row.Name, "duplicates", fired.Duplicates)
	}
	return row.Name, nil
}

// fireTaken enqueues the jobs of a schedule taken by DueSchedule and moves
// it on, in the transaction tx.
func (s *Scheduler) fireTaken(ctx context.Context, tx pgx.Tx, q *db.Queries, row db.DueScheduleRow) (jobs.BatchResult, error) {
	d := s.schedules[row.Name]
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
	entries, err := d.Entries(slots)
	if err != nil {
		return jobs.BatchResult{}, err
	}
	res, err := jobs.EnqueueBatch(ctx, s.cfg.DBTX(tx), entries)
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
		s.cfg.Log.Debug("schedule fired", "schedule", row.Name, "slots", len(slots), "next", following)
	}
	return res, nil
}
