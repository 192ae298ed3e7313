package citus

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/citusbed"
	"github.com/hopperq/hopper/internal/testbed/pgcluster"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/tests/internal/bed"
	"github.com/hopperq/hopper/worker"
)

// movedQueue is the queue the load runs in.
const movedQueue = "moved"

// TestCitusShardMove: a distributed Hopper schema, refused an online move
// at migration 31 (hopper_rate_claims had no replica identity) and taken
// at 32; a worker working it through the coordinator while a producer
// enqueues one job per statement; the schema moved to the other worker
// node by citus_schema_move with the default transfer mode (logical
// replication) under that load; then the node holding it restarted under
// the same load. Each time, every job enqueued ends completed, none ran
// twice but as docs/guarantees.md allows (a job runs again only after a
// run whose result did not count), and claims resume. The figures (jobs,
// the move's time, the node's time down, the longest gap between two
// completions around each) are logged, never asserted.
func TestCitusShardMove(t *testing.T) {
	testdb.Slow(t, "starts a Citus formation, moves a schema and restarts a node under load")
	f := citusbed.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	const name = "hopper_moved"
	pool := distributedSchema(t, ctx, f, name)
	require.NoError(t, schema.Up(ctx, pool))
	from := schemaNode(t, ctx, pool, name)
	requireReplicaIdentities(t, ctx, f.URL(), name)
	requireReplicaIdentities(t, ctx, nodeURL(f, from), name) // the shards too
	to := -1
	for _, w := range f.Workers {
		if w.Port() != from {
			to = w.Port()
		}
	}
	require.NotEqual(t, -1, to)
	move := func(ctx context.Context) error {
		_, err := pool.Exec(ctx, "SELECT citus_schema_move($1::regnamespace, '127.0.0.1'::text, $2::integer)", name, to)
		return err
	}

	// Without migration 32 (undone here with the later ones, back to 31,
	// through the migrator's Citus path), the online move is refused
	// before it starts.
	mg, err := schema.NewMigrator(ctx, pool)
	require.NoError(t, err)
	require.NoError(t, mg.Down(ctx, int(schema.Latest())-31))
	require.ErrorContains(t, move(ctx), "REPLICA IDENTITY", "a schema at 31 cannot move online")
	require.Equal(t, from, schemaNode(t, ctx, pool, name), "the refused move left the schema where it was")
	require.NoError(t, mg.Up(ctx))
	require.NoError(t, mg.Close())

	t.Run("move", func(t *testing.T) {
		l := newLoad(t, ctx, pool)
		l.waitCompleted(t, 200, "the worker works the schema before the move")
		rl := startRateLog(t, ctx, pool)
		began := time.Now()
		require.NoError(t, move(ctx), "citus_schema_move with the default transfer mode")
		ended := time.Now()
		require.Equal(t, to, schemaNode(t, ctx, pool, name), "the schema is on the other node")
		l.waitCompletedAfter(t, ended, 200, "claims resume after the move")
		rl.check(t, ctx, pool)
		l.finish(t, ctx)
		l.account(t, ctx)
		t.Logf("figure: schema moved from port %d to %d by citus_schema_move (logical replication) in %v under load",
			from, to, ended.Sub(began).Round(time.Millisecond))
		t.Logf("figure: after the move, the first completion came %v after it returned; the longest gap between two completions around it %v",
			l.firstAfter(ended).Round(time.Millisecond), l.longestGap(began, ended).Round(time.Millisecond))
	})

	t.Run("node restart", func(t *testing.T) {
		var node *pgcluster.Cluster
		for _, w := range f.Workers {
			if w.Port() == schemaNode(t, ctx, pool, name) {
				node = w
			}
		}
		require.NotNil(t, node)
		l := newLoad(t, ctx, pool)
		l.waitCompleted(t, 200, "the worker works the schema before the restart")
		began := time.Now()
		require.NoError(t, pgCtl(ctx, node, "stop", "-m", "fast"))
		stopped := time.Now()
		require.NoError(t, pgCtl(ctx, node, "start", "-l", filepath.Join(node.Dir(), "postgres.log")))
		ended := time.Now()
		l.waitCompletedAfter(t, ended, 200, "claims resume after the restart")
		l.finish(t, ctx)
		l.account(t, ctx)
		t.Logf("figure: the schema's node (port %d) stopped (fast) in %v and started in %v, under load",
			node.Port(), stopped.Sub(began).Round(time.Millisecond), ended.Sub(stopped).Round(time.Millisecond))
		t.Logf("figure: after the restart, the first completion came %v after the node was up; the longest gap between two completions around it %v",
			l.firstAfter(ended).Round(time.Millisecond), l.longestGap(began, ended).Round(time.Millisecond))
	})
}

