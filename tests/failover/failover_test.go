package failover

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/hacluster"
	"github.com/hopperq/hopper/internal/testbed/wirefault"
	"github.com/hopperq/hopper/schema"
)

// full is `make failover`: longer phases and pg_auto_failover's own
// failure-detection timings.
func full() bool { return os.Getenv("HOPPER_FAILOVER") == "full" }

// bed is the formation, the proxies the workers reach its nodes through,
// the observer's pool (the verdict's queries), the producers and the
// worker processes.
type bed struct {
	t       *testing.T
	ctx     context.Context
	f       *hacluster.Formation
	proxies map[string]*wirefault.Proxy // by node name
	observe *pgxpool.Pool
	load    *load
	workers []*exec.Cmd
	logs    string
	phase   time.Duration // load after each failure, and about as long before it
	before  time.Duration // load before this scenario's failure (seeded)
}

// TestFailover: the scenarios, one after another on one formation under
// continuous load, each judged on its own figures and all of them by the
// final tables: nothing whose enqueue committed is lost, no job is
// completed twice, duplicate runs are only those the fence refused,
// workflows and sequences finish in order, the schedule fires every slot.
func TestFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a pg_auto_failover formation and worker processes")
	}
	if err := hacluster.Available(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	b := newBed(t)
	scenarios := []struct {
		name string
		// fail injects the failure on the primary and returns the node
		// that is writable afterwards.
		fail func(primary *hacluster.Node) *hacluster.Node
		heal func(old *hacluster.Node)
		// async runs the scenario with the standby asynchronous: the
		// acknowledged commits it loses are counted, not failed on.
		async bool
	}{
		{"switchover", func(*hacluster.Node) *hacluster.Node {
			require.NoError(t, b.f.Switchover(b.ctx))
			p, err := b.f.Stable(b.ctx)
			require.NoError(t, err)
			return p
		}, func(*hacluster.Node) {}, false},
		{"postmaster killed", func(primary *hacluster.Node) *hacluster.Node {
			pid := primary.PostmasterPID()
			require.NoError(t, b.f.KillPostmaster(primary))
			return b.afterCrash(primary, pid)
		}, func(*hacluster.Node) {}, false},
		{"node killed", func(primary *hacluster.Node) *hacluster.Node {
			require.NoError(t, b.f.Kill(primary))
			p, err := b.f.Writable(b.ctx, primary)
			require.NoError(t, err)
			return p
		}, func(old *hacluster.Node) { require.NoError(t, b.f.Restart(old)) }, false},
		{"primary silenced", func(primary *hacluster.Node) *hacluster.Node {
			b.proxies[primary.Name].Stall()
			require.NoError(t, b.f.Failover(b.ctx))
			p, err := b.f.Writable(b.ctx, primary)
			require.NoError(t, err)
			return p
		}, func(old *hacluster.Node) { b.proxies[old.Name].Unstall() }, false},
		{"node killed with an async standby", func(primary *hacluster.Node) *hacluster.Node {
			require.NoError(t, b.f.Kill(primary))
			p, err := b.f.Writable(b.ctx, primary)
			require.NoError(t, err)
			return p
		}, func(old *hacluster.Node) { require.NoError(t, b.f.Restart(old)) }, true},
	}
	// Seeded: the order of the scenarios and how long the load runs
	// before each failure, so that runs meet the failures at other
	// moments of the workers' loops (a claim, an ack batch, a sweep, a
	// schedule's firing) and in other states left by the scenario before.
	// The async scenario stays last: nothing makes the standby
	// synchronous again after it.
	seed := failoverSeed(t)
	t.Logf("seed %d (HOPPER_FAILOVER_SEED=%d replays the order and the phases)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	rng.Shuffle(len(scenarios)-1, func(i, j int) { scenarios[i], scenarios[j] = scenarios[j], scenarios[i] })
	var report []figures
	only := os.Getenv("HOPPER_FAILOVER_SCENARIOS") // a comma-separated subset, when debugging one
	for _, s := range scenarios {
		if only != "" && !strings.Contains(","+only+",", ","+s.name+",") {
			continue
		}
		primary := b.settled(s.async)
		b.before = b.phase/2 + time.Duration(rng.Int64N(int64(b.phase)))
		t.Logf("%s: %v of load before the failure", s.name, b.before.Round(time.Millisecond))
		time.Sleep(b.before) // load before the failure: the "before" figures
		lag := b.replicationLag()
		failAt := time.Now()
		next := s.fail(primary)
		fig := b.measure(s.name, failAt, primary, next)
		fig.lag, fig.async = lag, s.async
		s.heal(primary)
		report = append(report, fig)
		t.Logf("%s: %s", s.name, fig)
	}
	b.load.halt()
	b.verdict(report)
}

// failoverSeed is HOPPER_FAILOVER_SEED when set (to replay a run), else a
// random seed.
func failoverSeed(t *testing.T) uint64 {
	if v := os.Getenv("HOPPER_FAILOVER_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "HOPPER_FAILOVER_SEED")
		return seed
	}
	return rand.Uint64()
}

func newBed(t *testing.T) *bed {
	limit := 10 * time.Minute
	if full() {
		limit = 40 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	f, err := hacluster.Start(ctx, hacluster.Options{FastDetection: !full(), Log: logWriter{t}})
	require.NoError(t, err)
	t.Cleanup(f.Stop)
	b := &bed{t: t, ctx: ctx, f: f, proxies: map[string]*wirefault.Proxy{}, logs: t.TempDir(), phase: 5 * time.Second}
	if full() {
		b.phase = 30 * time.Second
	}
	cfg, err := pgxpool.ParseConfig(f.URL())
	require.NoError(t, err)
	hopper.DetectSilentPeers(&cfg.ConnConfig.Config)
	b.observe, err = pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(b.observe.Close)
	require.NoError(t, schema.Up(ctx, b.observe))
	for _, stmt := range tables {
		_, err := b.observe.Exec(ctx, stmt)
		require.NoError(t, err)
	}

	var hosts []string
	for _, n := range f.Nodes() {
		p := wirefault.Start(t, n.Addr())
		b.proxies[n.Name] = p
		hosts = append(hosts, p.Addr())
	}
	for i := range 3 {
		id := fmt.Sprintf("fo-worker-%d", i+1)
		url := "postgres://postgres@" + strings.Join(hosts, ",") +
			"/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=5&application_name=" + id
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), workerEnv+"="+url, "HOPPER_FAILOVER_ID="+id,
			"HOPPER_FAILOVER_LOG="+filepath.Join(b.logs, id+".log"))
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		b.workers = append(b.workers, cmd)
	}
	t.Cleanup(func() {
		for _, cmd := range b.workers {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			t.Logf("the monitor's events:\n%s", f.Events(ctx))
			cancel()
			for i := range b.workers {
				name := filepath.Join(b.logs, fmt.Sprintf("fo-worker-%d.log", i+1))
				if out, err := os.ReadFile(name); err == nil {
					t.Logf("%s:\n%s", filepath.Base(name), tailLines(string(out), 40))
				}
			}
		}
	})

	pcfg, err := pgxpool.ParseConfig(f.URL() + "&pool_max_conns=8")
	require.NoError(t, err)
	hopper.DetectSilentPeers(&pcfg.ConnConfig.Config)
	producers, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(producers.Close)
	b.load = startLoad(ctx, producers, 4, 20*time.Millisecond)
	t.Cleanup(b.load.halt)
	return b
}

