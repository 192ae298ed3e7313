package citus

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/metricsum"
	"github.com/hopperq/hopper/internal/testbed/citusbed"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/shard"
	"github.com/hopperq/hopper/tests/internal/bed"
	"github.com/hopperq/hopper/worker"
)

// errand is the sharded worker's job: its payload's N says the shard it
// was enqueued into (N / perShard) and which of that shard's jobs it is.
var errand = jobs.MustDefine[bed.Chore]("citus_errand")

// perShard spaces the payloads of the shards apart: job i of shard k
// carries k*perShard + i.
const perShard = 1_000_000

// shardedBed is a formation with four Hopper schemas in distributed
// schemas, spread over both worker nodes, and a pool on each (search_path
// the shard: for enqueues, one statement each, and for counting).
type shardedBed struct {
	f      *citusbed.Formation
	shards []string
	pools  map[string]*pgxpool.Pool
}

// TestCitusShardedWorker: one shard.Worker serving four shards on two
// nodes works every job of every shard exactly once; two Workers sharing
// the shards each get work and run each job once; a shard whose jobs come
// only after the start is served while another shard's jobs hold every
// slot of theirs; a coordinator pg_notify naming a shard and a queue wakes
// that shard's runtime (the enqueue trigger's NOTIFY, sent on the node,
// never reaches a worker listening on the coordinator). Figures: jobs/s
// of one Worker on four shards against one shard, in the same run.
func TestCitusShardedWorker(t *testing.T) {
	testdb.Slow(t, "starts a Citus formation: a coordinator and two worker nodes")
	f := citusbed.New(t)
	t.Logf("figure: formation (coordinator and %d workers) up in %v", len(f.Workers), f.Took.Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	b := &shardedBed{f: f, pools: map[string]*pgxpool.Pool{}}
	began := time.Now()
	for i := range 4 {
		name := fmt.Sprintf("hopper_w%d", i)
		b.shards = append(b.shards, name)
		b.pools[name] = distributedSchema(t, ctx, f, name)
		require.NoError(t, schema.Up(ctx, b.pools[name]))
	}
	t.Logf("figure: %d distributed schemas migrated to %d in %v", len(b.shards), schema.Latest(), time.Since(began).Round(time.Millisecond))
	b.spread(t, ctx)

	t.Run("every job of every shard once", func(t *testing.T) { b.everyJobOnce(t, ctx) })
	t.Run("two workers share the shards", func(t *testing.T) { b.twoWorkers(t, ctx) })
	t.Run("a late shard is not starved", func(t *testing.T) { b.lateShard(t, ctx) })
	t.Run("a coordinator notify wakes the shard", func(t *testing.T) { b.coordinatorWakeUp(t, ctx) })
	t.Run("a killed worker's jobs taken over in every shard", func(t *testing.T) { b.takeover(t, ctx) })
	t.Run("a schedule on one shard fires there only", func(t *testing.T) { b.scheduleOnOne(t, ctx) })
	t.Run("figures", func(t *testing.T) { b.figures(t, ctx) })
}

// spread puts the shards on both worker nodes (moving every other one
// when Citus placed them all on one) and checks, from citus_shards, that
// each shard's tables are on one node and that both nodes hold shards.
func (b *shardedBed) spread(t *testing.T, ctx context.Context) {
	t.Helper()
	coord := b.pools[b.shards[0]]
	ports := map[string]int{}
	used := map[int]bool{}
	for _, s := range b.shards {
		ports[s] = b.nodeOf(t, ctx, s)
		used[ports[s]] = true
	}
	for i, s := range b.shards {
		if len(used) > 1 {
			break
		}
		want := b.f.Workers[i%len(b.f.Workers)].Port()
		if ports[s] == want {
			continue
		}
		// block_writes: hopper_rate_claims has no replica identity, which
		// the default (logical replication) needs (docs/scaling-out.md).
		began := time.Now()
		_, err := coord.Exec(ctx, "SELECT citus_schema_move($1::regnamespace, '127.0.0.1', $2, shard_transfer_mode => 'block_writes')", s, want)
		require.NoError(t, err, "move %s to port %d", s, want)
		t.Logf("figure: %s moved from port %d to %d in %v", s, ports[s], want, time.Since(began).Round(time.Millisecond))
		ports[s] = b.nodeOf(t, ctx, s)
		require.Equal(t, want, ports[s])
		used[want] = true
	}
	var distributed int
	require.NoError(t, coord.QueryRow(ctx, "SELECT count(*) FROM public.citus_schemas WHERE schema_name::text = ANY($1)", b.shards).Scan(&distributed))
	require.Equal(t, len(b.shards), distributed, "every shard is a distributed schema")
	nodes := map[int]bool{}
	for _, s := range b.shards {
		nodes[ports[s]] = true
	}
	require.Len(t, nodes, 2, "the shards are on both worker nodes: %v", ports)
	t.Logf("shards on nodes (by port): %v", ports)
}

// nodeOf is the port of the node holding the shard's tables, all of them
// on that one node.
func (b *shardedBed) nodeOf(t *testing.T, ctx context.Context, s string) int {
	t.Helper()
	rows, err := b.pools[s].Query(ctx, `
		SELECT DISTINCT sh.nodeport FROM pg_catalog.citus_shards AS sh
		WHERE sh.table_name::oid IN (SELECT c.oid FROM pg_class AS c WHERE c.relnamespace = $1::regnamespace)`, s)
	require.NoError(t, err)
	var ports []int
	for rows.Next() {
		var p int
		require.NoError(t, rows.Scan(&p))
		ports = append(ports, p)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ports, 1, "the tables of %s are on one node", s)
	return ports[0]
}

// coordinatorPool is a pool on the coordinator with no search_path of its
// own: a sharded worker scopes each statement to its shard.
func (b *shardedBed) coordinatorPool(t *testing.T, ctx context.Context, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return b.coordinatorPoolIn(t, ctx, maxConns, pgx.QueryExecModeCacheStatement)
}

// coordinatorPoolIn is coordinatorPool in pgx's exec mode mode.
func (b *shardedBed) coordinatorPoolIn(t *testing.T, ctx context.Context, maxConns int32, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(b.f.URL())
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	cfg.ConnConfig.DefaultQueryExecMode = mode
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// singleTaskPool is a coordinator pool on which Citus refuses every
// statement it would split into tasks on several shards
// (citus.multi_task_query_log_level = error): a worker that runs on it
// has sent only single-shard statements, each on its shard's node. The
// setting's force is checked on a table distributed by rows, whose count
// is such a statement.
func (b *shardedBed) singleTaskPool(t *testing.T, ctx context.Context) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(b.f.URL())
	require.NoError(t, err)
	cfg.MaxConns = 32
	cfg.ConnConfig.RuntimeParams["citus.multi_task_query_log_level"] = "error"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	coord := b.pools[b.shards[0]]
	_, err = coord.Exec(ctx, "CREATE TABLE IF NOT EXISTS public.multi_task_control (id bigint)")
	require.NoError(t, err)
	_, err = coord.Exec(ctx, "SELECT create_distributed_table('public.multi_task_control', 'id') WHERE NOT EXISTS (SELECT FROM public.citus_tables WHERE table_name = 'public.multi_task_control'::regclass)")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "SELECT count(*) FROM public.multi_task_control")
	require.ErrorContains(t, err, "multi-task", "the pool refuses a statement over several shards")
	return pool
}

