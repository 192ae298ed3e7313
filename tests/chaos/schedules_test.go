package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// Periodic jobs under whole worker processes: every slot fires once
// whatever is killed, and missed slots follow their policy.

const scheduleEnv = "HOPPER_SCHEDULE_WORKER_URL"

var beat = jobs.MustDefine[Beat]("beat")

// The schedules every schedule worker defines, each every second: tick
// catches up on everything it missed (so no slot is ever skipped); the
// others show the three policies.
var scheduleSet = []struct {
	name   string
	policy worker.MissedPolicy
}{
	{"tick", worker.CatchUp(1000)},
	{"skip", worker.SkipMissed()},
	{"once", worker.FireOnce()},
	{"catchup3", worker.CatchUp(3)},
}

// runScheduleWorker is the worker process: the test binary run again with
// scheduleEnv set.
func runScheduleWorker() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv(scheduleEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer pool.Close()
	w, err := worker.New(pool, worker.Config{
		ID: os.Getenv("HOPPER_SCHEDULE_ID"), LeaseDuration: 5 * time.Second, PollInterval: 200 * time.Millisecond,
		ShutdownTimeout: 100 * time.Millisecond, Logger: quietLog,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	for _, s := range scheduleSet {
		if err := worker.Schedule(w, s.name, beat, "@every 1s", func(slot time.Time) Beat { return Beat{Slot: slot} }, worker.OnMissed(s.policy)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 4
		}
	}
	if err := worker.Handle(w, beat, func(context.Context, *jobs.Job[Beat]) error { return nil }); err != nil {
		return 4
	}
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	return 0
}

// scheduleBed is a schema with a fire log, and its worker processes.
type scheduleBed struct{ *processBed }

func newScheduleBed(t *testing.T) *scheduleBed {
	t.Helper()
	t.Parallel()
	// Every job a schedule enqueues, logged in the transaction that enqueues
	// it, before the unique key is checked: a slot fired twice shows even
	// while its first job holds the key; a transaction that rolled back (a
	// worker killed mid-fire) leaves nothing.
	pb := newProcessBed(t, 5*time.Minute,
		"CREATE TABLE fire_log (schedule text NOT NULL, slot timestamptz NOT NULL, tx bigint NOT NULL DEFAULT txid_current(), at timestamptz NOT NULL DEFAULT clock_timestamp())",
		`CREATE FUNCTION fire_logged() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN
		     INSERT INTO fire_log (schedule, slot)
		     VALUES (split_part(substr(NEW.unique_key, 10), '@', 1), split_part(NEW.unique_key, '@', 2)::timestamptz);
		     RETURN NEW;
		 END $$`,
		`CREATE TRIGGER fire_logged BEFORE INSERT ON hopper_jobs FOR EACH ROW
		 WHEN (NEW.unique_key LIKE 'schedule:%') EXECUTE FUNCTION fire_logged()`)
	pb.explain = func() string { return fmt.Sprintf("fires: %d", pb.count("SELECT count(*) FROM fire_log")) }
	return &scheduleBed{pb}
}

func (b *scheduleBed) start(id string) {
	b.t.Helper()
	b.spawn(id, scheduleEnv+"="+b.db.URL, "HOPPER_SCHEDULE_ID="+id)
}

// firing is what the log shows of one schedule: its slots in order, how
// many were fired more than once, and the transaction that fired each.
type firing struct {
	slots []time.Time
	txs   []int64
	twice int64
}

func (b *scheduleBed) firing(name string) firing {
	b.t.Helper()
	var f firing
	rows, err := b.db.Pool.Query(b.ctx, "SELECT slot, min(tx) FROM fire_log WHERE schedule = $1 GROUP BY slot ORDER BY slot", name)
	require.NoError(b.t, err)
	defer rows.Close()
	for rows.Next() {
		var slot time.Time
		var tx int64
		require.NoError(b.t, rows.Scan(&slot, &tx))
		f.slots, f.txs = append(f.slots, slot), append(f.txs, tx)
	}
	require.NoError(b.t, rows.Err())
	f.twice = b.count("SELECT count(*) FROM (SELECT slot FROM fire_log WHERE schedule = $1 GROUP BY slot HAVING count(*) > 1) AS d", name)
	return f
}

// gaps lists the missing seconds between consecutive slots.
func (f firing) gaps() []string {
	var out []string
	for i := 1; i < len(f.slots); i++ {
		if d := f.slots[i].Sub(f.slots[i-1]); d != time.Second {
			out = append(out, fmt.Sprintf("%s → %s", f.slots[i-1].Format("15:04:05"), f.slots[i].Format("15:04:05")))
		}
	}
	return out
}

// TestScheduleUnderKills: three worker processes define the same
// schedules; every ~2s one of them is SIGKILLed (mid-fire, often) and
// restarted, for 60s. The ledger of fires shows every second's slot fired
// exactly once, none skipped.
func TestScheduleUnderKills(t *testing.T) {
	testdb.Slow(t, "schedules across killed worker processes")
	b := newScheduleBed(t)
	ids := []string{"w1", "w2", "w3"}
	for _, id := range ids {
		b.start(id)
	}
	b.waitFor("the first slots", func() bool { return b.count("SELECT count(*) FROM fire_log WHERE schedule = 'tick'") >= 2 })
	began, kills := time.Now(), 0
	for time.Since(began) < 60*time.Second {
		time.Sleep(time.Duration(1500+rand.IntN(1000)) * time.Millisecond) // the kill cadence
		victim := ids[rand.IntN(len(ids))]
		b.stop(victim, syscall.SIGKILL)
		b.start(victim)
		kills++
	}
	lastKill := time.Now()
	b.waitFor("slots after the last kill", func() bool {
		return b.count("SELECT count(*) FROM fire_log WHERE schedule = 'tick' AND slot > $1", lastKill.Add(2*time.Second)) > 0
	})
	f := b.firing("tick")
	t.Logf("schedule under kills: %d kills in %v; %d slots fired from %s to %s, %d fired twice, gaps %v",
		kills, time.Since(began).Round(time.Second), len(f.slots), f.slots[0].Format("15:04:05"), f.slots[len(f.slots)-1].Format("15:04:05"), f.twice, f.gaps())
	require.Zero(t, f.twice, "a slot fired twice")
	require.Empty(t, f.gaps(), "a slot was skipped")
	require.GreaterOrEqual(t, len(f.slots), 60)
}

// TestScheduleMissedPolicies: every worker down for 10s, then up again:
// tick catches up every missed slot, catchup3 the last three, once one
// job for the most recent, skip none.
func TestScheduleMissedPolicies(t *testing.T) {
	b := newScheduleBed(t)
	ids := []string{"w1", "w2", "w3"}
	for _, id := range ids {
		b.start(id)
	}
	for _, s := range scheduleSet {
		b.waitFor("fires of "+s.name, func() bool {
			return b.count("SELECT count(*) FROM fire_log WHERE schedule = $1", s.name) >= 2
		})
	}
	for _, id := range ids {
		b.stop(id, syscall.SIGTERM)
	}
	var down time.Time
	require.NoError(t, b.db.Pool.QueryRow(b.ctx, "SELECT clock_timestamp()").Scan(&down))
	before := map[string]int{}
	for _, s := range scheduleSet {
		before[s.name] = len(b.firing(s.name).slots)
	}
	b.waitFor("ten seconds with no worker", func() bool { return time.Since(down) >= 10*time.Second })
	for _, id := range ids {
		b.start(id)
	}
	for _, s := range scheduleSet {
		b.waitFor("on time again: "+s.name, func() bool {
			return b.count("SELECT count(*) FROM fire_log WHERE schedule = $1 AND slot > $2", s.name, down.Add(11*time.Second)) >= 2
		})
	}

	// The first transaction after the restart fired the missed slots (and
	// perhaps the one due just then); every later one a single slot.
	missed := map[string][]time.Time{}
	for _, s := range scheduleSet {
		f := b.firing(s.name)
		require.Zero(t, f.twice, s.name)
		after := f.slots[before[s.name]:]
		txs := f.txs[before[s.name]:]
		first := 0
		for first < len(txs) && txs[first] == txs[0] {
			first++
		}
		missed[s.name] = after[:first]
		t.Logf("%-8s fired %d slots in its first transaction after 10s down: %v", s.name, first, stamps(after[:first]))
	}
	lastBefore := func(name string) time.Time {
		f := b.firing(name)
		return f.slots[before[name]-1]
	}
	// tick: every second since the last slot before the stop, none skipped.
	tick := b.firing("tick")
	require.Empty(t, tick.gaps(), "tick catches up every missed slot")
	require.GreaterOrEqual(t, len(missed["tick"]), 9, "ten seconds down: about ten slots to catch up")
	// catchup3: the three most recent, consecutive.
	require.Len(t, missed["catchup3"], 3)
	require.Equal(t, time.Second, missed["catchup3"][2].Sub(missed["catchup3"][1]))
	require.Greater(t, missed["catchup3"][0].Sub(lastBefore("catchup3")), 5*time.Second, "older missed slots skipped")
	// once: a single job, for the most recent slot.
	require.Len(t, missed["once"], 1)
	require.Greater(t, missed["once"][0].Sub(lastBefore("once")), 8*time.Second, "coalesced into the latest")
	// skip: nothing missed fires; at most the slot due just then, on time.
	require.LessOrEqual(t, len(missed["skip"]), 1)
	firstAfter := b.firing("skip").slots[before["skip"]]
	require.Greater(t, firstAfter.Sub(lastBefore("skip")), 8*time.Second, "skip fired missed slots")
}

func stamps(ts []time.Time) string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Format("15:04:05")
	}
	return strings.Join(out, " ")
}
