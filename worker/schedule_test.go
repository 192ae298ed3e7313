package worker_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

type Tick struct {
	Slot time.Time `json:"slot"`
}

var tick = jobs.MustDefine[Tick]("tick")

func slotOf(s time.Time) Tick { return Tick{Slot: s} }

// fireLog records every job a schedule enqueues, in the transaction that
// enqueues it (a BEFORE INSERT trigger: attempts that a unique key would
// skip are logged too, so a slot fired twice shows even when its first job
// still holds the key).
func fireLog(t *testing.T, b *bundle) {
	t.Helper()
	for _, stmt := range []string{
		"CREATE TABLE fire_log (unique_key text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())",
		`CREATE FUNCTION fire_logged() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN INSERT INTO fire_log (unique_key) VALUES (NEW.unique_key); RETURN NEW; END $$`,
		`CREATE TRIGGER fire_logged BEFORE INSERT ON hopper_jobs FOR EACH ROW
		 WHEN (NEW.unique_key LIKE 'schedule:%') EXECUTE FUNCTION fire_logged()`,
	} {
		_, err := b.Pool.Exec(b.Ctx, stmt)
		require.NoError(t, err)
	}
}

// fires is the fire log: slots by schedule, oldest first, and how many
// times each was fired.
func fires(t *testing.T, b *bundle, name string) (slots []time.Time, twice int) {
	t.Helper()
	rows, err := b.Pool.Query(b.Ctx, "SELECT unique_key, count(*) FROM fire_log WHERE unique_key LIKE $1 GROUP BY 1 ORDER BY 1", "schedule:"+name+"@%")
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var key string
		var n int
		require.NoError(t, rows.Scan(&key, &n))
		slot, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(key, "schedule:"+name+"@"))
		require.NoError(t, err)
		slots = append(slots, slot)
		if n > 1 {
			twice++
		}
	}
	require.NoError(t, rows.Err())
	slices.SortFunc(slots, func(a, b time.Time) int { return a.Compare(b) })
	return slots, twice
}

func requireEvery(t *testing.T, slots []time.Time, step time.Duration, msg string) {
	t.Helper()
	for i := 1; i < len(slots); i++ {
		require.Equal(t, step, slots[i].Sub(slots[i-1]), "%s: slots %d and %d", msg, i-1, i)
	}
}

// TestScheduleFires: a schedule every second enqueues a job per slot, whose
// payload and unique key carry the slot; the handler sees it.
func TestScheduleFires(t *testing.T) {
	b := setup(t)
	fireLog(t, b)
	seen := make(chan Tick, 100)
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Schedule(w, "every-second", tick, "@every 1s", slotOf, worker.OnMissed(worker.CatchUp(100))))
		require.NoError(t, worker.Handle(w, tick, func(_ context.Context, j *jobs.Job[Tick]) error { seen <- j.Payload; return nil }))
	})
	var got []time.Time
	for len(got) < 3 {
		select {
		case p := <-seen:
			got = append(got, p.Slot)
		case <-time.After(time.Minute):
			t.Fatal("no slot fired")
		}
	}
	slots, twice := fires(t, b, "every-second")
	require.Zero(t, twice)
	require.GreaterOrEqual(t, len(slots), 3)
	requireEvery(t, slots, time.Second, "every second")
	list, err := hopper.NewClient(b.Pool).ListSchedules(b.Ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "@every 1s", list[0].Expression)
	require.Equal(t, "UTC", list[0].TimeZone)
	require.Equal(t, "catch_up", list[0].Policy)
	require.NotNil(t, list[0].LastFireAt)
	require.False(t, list[0].Stale)
	require.True(t, list[0].NextFireAt.After(*list[0].LastSlot))
}