// enqueue puts n jobs into shard k, one statement each through the
// coordinator, numbered from first on.
func (b *shardedBed) enqueue(t *testing.T, ctx context.Context, k, first, n int) {
	t.Helper()
	for i := range n {
		_, err := errand.Enqueue(ctx, b.pools[b.shards[k]], bed.Chore{N: k*perShard + first + i})
		require.NoError(t, err)
	}
}

// live is how many jobs are left in the shard's hopper_jobs.
func (b *shardedBed) live(t *testing.T, ctx context.Context, s string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.pools[s].QueryRow(ctx, "SELECT count(*) FROM hopper_jobs").Scan(&n))
	return n
}

func (b *shardedBed) liveAll(t *testing.T, ctx context.Context) int64 {
	t.Helper()
	var sum int64
	for _, s := range b.shards {
		sum += b.live(t, ctx, s)
	}
	return sum
}

// runs counts the runs of each job (by payload), safe for handlers.
type runs struct {
	mu sync.Mutex
	n  map[int]int
}

func newRuns() *runs { return &runs{n: map[int]int{}} }

func (r *runs) add(n int) {
	r.mu.Lock()
	r.n[n]++
	r.mu.Unlock()
}

// once checks that every job of shards × perShardJobs ran exactly once.
func (r *runs) once(t *testing.T, shards, jobsPerShard int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Len(t, r.n, shards*jobsPerShard, "every job ran")
	for n, times := range r.n {
		require.Equal(t, 1, times, "job %d ran once", n)
		require.Less(t, n%perShard, jobsPerShard)
	}
}

