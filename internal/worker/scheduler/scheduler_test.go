package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/schedule"
	"github.com/hopperq/hopper/internal/testbed/passbed"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type tick struct {
	Slot time.Time `json:"slot"`
}

var tickKind = jobs.MustDefine[tick]("scheduler.tick")

// hourly is a definition that fires every hour into queue default, each
// slot a job whose unique key names the schedule and the slot, as
// worker.Schedule's do; fail, when set, is the error of its payload.
func hourly(t *testing.T, name string, fail error) *Definition {
	t.Helper()
	spec, err := schedule.Parse("0 * * * *", "")
	require.NoError(t, err)
	return &Definition{Name: name, Kind: tickKind.Name(), Spec: spec, Policy: schedule.Policy{Kind: schedule.CatchUp, CatchUp: 10},
		Queue: "default", Hash: "hash-" + name,
		Entries: func(slots []time.Time) ([]jobs.Entry, error) {
			if fail != nil {
				return nil, fail
			}
			var out []jobs.Entry
			for _, slot := range slots {
				out = append(out, tickKind.Entry(tick{Slot: slot}, jobs.UniqueKey(slotKey(name, slot))))
			}
			return out, nil
		}}
}

func slotKey(name string, slot time.Time) string {
	return "schedule:" + name + "@" + slot.UTC().Format(time.RFC3339Nano)
}

// config is a whole Config on b's schema for defs.
func config(b *passbed.Bed, defs ...*Definition) Config {
	return Config{Queries: b.Q, Begin: b.DB.Pool.Begin, DBTX: func(d db.DBTX) db.DBTX { return d }, Log: b.Log,
		Metrics: b.Metrics, PollEvery: time.Hour, StaleAfter: time.Minute, Schedules: defs}
}

// missed makes name due since two hours: its next slot two hours back.
func missed(t *testing.T, b *passbed.Bed, name string) time.Time {
	t.Helper()
	var next time.Time
	require.NoError(t, b.DB.Pool.QueryRow(b.Ctx,
		"UPDATE hopper_schedules SET next_fire_at = date_trunc('hour', now()) - interval '2 hours' WHERE name = $1 RETURNING next_fire_at",
		name).Scan(&next))
	return next
}