// TestScheduleRejects: bad definitions are refused at registration.
func TestScheduleRejects(t *testing.T) {
	b := setup(t)
	w, err := worker.New(b.Pool, fast(worker.Config{}))
	require.NoError(t, err)
	for _, tc := range []struct {
		name, expr string
		opts       []worker.ScheduleOption
		msg        string
	}{
		{"", "@hourly", nil, "name is empty"},
		{"bad", "61 * * * *", nil, "above maximum"},
		{"bad", "* * * *", nil, "expected 5 to 6 fields"},
		{"bad", "0 0 30 2 *", nil, "never fires"},
		{"bad", "@every 0s", nil, "at least 1s"},
		{"bad", "0 * * * *", []worker.ScheduleOption{worker.InZone("Mars/Olympus")}, "unknown time zone"},
		{"bad", "0 * * * *", []worker.ScheduleOption{worker.OnMissed(worker.CatchUp(0))}, "CatchUp(0)"},
		{"bad", "0 * * * *", []worker.ScheduleOption{worker.EnqueueOptions(jobs.UniqueKey("mine"))}, "unique key names its schedule"},
		{"bad", "0 * * * *", []worker.ScheduleOption{worker.EnqueueOptions(jobs.Priority(42))}, "invalid priority"},
	} {
		err := worker.Schedule(w, tc.name, tick, tc.expr, slotOf, tc.opts...)
		require.ErrorIs(t, err, worker.ErrInvalidSchedule, tc.msg)
		require.ErrorContains(t, err, tc.msg)
	}
	require.NoError(t, worker.Schedule(w, "good", tick, "0 9 * * MON-FRI", slotOf, worker.InZone("America/New_York")))
	require.ErrorContains(t, worker.Schedule(w, "good", tick, "@hourly", slotOf), "defined twice")
}

// TestScheduleDeploys: a changed definition takes over without firing a
// slot twice; an older definition that comes back while the newer one
// runs (an old pod restarting mid-deploy) does not take it back; a
// definition nobody runs any more is stale, kept, and reported.
func TestScheduleDeploys(t *testing.T) {
	testdb.Slow(t, "schedules across deploys of worker processes")
	b := setup(t)
	fireLog(t, b)
	client := hopper.NewClient(b.Pool)
	// Stale after 10s: workers report every 2s, so a few slow reports on
	// a loaded machine cannot make the running definition stale.
	cfg := worker.Config{ScheduleStaleAfter: 10 * time.Second}
	define := func(expr string) func(*worker.Worker) {
		return func(w *worker.Worker) {
			require.NoError(t, worker.Schedule(w, "report", tick, expr, slotOf, worker.OnMissed(worker.CatchUp(100))))
			require.NoError(t, worker.Handle(w, tick, func(context.Context, *jobs.Job[Tick]) error { return nil }))
		}
	}
	inForce := func() hopper.ScheduleInfo {
		list, err := client.ListSchedules(b.Ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
		return list[0]
	}
	waitSlots := func(n int) {
		testdb.WaitFor(t, "slots fired", func() bool { slots, _ := fires(t, b, "report"); return len(slots) >= n })
	}

	old := start(t, b, cfg, define("@every 2s"))
	waitSlots(2)
	// The new deploy starts beside the old one: its definition is newer.
	newer := start(t, b, cfg, define("@every 1s"))
	testdb.WaitFor(t, "the new definition in force", func() bool { return inForce().Expression == "@every 1s" })
	before, _ := fires(t, b, "report")
	waitSlots(len(before) + 3)
	// An old pod restarts while the new one runs: it does not win back.
	old.stop()
	stopped := time.Now()
	restarted := start(t, b, cfg, define("@every 2s"))
	testdb.WaitFor(t, "the restarted old worker at work", func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT count(*) FROM hopper_schedule_versions WHERE name = 'report' AND last_seen_at > $1", stopped).Scan(&n))
		return n == 2 // both definitions reported since the old one stopped
	})
	require.Equal(t, "@every 1s", inForce().Expression, "the older definition does not come back")
	waitSlots(len(before) + 6)
	slots, twice := fires(t, b, "report")
	require.Zero(t, twice, "no slot fired twice through the change")
	requireEvery(t, slots[len(before):], time.Second, "the new cadence, whoever fires it")

	// Every worker stops: the schedule is kept, and goes stale.
	newer.stop()
	restarted.stop()
	testdb.WaitFor(t, "stale", func() bool { return inForce().Stale })
	require.Equal(t, "@every 1s", inForce().Expression, "kept as it was")
}