// rateLog writes hopper_rate_claims while the schema moves, as the
// rate-limited claims would (they are refused through the coordinator
// today): rows of one group inserted in equal pairs, as the log may hold
// them, half the pairs updated and a third deleted, each a statement of
// its own. Logical replication finds the rows to update and delete by the
// whole row (migration 32's REPLICA IDENTITY FULL), equal rows included;
// check compares the log after the move with what was written.
type rateLog struct {
	stop context.CancelFunc
	done chan struct{}
	n    int   // groups written whole
	err  error // the statement that failed, if one did
}

func startRateLog(t *testing.T, ctx context.Context, pool *pgxpool.Pool) *rateLog {
	ctx, stop := context.WithCancel(ctx)
	r := &rateLog{stop: stop, done: make(chan struct{})}
	t.Cleanup(func() { stop(); <-r.done })
	go func() {
		defer close(r.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		at := time.Now().UTC().Truncate(time.Second)
		for i := 0; ; i++ {
			group := fmt.Sprint(i)
			steps := []string{`INSERT INTO hopper_rate_claims (queue, rate_group, claimed_at, jobs, rate_limit, window_ms)
				VALUES ('moved-log', $1, $2, 1, 10, 1000), ('moved-log', $1, $2, 1, 10, 1000)`}
			if i%2 == 0 {
				steps = append(steps, `UPDATE hopper_rate_claims SET jobs = 2 WHERE queue = 'moved-log' AND rate_group = $1 AND claimed_at = $2`)
			}
			if i%3 == 0 {
				steps = append(steps, `DELETE FROM hopper_rate_claims WHERE queue = 'moved-log' AND rate_group = $1 AND claimed_at = $2`)
			}
			for _, step := range steps {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				if _, err := pool.Exec(ctx, step, group, at); err != nil {
					if ctx.Err() == nil {
						r.err = fmt.Errorf("group %d: %w", i, err)
					}
					return
				}
			}
			r.n = i + 1
		}
	}()
	return r
}

// check stops the writes and compares the log with them: each group
// written whole is there as written, a pair of rows of 1 or 2 jobs or
// none.
func (r *rateLog) check(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	r.stop()
	<-r.done
	require.NoError(t, r.err, "a write to the rate log failed during the move")
	rows, err := pool.Query(ctx, `SELECT rate_group::integer, count(*)::integer, min(jobs), max(jobs)
		FROM hopper_rate_claims WHERE queue = 'moved-log' GROUP BY 1`)
	require.NoError(t, err)
	got := map[int][3]int32{}
	for rows.Next() {
		var group int
		var n, least, most int32
		require.NoError(t, rows.Scan(&group, &n, &least, &most))
		got[group] = [3]int32{n, least, most}
	}
	require.NoError(t, rows.Err())
	for i := range r.n {
		want, ok := [3]int32{2, 1, 1}, i%3 != 0
		if i%2 == 0 {
			want = [3]int32{2, 2, 2}
		}
		if !ok {
			require.NotContains(t, got, i, "group %d was deleted", i)
			continue
		}
		require.Equal(t, want, got[i], "group %d: rows, least and most jobs", i)
	}
	t.Logf("figure: %d groups of the rate log written across the move (inserts of equal pairs, updates, deletes), each as written after it", r.n)
}

// pgCtl runs pg_ctl on a node's data directory (waiting for it), as the
// user that runs its server.
func pgCtl(ctx context.Context, c *pgcluster.Cluster, args ...string) error {
	bin, err := pgcluster.Bin()
	if err != nil {
		return err
	}
	cred, err := pgcluster.NonRoot()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pg_ctl"), append([]string{"-w", "-t", "120", "-D", filepath.Join(c.Dir(), "data")}, args...)...)
	cmd.Dir = c.Dir()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// requireReplicaIdentities: every table of the schema with rows of its own
// (partitions included) has a replica identity, which an online move
// needs (migration 32).
func requireReplicaIdentities(t *testing.T, ctx context.Context, url, name string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var tables int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace AND relkind = 'r'", name).Scan(&tables))
	require.NotZero(t, tables, "the schema's tables are on %s", url)
	rows, err := conn.Query(ctx, `
		SELECT c.relname::text FROM pg_class AS c
		WHERE c.relnamespace = $1::regnamespace AND c.relkind = 'r'
		  AND NOT (c.relreplident = 'f'
		           OR (c.relreplident IN ('d', 'i')
		               AND EXISTS (SELECT FROM pg_index AS i WHERE i.indrelid = c.oid
		                           AND (CASE c.relreplident WHEN 'd' THEN i.indisprimary ELSE i.indisreplident END))))
		ORDER BY 1`, name)
	require.NoError(t, err)
	missing, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, missing, "tables without a replica identity")
}

// nodeURL is the connection string of the worker node on port.
func nodeURL(f *citusbed.Formation, port int) string {
	for _, w := range f.Workers {
		if w.Port() == port {
			return w.URL()
		}
	}
	return ""
}

// schemaNode is the port of the worker node holding the schema's tables.
func schemaNode(t *testing.T, ctx context.Context, pool *pgxpool.Pool, name string) int {
	t.Helper()
	var ports []int32
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT coalesce(array_agg(DISTINCT s.nodeport), '{}') FROM pg_catalog.citus_shards AS s
		WHERE s.table_name::regclass::oid IN (SELECT c.oid FROM pg_class AS c WHERE c.relnamespace = $1::regnamespace)`, name).Scan(&ports))
	require.Len(t, ports, 1, "the schema's tables are on one node")
	return int(ports[0])
}

// load is a producer enqueueing one job per statement and a worker
// working them through the coordinator, with what each did recorded.
type load struct {
	pool    *pgxpool.Pool // the producer's: search_path is the schema
	stop    context.CancelFunc
	done    chan struct{}
	werr    chan error
	wstop   context.CancelFunc
	stopped bool // finish read the worker's return
	mu      sync.Mutex
	ids     []int64       // enqueued, acknowledged by the server
	failed  []error       // enqueues that returned an error
	runs    map[int64]int // handler runs per job
	done1   map[int64]int // done outcomes per job
	later   int           // jobs done on a later attempt than their first
	redo    int           // outcomes after which a job runs again
	times   []time.Time   // each done outcome's time, in order
	outs    map[worker.Outcome]int
}

func newLoad(t *testing.T, ctx context.Context, producer *pgxpool.Pool) *load {
	t.Helper()
	l := &load{pool: producer, done: make(chan struct{}), werr: make(chan error, 1),
		runs: map[int64]int{}, done1: map[int64]int{}, outs: map[worker.Outcome]int{}}

	// The worker's pool is scoped by its search_path, as the producer's,
	// not by Config.Schema: with Config.Schema the heartbeat's own
	// connection (a *pgxpool.Conn) cannot be scoped, and its beats and
	// lease extensions fail (schemascope.ErrUnsupported), which would let
	// the leases lapse during a long run.
	w, err := worker.New(producer, worker.Config{
		Queues: map[string]int{movedQueue: 4},
		// A completed job is not kept: keeping it in the history is
		// refused through the coordinator today (SQLSTATE 42601), so the
		// end proves completion by the done outcome and the job's row gone
		// from the live and dead tables.
		OnOutcome: []worker.OutcomeHook{func(job *jobs.Row, o worker.Outcome, _ error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.outs[o]++
			switch o {
			case worker.OutcomeDone:
				l.times = append(l.times, time.Now())
				l.done1[job.ID]++
				if job.Attempt > 1 {
					l.later++
				}
			case worker.OutcomeRefused, worker.OutcomeUnconfirmed, worker.OutcomeUnrecorded,
				worker.OutcomeAbandoned, worker.OutcomeReleased, worker.OutcomeFailed:
				l.redo++
			}
		}},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, chore, func(_ context.Context, j *jobs.Job[bed.Chore]) error {
		l.mu.Lock()
		l.runs[j.ID]++
		l.mu.Unlock()
		return nil
	}))
	wctx, wstop := context.WithCancel(ctx)
	l.wstop = wstop
	go func() { l.werr <- w.Run(wctx) }()

	// The producer: one job per statement (a batch's INSERT ... SELECT
	// is refused through the coordinator, docs/scaling-out.md), every
	// 5 ms; an error is recorded and the next
	// job tried.
	pctx, pstop := context.WithCancel(ctx)
	l.stop = pstop
	go func() {
		defer close(l.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-pctx.Done():
				return
			case <-tick.C:
			}
			res, err := chore.Enqueue(pctx, producer, bed.Chore{N: i}, jobs.Queue(movedQueue))
			l.mu.Lock()
			if err != nil {
				if pctx.Err() == nil {
					l.failed = append(l.failed, err)
				}
			} else {
				l.ids = append(l.ids, res.ID)
			}
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.stop()
		<-l.done
		if !l.stopped {
			l.wstop()
			<-l.werr
		}
	})
	return l
}

func (l *load) workerAlive(t *testing.T) {
	t.Helper()
	select {
	case err := <-l.werr:
		l.stopped = true
		require.FailNow(t, "the worker stopped", "%v", err)
	default:
	}
}

// waitCompleted waits until n jobs have completed.
func (l *load) waitCompleted(t *testing.T, n int, what string) {
	t.Helper()
	testdb.WaitFor(t, what, func() bool {
		l.workerAlive(t)
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.times) >= n
	})
}

// waitCompletedAfter waits until n jobs have completed after at.
func (l *load) waitCompletedAfter(t *testing.T, at time.Time, n int, what string) {
	t.Helper()
	testdb.WaitFor(t, what, func() bool {
		l.workerAlive(t)
		l.mu.Lock()
		defer l.mu.Unlock()
		i, _ := slices.BinarySearchFunc(l.times, at, func(a, b time.Time) int { return a.Compare(b) })
		return len(l.times)-i >= n
	})
}

// finish stops the producer, waits until the worker has worked every job
// left, and stops the worker.
func (l *load) finish(t *testing.T, ctx context.Context) {
	t.Helper()
	began := time.Now()
	l.stop()
	<-l.done
	defer func() {
		t.Logf("the producer stopped, the jobs left drained and the worker stopped in %v", time.Since(began).Round(time.Millisecond))
	}()
	testdb.WaitDrained(t, "every job enqueued worked", func() int64 {
		l.workerAlive(t)
		var live int64
		require.NoError(t, l.pool.QueryRow(ctx, "SELECT count(*) FROM hopper_jobs").Scan(&live))
		return live
	})
	l.wstop()
	l.stopped = true
	require.NoError(t, <-l.werr)
}

// account: every job enqueued completed: it ran, and its row is gone
// from the live and the dead tables (the only other ways out of the live
// table; completed jobs are not kept, above), so its own acknowledgement
// took it. None completed twice, none ran more often than the runs whose
// results did not count allow (docs/guarantees.md: delivery is at least
// once, a job runs again when its lease was lost or its worker gone).
//
// None that completed was reported otherwise (refused): through the
// coordinator, an acknowledgement's commit can fail with an error after
// the node committed it (the node stopped between the two: a FATAL
// termination, "could not commit transaction for shard", a lost node
// connection), and the worker must take that outcome as unknown and read
// what took effect (internal/worker/commitfate). Jobs done on a later
// attempt are counted and logged: with no handler failing, one means a
// claim's jobs waited for their lease.
func (l *load) account(t *testing.T, ctx context.Context) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var left []int64
	rows, err := l.pool.Query(ctx, `SELECT id FROM hopper_jobs WHERE id = ANY ($1)
		UNION ALL SELECT id FROM hopper_dead_jobs WHERE id = ANY ($1)`, l.ids)
	require.NoError(t, err)
	left, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	lost, duplicates, doneTwice, misreported := len(left), 0, 0, 0
	for _, id := range l.ids {
		switch {
		case slices.Contains(left, id):
		case l.runs[id] == 0:
			lost++ // gone without running
		case l.done1[id] == 0:
			misreported++
		}
		doneTwice += max(l.done1[id]-1, 0)
		duplicates += max(l.runs[id]-1, 0)
	}
	t.Logf("figure: %d jobs enqueued (%d enqueues refused), %d lost (%d left live or dead), %d duplicate runs, %d jobs done twice, %d done on a later attempt, %d completed but reported otherwise; outcomes %v",
		len(l.ids), len(l.failed), lost, len(left), duplicates, doneTwice, l.later, misreported, l.outs)
	for i, err := range l.failed {
		if i == 5 {
			break
		}
		t.Logf("an enqueue refused: %v", err)
	}
	require.Zero(t, lost, "every job enqueued completed")
	require.Zero(t, doneTwice, "a job's completion counts once")
	require.Zero(t, misreported, "a job completed by its own acknowledgement is reported done, never refused")
	require.LessOrEqual(t, duplicates, l.redo, "a job runs again only after a run whose result did not count (docs/guarantees.md)")
}

// firstAfter is how long after at the first completion came.
func (l *load) firstAfter(at time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	i, _ := slices.BinarySearchFunc(l.times, at, func(a, b time.Time) int { return a.Compare(b) })
	if i == len(l.times) {
		return -1
	}
	return l.times[i].Sub(at)
}

// longestGap is the longest time between two completions from the last
// one before from to the first one after to.
func (l *load) longestGap(from, to time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var longest time.Duration
	for i := 1; i < len(l.times); i++ {
		if l.times[i].Before(from) {
			continue
		}
		longest = max(longest, l.times[i].Sub(l.times[i-1]))
		if l.times[i].After(to) {
			break
		}
	}
	return longest
}