// keys are the unique keys of the jobs the schedule name enqueued, oldest
// slot first.
func keys(t *testing.T, b *passbed.Bed, name string) []string {
	t.Helper()
	rows, err := b.DB.Pool.Query(b.Ctx, "SELECT unique_key FROM hopper_jobs WHERE unique_key LIKE $1 ORDER BY unique_key", "schedule:"+name+"@%")
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

func nextFire(t *testing.T, b *passbed.Bed, name string) time.Time {
	t.Helper()
	var next time.Time
	require.NoError(t, b.DB.Pool.QueryRow(b.Ctx, "SELECT next_fire_at FROM hopper_schedules WHERE name = $1", name).Scan(&next))
	return next
}

// Define puts the definitions in force, due at their next slot; a pass
// fires every missed slot (CatchUp), a job each keyed by its slot, moves
// the schedule past now and counts the jobs; the next pass finds nothing
// due.
func TestSchedulerFiresMissedSlots(t *testing.T) {
	t.Parallel()
	b := passbed.New(t)
	s, err := New(config(b, hourly(t, "hourly", nil)))
	require.NoError(t, err)
	require.NoError(t, s.Define(b.Ctx))
	list, err := b.Q.ListSchedules(b.Ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "0 * * * *", list[0].Expression)
	require.True(t, list[0].NextFireAt.After(time.Now()))

	require.NoError(t, s.fireDue(b.Ctx, s.Names(), scheduleBackoff{}))
	require.Empty(t, keys(t, b, "hourly"), "not due yet")

	from := missed(t, b, "hourly")
	require.NoError(t, s.fireDue(b.Ctx, s.Names(), scheduleBackoff{}))
	got := keys(t, b, "hourly")
	require.GreaterOrEqual(t, len(got), 3, "two hours back, one back, this hour")
	for i, k := range got {
		require.Equal(t, slotKey("hourly", from.Add(time.Duration(i)*time.Hour)), k)
	}
	require.Equal(t, len(got), b.Metrics.Fired("hourly"))
	require.True(t, nextFire(t, b, "hourly").After(time.Now()), "moved on past now")

	require.NoError(t, s.fireDue(b.Ctx, s.Names(), scheduleBackoff{}))
	require.Len(t, keys(t, b, "hourly"), len(got), "nothing fired twice")
}

// A schedule whose payload fails costs only itself: the pass counts and
// logs its failure, sets it to wait out a backoff, leaves its row as it
// was (nothing enqueued) and fires the others; the next pass does not try
// it again before its backoff ends.
func TestSchedulerFailureCostsOnlyItself(t *testing.T) {
	t.Parallel()
	b := passbed.New(t)
	s, err := New(config(b, hourly(t, "a-broken", errors.New("no payload today")), hourly(t, "b-healthy", nil)))
	require.NoError(t, err)
	require.NoError(t, s.Define(b.Ctx))
	brokenFrom := missed(t, b, "a-broken")
	missed(t, b, "b-healthy")

	backoff := scheduleBackoff{}
	require.NoError(t, s.fireDue(b.Ctx, s.Names(), backoff))
	require.Equal(t, 1, b.Metrics.Failed("a-broken"))
	require.Empty(t, keys(t, b, "a-broken"))
	require.True(t, nextFire(t, b, "a-broken").Equal(brokenFrom), "rolled back: its slots are still due")
	require.NotEmpty(t, keys(t, b, "b-healthy"))
	require.Zero(t, b.Metrics.Failed("b-healthy"))
	require.Equal(t, []string{"b-healthy"}, backoff.ready(s.Names(), time.Now()))
	retry := backoff.nextRetry()
	require.False(t, retry.IsZero())
	require.LessOrEqual(t, time.Until(retry), time.Second)

	require.NoError(t, s.fireDue(b.Ctx, s.Names(), backoff))
	require.Equal(t, 1, b.Metrics.Failed("a-broken"), "waiting out its backoff, not tried again")
}

// Run fires a schedule triggered from elsewhere as soon as Trigger wakes
// it, long before its PollEvery (an hour), and returns when its context
// ends.
func TestSchedulerRunWakesOnTrigger(t *testing.T) {
	t.Parallel()
	b := passbed.New(t)
	cfg := config(b, hourly(t, "woken", nil))
	var begun atomic.Int32
	cfg.Begin = func(ctx context.Context) (pgx.Tx, error) { begun.Add(1); return b.DB.Pool.Begin(ctx) }
	s, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, s.Define(b.Ctx))
	ctx, cancel := context.WithCancel(b.Ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	testdb.WaitFor(t, "the first pass", func() bool { return begun.Load() > 0 })

	at, err := b.Q.TriggerSchedule(b.Ctx, "woken")
	require.NoError(t, err)
	s.Trigger("woken")
	testdb.WaitFor(t, "the trigger fired", func() bool { return len(keys(t, b, "woken")) == 1 })
	require.Equal(t, []string{slotKey("woken", at)}, keys(t, b, "woken"))
	cancel()
	<-done
}

// Trigger wakes the loop for the worker's own schedules only, and a
// wake-up pending already is not doubled.
func TestSchedulerTrigger(t *testing.T) {
	t.Parallel()
	s, err := New(whole(t))
	require.NoError(t, err)
	s.Trigger("another-apps")
	require.Empty(t, s.wake)
	s.Trigger("mine")
	s.Trigger("mine")
	require.Len(t, s.wake, 1)
}

// whole is a Config New accepts, without a database.
func whole(t *testing.T) Config {
	return Config{Queries: db.New(nil), Begin: func(context.Context) (pgx.Tx, error) { return nil, errors.New("no database") },
		DBTX: func(d db.DBTX) db.DBTX { return d }, Log: slog.Default(), Metrics: &passbed.Metrics{},
		PollEvery: time.Second, StaleAfter: time.Minute, Schedules: []*Definition{hourly(t, "mine", nil)}}
}

// A Config missing what the scheduler works with, or with a definition
// it could not fire, is refused at New; the names come sorted.
func TestSchedulerConfig(t *testing.T) {
	t.Parallel()
	cfg := whole(t)
	cfg.Schedules = []*Definition{hourly(t, "b", nil), hourly(t, "a", nil)}
	s, err := New(cfg)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, s.Names())
	for name, edit := range map[string]func(*Config){
		"no queries": func(c *Config) { c.Queries = nil }, "no begin": func(c *Config) { c.Begin = nil },
		"no dbtx": func(c *Config) { c.DBTX = nil }, "no log": func(c *Config) { c.Log = nil },
		"no metrics": func(c *Config) { c.Metrics = nil }, "no poll": func(c *Config) { c.PollEvery = 0 },
		"no stale-after": func(c *Config) { c.StaleAfter = -time.Second }, "no schedules": func(c *Config) { c.Schedules = nil },
		"nil schedule": func(c *Config) { c.Schedules = []*Definition{nil} },
		"twice":        func(c *Config) { c.Schedules = append(c.Schedules, hourly(t, "mine", nil)) },
		"no name":      func(c *Config) { c.Schedules[0].Name = "" },
		"no hash":      func(c *Config) { c.Schedules[0].Hash = "" },
		"no spec":      func(c *Config) { c.Schedules[0].Spec = nil },
		"no entries":   func(c *Config) { c.Schedules[0].Entries = nil },
	} {
		cfg := whole(t)
		edit(&cfg)
		_, err := New(cfg)
		require.Error(t, err, name)
		require.True(t, strings.HasPrefix(err.Error(), "scheduler: "), name)
	}
}

// A failed schedule waits 1s, doubling with each failure in a row, at
// most a minute; a success forgets its failures.
func TestScheduleBackoff(t *testing.T) {
	t.Parallel()
	now := time.Now()
	b := scheduleBackoff{}
	names := []string{"a", "b"}
	require.Equal(t, names, b.ready(names, now))
	require.True(t, b.nextRetry().IsZero())
	require.Equal(t, time.Second, b.failed("a", now))
	require.Equal(t, 2*time.Second, b.failed("a", now))
	require.Equal(t, []string{"b"}, b.ready(names, now))
	require.Equal(t, names, b.ready(names, now.Add(2*time.Second)))
	require.Equal(t, now.Add(2*time.Second), b.nextRetry())
	for range 10 {
		b.failed("a", now)
	}
	require.Equal(t, time.Minute, scheduleRetryDelay(b["a"].failures))
	b.succeeded("a")
	require.Equal(t, names, b.ready(names, now))
}