// TestSchedulePauseResumeTrigger: a paused schedule does not fire; a
// trigger fires it once even so, at the trigger's time; a resume goes on at
// the next slot, not at those missed while paused.
func TestSchedulePauseResumeTrigger(t *testing.T) {
	b := setup(t)
	fireLog(t, b)
	client := hopper.NewClient(b.Pool)
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Schedule(w, "beat", tick, "@every 1s", slotOf))
		require.NoError(t, worker.Handle(w, tick, func(context.Context, *jobs.Job[Tick]) error { return nil }))
	})
	testdb.WaitFor(t, "a slot", func() bool { s, _ := fires(t, b, "beat"); return len(s) >= 1 })
	first, err := client.PauseSchedule(b.Ctx, "beat")
	require.NoError(t, err)
	require.True(t, first.Changed)
	again, err := client.PauseSchedule(b.Ctx, "beat")
	require.NoError(t, err)
	require.False(t, again.Changed, "pausing twice is not an error")
	require.True(t, again.PausedAt.Equal(first.PausedAt), "a second pause keeps the first one's time")
	var pausedAt time.Time
	require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT clock_timestamp()").Scan(&pausedAt))

	at, err := client.TriggerSchedule(b.Ctx, "beat")
	require.NoError(t, err)
	testdb.WaitFor(t, "the trigger fired", func() bool {
		s, _ := fires(t, b, "beat")
		return len(s) > 0 && s[len(s)-1].Equal(at)
	})
	// Three seconds paused: no slot fired in them, but the trigger.
	testdb.WaitFor(t, "three seconds", func() bool { return time.Since(pausedAt) > 3*time.Second })
	slots, _ := fires(t, b, "beat")
	for _, s := range slots {
		require.False(t, s.After(pausedAt.Add(time.Second)) && !s.Equal(at), "slot %v fired while paused", s)
	}

	resumed := time.Now()
	res, err := client.ResumeSchedule(b.Ctx, "beat")
	require.NoError(t, err)
	require.True(t, res.Changed)
	require.True(t, res.PausedAt.Equal(first.PausedAt), "a resume says since when it was paused")
	testdb.WaitFor(t, "fires again", func() bool { s, _ := fires(t, b, "beat"); return len(s) >= len(slots)+2 })
	after, twice := fires(t, b, "beat")
	require.Zero(t, twice)
	for _, s := range after[len(slots):] {
		require.False(t, s.Before(resumed.Add(-time.Second)), "slot %v was missed while paused and fired anyway", s)
	}

	_, err = client.PauseSchedule(b.Ctx, "nope")
	require.ErrorIs(t, err, hopper.ErrUnknownSchedule)
	_, err = client.TriggerSchedule(b.Ctx, "nope")
	require.ErrorIs(t, err, hopper.ErrUnknownSchedule)
	_, err = client.ResumeSchedule(b.Ctx, "nope")
	require.ErrorIs(t, err, hopper.ErrUnknownSchedule)
}

// TestFailingScheduleCostsOnlyItself: a schedule whose payload function
// always panics, and one that panics on its first fires, beside a healthy
// one: the healthy one fires every slot on time; the flaky one waits out
// its backoff and then fires every slot it missed (CatchUp); the broken one
// is logged and counted, and never fires.
func TestFailingScheduleCostsOnlyItself(t *testing.T) {
	b := setup(t)
	fireLog(t, b)
	reg := prometheus.NewRegistry()
	var flakyCalls atomic.Int32
	start(t, b, worker.Config{Registerer: reg, Logger: quiet}, func(w *worker.Worker) {
		catchUp := worker.OnMissed(worker.CatchUp(100))
		require.NoError(t, worker.Schedule(w, "a-broken", tick, "@every 1s", func(time.Time) Tick { panic("no payload today") }, catchUp))
		require.NoError(t, worker.Schedule(w, "b-flaky", tick, "@every 1s", func(s time.Time) Tick {
			if flakyCalls.Add(1) <= 2 {
				panic("not yet")
			}
			return slotOf(s)
		}, catchUp))
		require.NoError(t, worker.Schedule(w, "c-healthy", tick, "@every 1s", slotOf, catchUp))
		require.NoError(t, worker.Handle(w, tick, func(context.Context, *jobs.Job[Tick]) error { return nil }))
	})
	testdb.WaitFor(t, "the healthy and the flaky schedule fired 4 slots each", func() bool {
		healthy, _ := fires(t, b, "c-healthy")
		flaky, _ := fires(t, b, "b-flaky")
		return len(healthy) >= 4 && len(flaky) >= 4
	})
	for _, name := range []string{"c-healthy", "b-flaky"} {
		slots, twice := fires(t, b, name)
		require.Zero(t, twice, name)
		requireEvery(t, slots, time.Second, name)
	}
	broken, _ := fires(t, b, "a-broken")
	require.Empty(t, broken)
	require.GreaterOrEqual(t, metricValue(t, reg, `hopper_schedule_fires_total{outcome="failed"}`), 3.0)
}