// setAsync makes the standby of primary asynchronous and waits until the
// primary no longer waits for it.
func (b *bed) setAsync(primary *hacluster.Node) {
	b.t.Helper()
	for _, n := range b.f.Nodes() {
		if n != primary {
			require.NoError(b.t, b.f.SetSynchronous(b.ctx, n, false))
		}
	}
	b.waitFor("the primary committing without its standby", func(ctx context.Context) (bool, error) {
		var names string
		err := b.observe.QueryRow(ctx, "SELECT current_setting('synchronous_standby_names')").Scan(&names)
		return err == nil && names == "", err
	})
}

// replicationLag is how far the standby's replay trails the primary now
// (pg_stat_replication's replay_lag), or 0 with no standby streaming.
func (b *bed) replicationLag() time.Duration {
	b.t.Helper()
	var secs float64
	b.waitFor("the replication lag", func(ctx context.Context) (bool, error) {
		err := b.observe.QueryRow(ctx, "SELECT coalesce(max(extract(epoch FROM replay_lag)), 0)::float8 FROM pg_stat_replication").Scan(&secs)
		return err == nil, err
	})
	return time.Duration(secs * float64(time.Second))
}

// afterCrash waits for the formation to be whole again after old's
// postmaster (pid) was killed and returns the primary: old itself once its
// keeper restarted PostgreSQL, or the standby if the monitor failed over
// meanwhile (with pg_auto_failover's default timings it may: the keeper
// reports PostgreSQL down).
func (b *bed) afterCrash(old *hacluster.Node, pid int) *hacluster.Node {
	b.t.Helper()
	for {
		p, err := b.f.Stable(b.ctx)
		require.NoError(b.t, err)
		if p != old {
			return p
		}
		if now := old.PostmasterPID(); now != 0 && now != pid {
			return p
		}
		select {
		case <-b.ctx.Done():
			b.t.Fatalf("%s: neither restarted nor failed over", old.Name)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// figures is what one failure cost.
type figures struct {
	name           string
	from, to       string
	enqueued       int64         // commits acknowledged to producers during the scenario
	writable       time.Duration // failure → the new primary's first producer commit
	firstRun       time.Duration // failure → the first job run on the new primary
	listening      time.Duration // failure → every worker LISTENing on the new primary
	p99Before      time.Duration // enqueue → first run, jobs enqueued in the phase before
	p99After       time.Duration // the same, in the phase after recovery
	duplicateRuns  int64
	producerErrors int
	producerUnsure int
	failAt         time.Time
	async          bool          // the standby was asynchronous
	lag            time.Duration // the standby's replay lag just before the failure
	vanished       int           // acknowledged commits the failover lost (async, or while the monitor had turned synchronous replication off)
	incomplete     int           // orders whose jobs completed without their effects (must be 0)
}

func (f figures) String() string {
	return fmt.Sprintf("%s → %s: %d enqueued; first commit on the new primary after %v, first run after %v, "+
		"all workers listening after %v; p99 enqueue→run %v before, %v after; %d duplicate runs; producer errors %d (%d unanswered commits); replay lag before %v",
		f.from, f.to, f.enqueued, f.writable.Round(10*time.Millisecond), f.firstRun.Round(10*time.Millisecond),
		f.listening.Round(10*time.Millisecond), f.p99Before.Round(time.Millisecond), f.p99After.Round(time.Millisecond),
		f.duplicateRuns, f.producerErrors, f.producerUnsure, f.lag.Round(time.Microsecond))
}

// measure waits for the workers and producers to be back on next and
// returns the figures of the failure injected at failAt.
func (b *bed) measure(name string, failAt time.Time, old, next *hacluster.Node) figures {
	b.t.Helper()
	fig := figures{name: name, from: old.Name, to: next.Name, failAt: failAt}
	_, unsureBefore, errsBefore, _ := b.load.snapshot()
	dupBefore := b.duplicateRuns()
	enqBefore := b.load.enqueued.Load()
	// The monitor may still move the primary after fail returned: a
	// killed postmaster that its keeper restarted is one the monitor can
	// fail over a moment later, having heard it was down. Recovery is
	// measured on the node that stays writable throughout.
	var commitAt, runAt, listenAt time.Time
	for {
		var moved bool
		commitAt, runAt, listenAt, moved = b.recoveredOn(name, next, failAt)
		if !moved {
			break
		}
		p, err := b.f.Stable(b.ctx)
		require.NoError(b.t, err, name)
		b.t.Logf("%s: the monitor moved the primary from %s to %s meanwhile", name, next.Name, p.Name)
		next = p
	}
	fig.to = next.Name
	fig.writable, fig.firstRun, fig.listening = commitAt.Sub(failAt), runAt.Sub(failAt), listenAt.Sub(failAt)
	recovered := maxTime(commitAt, runAt, listenAt)
	time.Sleep(b.phase) // load after recovery: the "after" figures
	b.waitRun(recovered, recovered.Add(b.phase))
	fig.p99Before = b.p99(failAt.Add(-b.before), failAt)
	fig.p99After = b.p99(recovered, recovered.Add(b.phase))
	fig.enqueued = b.load.enqueued.Load() - enqBefore
	fig.duplicateRuns = b.duplicateRuns() - dupBefore
	_, unsure, errs, _ := b.load.snapshot()
	fig.producerErrors, fig.producerUnsure = errs-errsBefore, unsure-unsureBefore
	return fig
}

// recoveredOn waits for the producers' first commit, the first job run
// and every worker listening on next after failAt, or reports moved as
// soon as another node is the writable one.
func (b *bed) recoveredOn(name string, next *hacluster.Node, failAt time.Time) (commitAt, runAt, listenAt time.Time, moved bool) {
	b.t.Helper()
	if moved = b.waitOn(next, name+": a producer commit on "+next.Name, func(ctx context.Context) (int, bool, error) {
		var port int
		err := b.observe.QueryRow(ctx, "SELECT inet_server_port(), coalesce(min(at), 'epoch') FROM fo_orders WHERE port = $1 AND at > greatest($2, pg_postmaster_start_time())", next.Port, failAt).Scan(&port, &commitAt)
		return port, err == nil && commitAt.After(failAt), err
	}); moved {
		return
	}
	if moved = b.waitOn(next, name+": a job run on "+next.Name, func(ctx context.Context) (int, bool, error) {
		var port int
		err := b.observe.QueryRow(ctx, "SELECT inet_server_port(), coalesce(min(at), 'epoch') FROM fo_runs WHERE port = $1 AND at > greatest($2, pg_postmaster_start_time())", next.Port, failAt).Scan(&port, &runAt)
		return port, err == nil && runAt.After(failAt), err
	}); moved {
		return
	}
	listenAt, moved = b.listeningOn(next, failAt)
	return
}

// settled waits for the formation to be whole with every worker listening
// on its primary, and returns the primary; async first makes the standby
// asynchronous. A failover the previous scenario left pending may move the
// primary meanwhile: then it waits again.
func (b *bed) settled(async bool) *hacluster.Node {
	b.t.Helper()
	for {
		primary, err := b.f.Stable(b.ctx)
		require.NoError(b.t, err)
		if async {
			b.setAsync(primary)
		}
		if _, moved := b.listeningOn(primary, time.Time{}); !moved {
			return primary
		}
	}
}

// listeningOn waits until every worker has a session on node that
// LISTENs (its last statement the LISTEN, or the listener's ping), opened
// after since, and returns when that was first seen; or reports moved when
// another node is the writable one.
func (b *bed) listeningOn(node *hacluster.Node, since time.Time) (time.Time, bool) {
	b.t.Helper()
	moved := b.waitOn(node, "every worker listening on "+node.Name, func(ctx context.Context) (int, bool, error) {
		var port, n int
		err := b.observe.QueryRow(ctx, `SELECT inet_server_port(), count(DISTINCT application_name) FROM pg_stat_activity
			WHERE application_name LIKE 'fo-worker-%' AND backend_start > $1
			AND (query LIKE '%LISTEN hopper_jobs%' OR query = '-- ping')`, since).Scan(&port, &n)
		return port, err == nil && n == len(b.workers), err
	})
	return time.Now(), moved
}

// waitOn is waitFor for a condition on node, asked through the observer's
// pool, which reaches the writable node: cond returns the port it ran on,
// and waitOn returns true (moved) once that is another node's.
func (b *bed) waitOn(node *hacluster.Node, what string, cond func(context.Context) (int, bool, error)) (moved bool) {
	b.t.Helper()
	b.waitFor(what, func(ctx context.Context) (bool, error) {
		port, ok, err := cond(ctx)
		if err == nil && port != node.Port {
			moved = true
			return true, nil
		}
		return ok, err
	})
	return moved
}

// waitRun waits until every plain order (one job, in no workflow or
// sequence) enqueued between from and until has run: the jobs the p99
// after recovery is measured on. Jobs from before the failure may still
// be retrying, and hold up their sequences; those are the verdict's.
func (b *bed) waitRun(from, until time.Time) {
	b.t.Helper()
	b.waitFor("the orders enqueued after recovery run", func(ctx context.Context) (bool, error) {
		var left int64
		err := b.observe.QueryRow(ctx, `SELECT count(*) FROM fo_orders o WHERE o.at >= $1 AND o.at < $2 AND o.plain
			AND NOT EXISTS (SELECT FROM fo_ledger WHERE order_id = o.id)`, from, until).Scan(&left)
		return err == nil && left == 0, err
	})
}

// p99 is the 99th percentile of enqueue → first run of the plain orders
// enqueued between from and to.
func (b *bed) p99(from, to time.Time) time.Duration {
	b.t.Helper()
	var ms float64
	b.waitFor("the p99", func(ctx context.Context) (bool, error) {
		err := b.observe.QueryRow(ctx, `SELECT coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM r.first - o.at) * 1000), 0)
			FROM fo_orders o JOIN fo_ledger l ON l.order_id = o.id
			JOIN LATERAL (SELECT min(at) AS first FROM fo_runs WHERE job_id = l.job_id) r ON true
			WHERE o.at >= $1 AND o.at < $2 AND o.plain`, from, to).Scan(&ms)
		return err == nil, err
	})
	return time.Duration(ms * float64(time.Millisecond))
}

func (b *bed) duplicateRuns() int64 {
	b.t.Helper()
	var n int64
	b.waitFor("the duplicate runs", func(ctx context.Context) (bool, error) {
		err := b.observe.QueryRow(ctx, "SELECT count(*) - count(DISTINCT job_id) FROM fo_runs").Scan(&n)
		return err == nil, err
	})
	return n
}

// verdict drains the queue and judges the whole run from the tables.
func (b *bed) verdict(report []figures) {
	t := b.t
	committed, unsure, _, _ := b.load.snapshot()
	// Every order the producers were told committed is there: a
	// synchronous standby loses no acknowledged commit.
	// With an asynchronous standby, the commits acknowledged in its
	// replay lag before the primary died are lost: counted per scenario.
	var vanished []int64
	b.waitFor("the acknowledged orders", func(ctx context.Context) (bool, error) {
		rows, err := b.observe.Query(ctx, "SELECT c.id FROM unnest($1::bigint[]) c(id) WHERE NOT EXISTS (SELECT FROM fo_orders WHERE id = c.id)", committed)
		if err != nil {
			return false, err
		}
		vanished, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err == nil, err
	})
	// A commit can also be lost where the monitor itself turned
	// synchronous replication off on the old primary for a moment (see
	// syncOff): counted for the scenario under way, not failed on.
	var spans []syncOff
	if len(vanished) > 0 {
		events, err := b.f.EventList(b.ctx, 1000)
		require.NoError(t, err)
		spans = syncOffSpans(events)
	}
	for _, id := range vanished {
		at := b.load.acked(id)
		i := slices.IndexFunc(report, func(f figures) bool {
			return f.async && !at.After(f.failAt.Add(time.Second)) && at.After(f.failAt.Add(-b.phase))
		})
		if i < 0 {
			if s, ok := within(spans, at, time.Second); ok {
				// The scenario under way: the last to fail before at.
				for j, f := range report {
					if !at.Before(f.failAt) {
						i = j
					}
				}
				t.Logf("order %d, acknowledged at %v while the monitor had %s as wait_primary (from %v): lost without a synchronous standby",
					id, at.Format(time.StampMicro), s.node, s.from.Format(time.StampMicro))
			}
		}
		require.GreaterOrEqual(t, i, 0, "order %d, acknowledged at %v, lost outside an asynchronous failover", id, at)
		report[i].vanished++
	}

	// Every order that committed (acknowledged or not) has all its jobs
	// completed, each exactly once: the queue drains, and every job left a
	// ledger row. An asynchronous failover may lose a handler's committed
	// transaction (ledger row and AckTx): the worker, finding the job's
	// row still live on the new timeline, runs the job again rather than
	// take the handler's nil as the acknowledgement, so this holds in
	// every scenario, the asynchronous one included.
	b.waitFor("the queue drained", func(ctx context.Context) (bool, error) {
		var left int64
		err := b.observe.QueryRow(ctx, "SELECT count(*) FROM hopper_jobs").Scan(&left)
		return err == nil && left == 0, err
	})
	var incomplete []time.Time // when each such order was enqueued
	b.waitFor("every committed order's jobs completed", func(ctx context.Context) (bool, error) {
		rows, err := b.observe.Query(ctx, `SELECT o.at FROM fo_orders o
			WHERE (SELECT count(*) FROM fo_ledger WHERE order_id = o.id) < o.jobs`)
		if err != nil {
			return false, err
		}
		incomplete, err = pgx.CollectRows(rows, pgx.RowTo[time.Time])
		return err == nil, err
	})
	if asyncIdx := slices.IndexFunc(report, func(f figures) bool { return f.async }); asyncIdx >= 0 {
		report[asyncIdx].incomplete = len(incomplete)
	}
	require.Empty(t, incomplete, "committed orders whose jobs did not all complete (completed without their effects)")
	var orders, twice, dupRuns, runs int64
	require.NoError(t, b.observe.QueryRow(b.ctx, `SELECT (SELECT count(*) FROM fo_orders),
		(SELECT count(*) - count(DISTINCT job_id) FROM fo_ledger),
		(SELECT count(*) - count(DISTINCT job_id) FROM fo_runs), (SELECT count(*) FROM fo_runs)`).Scan(&orders, &twice, &dupRuns, &runs))
	require.Zero(t, twice, "jobs completed twice")

	// Workflows: b and c completed after a; sequences: in the order of
	// their enqueues.
	var badWF, badSeq int64
	require.NoError(t, b.observe.QueryRow(b.ctx, `SELECT count(*) FROM fo_ledger c JOIN fo_ledger a ON a.wf = c.wf AND a.step = 'a'
		WHERE c.step IN ('b', 'c') AND c.id < a.id`).Scan(&badWF))
	require.Zero(t, badWF, "workflow steps completed before their parent")
	require.NoError(t, b.observe.QueryRow(b.ctx, `SELECT count(*) FROM (SELECT pos, lag(pos) OVER (PARTITION BY seq ORDER BY id) AS prev
		FROM fo_ledger WHERE seq IS NOT NULL) s WHERE s.pos < s.prev`).Scan(&badSeq))
	require.Zero(t, badSeq, "sequence jobs completed out of order")

	// The schedule: every slot from the first to the last fired once.
	var slots, distinct, span int64
	require.NoError(t, b.observe.QueryRow(b.ctx, `SELECT count(*), count(DISTINCT slot),
		coalesce(extract(epoch FROM max(slot) - min(slot))::bigint + 1, 0) FROM fo_ledger WHERE slot IS NOT NULL`).Scan(&slots, &distinct, &span))
	require.Equal(t, slots, distinct, "schedule slots fired twice")
	require.Equal(t, span, distinct, "schedule slots missed")

	// No worker process needed a restart: all three ran throughout and
	// stop cleanly now.
	for i, cmd := range b.workers {
		require.Nil(t, cmd.ProcessState, "worker %d exited during the run", i+1)
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		require.NoError(t, cmd.Wait(), "worker %d exits cleanly", i+1)
	}
	b.workers = nil
	t.Logf("verdict: %d orders committed (%d acknowledged, %d unanswered commits, %d lost by an asynchronous standby or in the monitor's wait_primary, "+
		"%d whose jobs completed without their effects there), 0 completed twice, %d duplicate runs of %d, %d schedule slots each fired once",
		orders, len(committed), unsure, len(vanished), len(incomplete), dupRuns, runs, distinct)
	fmt.Println("\nscenario | enqueued | lost (acknowledged commits, jobs without effects) | duplicate runs | failure → first commit | failure → first run | failure → wake-ups | p99 before | p99 after | replay lag before")
	for _, f := range report {
		fmt.Printf("%s (%s → %s) | %d | %d, %d | %d | %v | %v | %v | %v | %v | %v\n", f.name, f.from, f.to, f.enqueued, f.vanished, f.incomplete, f.duplicateRuns,
			f.writable.Round(10*time.Millisecond), f.firstRun.Round(10*time.Millisecond), f.listening.Round(10*time.Millisecond),
			f.p99Before.Round(time.Millisecond), f.p99After.Round(time.Millisecond), f.lag.Round(time.Microsecond))
	}
}

// waitFor polls cond (its errors are the failover's: the observer's pool
// reconnects) until it holds, and fails the test when the test's time
// runs out.
func (b *bed) waitFor(what string, cond func(context.Context) (bool, error)) {
	b.t.Helper()
	var lastErr error
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		ok, err := cond(ctx)
		cancel()
		if ok {
			return
		}
		if err != nil {
			lastErr = err
		}
		select {
		case <-b.ctx.Done():
			_, unsure, errs, lastLoadErr := b.load.snapshot()
			b.t.Fatalf("%s: not before the test's deadline (last error: %v; producers: %d errors, %d unanswered commits, last %v)",
				what, lastErr, errs, unsure, lastLoadErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func maxTime(ts ...time.Time) time.Time {
	m := ts[0]
	for _, t := range ts[1:] {
		if t.After(m) {
			m = t
		}
	}
	return m
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