// start runs w until the returned stop is called, which returns Run's
// error. A Worker that stops before stop is called (a runtime that failed
// at its start) fails the test at once with its error, rather than leave
// the test waiting for work that will not be done.
func start(t *testing.T, ctx context.Context, w *shard.Worker) (stop func() error) {
	wctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		err := w.Run(wctx)
		if wctx.Err() == nil {
			t.Errorf("the sharded worker stopped on its own: %v", err)
		}
		errc <- err
	}()
	return func() error {
		cancel()
		return <-errc
	}
}

// newWorker is a Worker serving every shard of the bed.
func (b *shardedBed) newWorker(t *testing.T, pool *pgxpool.Pool, cfg worker.Config) *shard.Worker {
	t.Helper()
	return newWorkerOn(t, pool, b.shards, cfg)
}

func newWorkerOn(t *testing.T, pool *pgxpool.Pool, shards []string, cfg worker.Config) *shard.Worker {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = bed.QuietLog
	}
	w, err := shard.NewWorker(pool, shards, cfg)
	require.NoError(t, err)
	return w
}

// everyJobOnce: 50 jobs in each shard, enqueued before the start, all
// worked exactly once by one Worker, which registered and beat in every
// shard, on a pool that refuses any statement over several shards: every
// statement of the runtimes (start, claims, acknowledgements, beats,
// lease extensions, maintenance) touched one shard.
func (b *shardedBed) everyJobOnce(t *testing.T, ctx context.Context) {
	const n = 50
	for k := range b.shards {
		b.enqueue(t, ctx, k, 0, n)
	}
	pool := b.singleTaskPool(t, ctx)
	// Sweeps and prunes every 100ms, so that maintenance runs on the
	// single-task pool too; what the runtimes warn of is kept.
	var warned testdb.Buffer
	w := b.newWorker(t, pool, worker.Config{ID: "solo", Queues: map[string]int{jobs.DefaultQueue: 4}, SweepInterval: 100 * time.Millisecond,
		PollInterval: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&warned, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	ran := newRuns()
	require.NoError(t, shard.Handle(w, errand, func(_ context.Context, j *jobs.Job[bed.Chore]) error {
		ran.add(j.Payload.N)
		return nil
	}))
	began := time.Now()
	stop := start(t, ctx, w)
	testdb.WaitDrained(t, "every shard drained", func() int64 { return b.liveAll(t, ctx) })
	t.Logf("figure: %d jobs in %d shards worked by one sharded worker in %v (start included)", n*len(b.shards), len(b.shards), time.Since(began).Round(time.Millisecond))
	for _, s := range b.shards {
		var id string
		require.NoError(t, b.pools[s].QueryRow(ctx, "SELECT id FROM hopper_workers WHERE released_at IS NULL").Scan(&id))
		require.Equal(t, "solo/"+s, id, "the runtime of %s registered there under its suffixed ID", s)
		// And beats there: its heartbeat's statements, on a connection it
		// holds from the pool, are scoped to the shard too.
		testdb.WaitFor(t, "the runtime of "+s+" beating", func() bool {
			var beaten bool
			require.NoError(t, b.pools[s].QueryRow(ctx, "SELECT last_seen_at > started_at FROM hopper_workers WHERE id = $1", id).Scan(&beaten))
			return beaten
		})
	}
	require.NoError(t, stop())
	require.Empty(t, warned.String(), "no statement of the runtimes failed, none refused as multi-task")
	ran.once(t, len(b.shards), n)
	for _, s := range b.shards {
		var rows int
		require.NoError(t, b.pools[s].QueryRow(ctx, "SELECT count(*) FROM hopper_workers").Scan(&rows))
		require.Zero(t, rows, "the runtime of %s removed its row at its stop", s)
	}
}

// twoWorkers: two Workers (each on a pool of its own, as two processes
// would be) serve the same four shards. Each job runs once, and both get
// work: the first jobs each Worker runs wait until the other Worker runs
// one too, so neither can take every job before the other starts.
func (b *shardedBed) twoWorkers(t *testing.T, ctx context.Context) {
	const n = 40
	for k := range b.shards {
		b.enqueue(t, ctx, k, 0, n)
	}
	ran := newRuns()
	var running [2]atomic.Int64
	both := make(chan struct{})
	var bothOnce sync.Once
	var stops []func() error
	for i := range 2 {
		w := b.newWorker(t, b.coordinatorPool(t, ctx, 24), worker.Config{ID: fmt.Sprintf("pair-%d", i), Queues: map[string]int{jobs.DefaultQueue: 2}})
		require.NoError(t, shard.Handle(w, errand, func(ctx context.Context, j *jobs.Job[bed.Chore]) error {
			running[i].Add(1)
			if running[0].Load() > 0 && running[1].Load() > 0 {
				bothOnce.Do(func() { close(both) })
			}
			// This Worker's slots (2 a shard, 8 in all) hold fewer jobs
			// than are waiting (160): the other Worker claims the rest.
			select {
			case <-both:
			case <-ctx.Done():
				return ctx.Err()
			}
			ran.add(j.Payload.N)
			return nil
		}))
		stops = append(stops, start(t, ctx, w))
	}
	testdb.WaitDrained(t, "every shard drained by the two workers", func() int64 { return b.liveAll(t, ctx) })
	for _, stop := range stops {
		require.NoError(t, stop())
	}
	ran.once(t, len(b.shards), n)
	t.Logf("jobs run by each worker: %d and %d", running[0].Load(), running[1].Load())
	require.Positive(t, running[0].Load())
	require.Positive(t, running[1].Load())
	require.EqualValues(t, n*len(b.shards), running[0].Load()+running[1].Load(), "no job ran twice")
}

// lateShard: one shard's jobs hold every slot of theirs (their handlers
// wait until the test lets them go); another shard, empty at the start,
// gets jobs: they are found by the poll and worked while the first
// shard's handlers still wait, so a busy shard starves none.
func (b *shardedBed) lateShard(t *testing.T, ctx context.Context) {
	const busy, late = 20, 10
	b.enqueue(t, ctx, 0, 0, busy)
	pool := b.coordinatorPool(t, ctx, 32)
	w := b.newWorker(t, pool, worker.Config{ID: "late", Queues: map[string]int{jobs.DefaultQueue: 4}, PollInterval: 200 * time.Millisecond})
	ran := newRuns()
	gate := make(chan struct{})
	var held atomic.Int64
	require.NoError(t, shard.Handle(w, errand, func(ctx context.Context, j *jobs.Job[bed.Chore]) error {
		if j.Payload.N/perShard == 0 {
			held.Add(1)
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		ran.add(j.Payload.N)
		return nil
	}))
	stop := start(t, ctx, w)
	testdb.WaitFor(t, "the busy shard's slots all held", func() bool { return held.Load() == 4 })
	last := len(b.shards) - 1
	began := time.Now()
	b.enqueue(t, ctx, last, 0, late)
	testdb.WaitDrained(t, "the late shard drained", func() int64 { return b.live(t, ctx, b.shards[last]) })
	t.Logf("figure: %d jobs of a shard enqueued after the start worked in %v, by the poll (200ms), while another shard's handlers held every slot of theirs",
		late, time.Since(began).Round(time.Millisecond))
	require.EqualValues(t, busy, b.live(t, ctx, b.shards[0]), "the busy shard's jobs are all still there")
	close(gate)
	testdb.WaitDrained(t, "the busy shard drained", func() int64 { return b.live(t, ctx, b.shards[0]) })
	require.NoError(t, stop())
	ran.mu.Lock()
	require.Len(t, ran.n, busy+late)
	for n, times := range ran.n {
		require.Equal(t, 1, times, "job %d ran once", n)
	}
	ran.mu.Unlock()
}

// claims is how many claim statements the shard's runtime sent for the
// default queue: the sample count of hopper_claim_batch_size, which every
// claim observes, an empty one included.
func claims(t *testing.T, reg *prometheus.Registry, s string) uint64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	var n uint64
	for _, fam := range families {
		if fam.GetName() != "hopper_claim_batch_size" {
			continue
		}
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["shard"] == s && labels["queue"] == jobs.DefaultQueue {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

// coordinatorWakeUp: with a poll interval of ten minutes, a runtime
// claims after its start only when woken. Once every runtime listens and
// has made its start's claims (two: its first, and the one its listener's
// subscription asks for), a job is enqueued into each of two shards; a
// pg_notify on the coordinator naming the first shard and the queue wakes
// the first shard's runtime, which works its job, while the second's job
// stays pending and its runtime sends no claim: the enqueue trigger's
// NOTIFY, on the node, reaches no worker listening on the coordinator.
// Then the second shard's notify wakes it too.
func (b *shardedBed) coordinatorWakeUp(t *testing.T, ctx context.Context) {
	pool := b.coordinatorPool(t, ctx, 32)
	reg := prometheus.NewRegistry()
	w := b.newWorker(t, pool, worker.Config{ID: "woken", Queues: map[string]int{jobs.DefaultQueue: 2}, PollInterval: 10 * time.Minute, Registerer: reg})
	done := map[int]chan struct{}{}
	for k := range b.shards {
		done[k*perShard] = make(chan struct{})
	}
	require.NoError(t, shard.Handle(w, errand, func(_ context.Context, j *jobs.Job[bed.Chore]) error {
		close(done[j.Payload.N])
		return nil
	}))
	stop := start(t, ctx, w)
	defer func() { require.NoError(t, stop()) }()
	testdb.WaitFor(t, "every runtime listening, its start's claims made", func() bool {
		for _, s := range b.shards {
			if metricsum.Sum(`hopper_listener_up{shard="`+s+`"}`, reg) != 1 || claims(t, reg, s) < 2 {
				return false
			}
		}
		return true
	})
	first, second := b.shards[1], b.shards[2]
	before := map[string]uint64{first: claims(t, reg, first), second: claims(t, reg, second)}
	b.enqueue(t, ctx, 1, 0, 1)
	b.enqueue(t, ctx, 2, 0, 1)
	notify := func(s string) {
		_, err := pool.Exec(ctx, "SELECT pg_notify('hopper_jobs', json_build_object('schema', $1::text, 'queue', $2::text)::text)", s, jobs.DefaultQueue)
		require.NoError(t, err)
	}
	began := time.Now()
	notify(first)
	select {
	case <-done[1*perShard]:
	case <-time.After(testdb.WaitLimit):
		require.FailNow(t, "the woken shard's job was not worked")
	}
	t.Logf("figure: a job woken by a coordinator pg_notify worked %v after the notify (poll interval 10m)", time.Since(began).Round(time.Millisecond))
	require.Greater(t, claims(t, reg, first), before[first], "the notify made the first shard's runtime claim")
	var state string
	require.NoError(t, b.pools[second].QueryRow(ctx, "SELECT state FROM hopper_jobs").Scan(&state))
	require.Equal(t, "pending", state, "the second shard's job, not woken, waits for the poll")
	require.Equal(t, before[second], claims(t, reg, second), "the second shard's runtime sent no claim: the node's NOTIFY did not reach it")
	notify(second)
	select {
	case <-done[2*perShard]:
	case <-time.After(testdb.WaitLimit):
		require.FailNow(t, "the second shard's job was not worked once woken")
	}
	testdb.WaitDrained(t, "both jobs acknowledged", func() int64 { return b.liveAll(t, ctx) })
}

// figures: the same 1,000 jobs worked by a Worker serving one shard
// (all of them in it), then by one serving four (250 in each), with the
// same concurrency a shard, on a pool in pgx's default mode (its
// statement cache: each statement scoped in a transaction of its own);
// then the four shards again on a pool in exec mode (the scope and the
// statement in one round trip). Each is timed from the first handler's
// run to the last one's (the Worker's start left out). Logged, never
// asserted.
func (b *shardedBed) figures(t *testing.T, ctx context.Context) {
	const total = 1000
	measure := func(shards []string, mode pgx.QueryExecMode) float64 {
		for k := range shards {
			b.enqueue(t, ctx, k, 0, total/len(shards))
		}
		pool := b.coordinatorPoolIn(t, ctx, 40, mode)
		w := newWorkerOn(t, pool, shards, worker.Config{Queues: map[string]int{jobs.DefaultQueue: 8}})
		var mu sync.Mutex
		var first, last time.Time
		require.NoError(t, shard.Handle(w, errand, func(context.Context, *jobs.Job[bed.Chore]) error {
			now := time.Now()
			mu.Lock()
			if first.IsZero() {
				first = now
			}
			last = now
			mu.Unlock()
			return nil
		}))
		stop := start(t, ctx, w)
		testdb.WaitDrained(t, "the figure's jobs drained", func() int64 { return b.liveAll(t, ctx) })
		require.NoError(t, stop())
		return total / last.Sub(first).Seconds()
	}
	one := measure(b.shards[:1], pgx.QueryExecModeCacheStatement)
	four := measure(b.shards, pgx.QueryExecModeCacheStatement)
	exec := measure(b.shards, pgx.QueryExecModeExec)
	t.Logf("figure: one sharded worker (concurrency 8 a shard), %d jobs: %.0f jobs/s all in one shard, %.0f jobs/s in %d shards on 2 nodes (ratio %.2f); "+
		"%.0f jobs/s in %d shards on a pool in exec mode (%.2f of the statement cache's)",
		total, one, four, len(b.shards), four/one, exec, len(b.shards), exec/four)
}

// testWriter writes a worker's log lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// processEnv carries a worker process's orders from the test to
// TestShardedWorkerProcess, in this test binary run again.
const processEnv = "HOPPER_SHARDED_WORKER_PROCESS"

// workerOrders are what the worker process serves.
type workerOrders struct {
	URL    string   `json:"url"`
	Shards []string `json:"shards"`
	ID     string   `json:"id"`
}

// TestShardedWorkerProcess is not a test: it is the sharded worker
// process the takeover scenario starts (this test binary run again with
// processEnv set) and kills. Its handlers never return, so the jobs it
// claims stay running under its leases until it is gone. It skips
// without processEnv.
func TestShardedWorkerProcess(t *testing.T) {
	raw := os.Getenv(processEnv)
	if raw == "" {
		t.Skip("the takeover scenario's worker process; runs only when started by it")
	}
	var o workerOrders
	require.NoError(t, json.Unmarshal([]byte(raw), &o))
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, o.URL)
	require.NoError(t, err)
	w, err := shard.NewWorker(pool, o.Shards, worker.Config{ID: o.ID, Queues: map[string]int{jobs.DefaultQueue: 2},
		BeatInterval: 100 * time.Millisecond, LeaseDuration: 5 * time.Minute, Logger: bed.QuietLog})
	require.NoError(t, err)
	require.NoError(t, shard.Handle(w, errand, func(ctx context.Context, _ *jobs.Job[bed.Chore]) error {
		<-ctx.Done() // held until the process is killed
		return ctx.Err()
	}))
	require.NoError(t, w.Run(ctx))
}

// takeover: a sharded worker process claims jobs in every shard (two
// each, its concurrency) and is killed with SIGKILL while their handlers
// run. Another sharded worker hands them back, shard by shard, through
// each shard's registry (the killed one's rows stop beating; their leases,
// five minutes long, have not expired, so no sweep can explain it), and
// runs every job once more: none lost, each of the killed worker's jobs
// on its second attempt, claimed at once though the heir polls every ten
// minutes: the hand-back's wake-up, sent on the coordinator, woke it.
func (b *shardedBed) takeover(t *testing.T, ctx context.Context) {
	const n = 5
	for k := range b.shards {
		b.enqueue(t, ctx, k, 0, n)
	}
	orders, err := json.Marshal(workerOrders{URL: b.f.URL(), Shards: b.shards, ID: "doomed"})
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestShardedWorkerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), processEnv+"="+string(orders))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()
	held := func(s string) int {
		var c int
		require.NoError(t, b.pools[s].QueryRow(ctx, "SELECT count(*) FROM hopper_jobs WHERE state = 'running' AND lease_owner = $1", "doomed/"+s).Scan(&c))
		return c
	}
	testdb.WaitFor(t, "the worker process holding two jobs in every shard", func() bool {
		select {
		case <-exited:
			require.FailNow(t, "the worker process ended", "%s", out.String())
		default:
		}
		for _, s := range b.shards {
			if held(s) < 2 {
				return false
			}
		}
		return true
	})
	reg := prometheus.NewRegistry()
	// A poll interval of ten minutes: once the heir has started (its
	// first claims made, its listeners subscribed), it claims only when
	// woken, so the jobs handed back are claimed because the hand-back's
	// wake-up (announce's pg_notify, which runs on the coordinator)
	// reaches the runtimes listening there.
	heir := b.newWorker(t, b.coordinatorPool(t, ctx, 32), worker.Config{ID: "heir", Queues: map[string]int{jobs.DefaultQueue: 4},
		BeatInterval: 100 * time.Millisecond, PollInterval: 10 * time.Minute, Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	ran := newRuns()
	var again atomic.Int64
	require.NoError(t, shard.Handle(heir, errand, func(_ context.Context, j *jobs.Job[bed.Chore]) error {
		ran.add(j.Payload.N)
		if j.Attempt == 2 {
			again.Add(1)
		}
		return nil
	}))
	stop := start(t, ctx, heir)
	testdb.WaitFor(t, "the heir listening in every shard, the jobs left pending worked", func() bool {
		for _, s := range b.shards {
			if metricsum.Sum(`hopper_listener_up{shard="`+s+`"}`, reg) != 1 {
				return false
			}
		}
		ran.mu.Lock()
		defer ran.mu.Unlock()
		return len(ran.n) == (n-2)*len(b.shards)
	})
	require.NoError(t, cmd.Process.Kill())
	<-exited
	gone := time.Now()
	testdb.WaitDrained(t, "every shard drained by the heir", func() int64 { return b.liveAll(t, ctx) })
	t.Logf("figure: a killed sharded worker's jobs in %d shards handed back and worked %v after the kill (beats of 100ms), woken by the hand-back's coordinator notify (poll interval 10m)",
		len(b.shards), time.Since(gone).Round(time.Millisecond))
	require.NoError(t, stop())
	ran.once(t, len(b.shards), n)
	require.EqualValues(t, 2*len(b.shards), again.Load(), "the killed worker's jobs ran again, on their second attempt")
	for _, s := range b.shards {
		require.EqualValues(t, 2, metricsum.Sum(`hopper_worker_jobs_released_total{shard="`+s+`",reason="worker gone"}`, reg),
			"the heir handed back the killed worker's two jobs of %s", s)
	}
}

// scheduleOnOne: a schedule defined, through Each, on the last shard's
// runtime fires in that shard only: its definition is in that shard's
// hopper_schedules and in no other's, and its jobs run. (Until the
// schedules' upserts were written for Citus, that runtime failed at its
// start with SQLSTATE 0A000, and the whole sharded worker stopped.)
func (b *shardedBed) scheduleOnOne(t *testing.T, ctx context.Context) {
	last := b.shards[len(b.shards)-1]
	// The shard is made silent, as shard.Create makes each shard (this
	// bed migrates its schemas itself): a fire's transaction commits in
	// two phases through the coordinator, which a NOTIFY would forbid. Its
	// jobs are then found by the poll.
	_, err := b.pools[last].Exec(ctx, "CREATE OR REPLACE FUNCTION hopper_silent() RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS 'SELECT true'")
	require.NoError(t, err)
	w := b.newWorker(t, b.coordinatorPool(t, ctx, 32), worker.Config{ID: "timer", PollInterval: 200 * time.Millisecond})
	var fired atomic.Int64
	require.NoError(t, shard.Handle(w, errand, func(_ context.Context, j *jobs.Job[bed.Chore]) error {
		if j.Payload.N == 4242 {
			fired.Add(1)
		}
		return nil
	}))
	require.NoError(t, w.Each(func(s string, rt *worker.Worker) error {
		if s != last {
			return nil
		}
		return worker.Schedule(rt, "citus-tick", errand, "@every 1s", func(time.Time) bed.Chore { return bed.Chore{N: 4242} })
	}))
	began := time.Now()
	stop := start(t, ctx, w)
	testdb.WaitFor(t, "the schedule fired twice", func() bool { return fired.Load() >= 2 })
	t.Logf("figure: a schedule of one shard fired twice in %v (@every 1s)", time.Since(began).Round(time.Millisecond))
	require.NoError(t, stop())
	for _, s := range b.shards {
		var n int
		require.NoError(t, b.pools[s].QueryRow(ctx, "SELECT count(*) FROM hopper_schedules WHERE name = 'citus-tick'").Scan(&n))
		want := 0
		if s == last {
			want = 1
		}
		require.Equal(t, want, n, "the schedule is defined in %s only", last)
	}
	// The next scenarios count every shard's jobs: the schedule and a tick
	// it may have left go.
	_, err = b.pools[last].Exec(ctx, "DELETE FROM hopper_jobs WHERE kind = $1", errand.Name())
	require.NoError(t, err)
	_, err = b.pools[last].Exec(ctx, "DELETE FROM hopper_schedules WHERE name = 'citus-tick'")
	require.NoError(t, err)
	_, err = b.pools[last].Exec(ctx, "CREATE OR REPLACE FUNCTION hopper_silent() RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS 'SELECT false'")
	require.NoError(t, err)
}
