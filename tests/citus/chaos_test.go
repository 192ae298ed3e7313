package citus

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/hopperq/hopper/internal/testbed/citusbed"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/tests/internal/bed"
	"github.com/hopperq/hopper/worker"
)

// The chaos accounting across shards: two distributed Hopper schemas on
// the formation's two worker nodes, each with the application's own tables
// beside the queue's (an order, the run log and the ledger). Producers
// enqueue a job and its order in one transaction, some of them rolled
// back; a quarter of the jobs belong to sequences. Three worker processes,
// each serving both shards, are killed (SIGKILL) and restarted while they
// work. Producers and workers connect to the node that holds each shard
// (Citus runs a statement on any node, and on the shard's own node it
// runs locally, its triggers' NOTIFY included: docs/scaling-out.md). Every handler run is logged at once in
// chaos_runs, and every completion in chaos_ledger in the same transaction
// as the job's acknowledgement (worker.AckTx), so the verdict comes from
// the tables: each committed order's job completed exactly once, nothing
// of a rolled-back order ran, no claim ran twice, each sequence's jobs
// completed in their order.

// The worker process's environment: the shards it serves, each with the
// URL of the node that holds it (JSON, shard to URL), and its ID.
const (
	chaosURLEnv = "HOPPER_CITUS_CHAOS_SHARDS"
	chaosIDEnv  = "HOPPER_CITUS_CHAOS_ID"
)

// chaosTables are the application's tables, made in each shard (a
// distributed schema), so on the shard's node beside its queue: a job,
// its order and its ledger row commit on one node.
var chaosTables = []string{
	"CREATE TABLE chaos_orders (id bigserial PRIMARY KEY, job_id bigint NOT NULL, sequence_key text)",
	"CREATE TABLE chaos_runs (job_id bigint NOT NULL, attempt int NOT NULL, worker text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())",
	"CREATE TABLE chaos_ledger (job_id bigint NOT NULL, attempt int NOT NULL, worker text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())",
}

// runChaosWorker is a worker process: one worker runtime per shard, on a
// pool of the shard's own connected to the shard's node (its search_path
// is the shard, for the handler's writes), until SIGTERM or SIGKILL.
func runChaosWorker() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	id := os.Getenv(chaosIDEnv)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	var shards map[string]string
	if err := json.Unmarshal([]byte(os.Getenv(chaosURLEnv)), &shards); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	g, ctx := errgroup.WithContext(ctx)
	for shard, url := range shards {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = shard
		cfg.MaxConns = 6
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer pool.Close()
		w, err := worker.New(pool, worker.Config{
			Schema:        shard,
			ID:            id + "-" + shard,
			Queues:        map[string]int{jobs.DefaultQueue: 4},
			PollInterval:  100 * time.Millisecond,
			SweepInterval: 200 * time.Millisecond,
			RetryBackoff:  worker.Backoff{Base: 10 * time.Millisecond, Max: 100 * time.Millisecond},
			Logger:        log,
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		if err := worker.Handle(w, chore, func(ctx context.Context, job *jobs.Job[bed.Chore]) error {
			if _, err := pool.Exec(ctx, "INSERT INTO chaos_runs (job_id, attempt, worker) VALUES ($1, $2, $3)", job.ID, job.Attempt, id); err != nil {
				return err
			}
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "INSERT INTO chaos_ledger (job_id, attempt, worker) VALUES ($1, $2, $3)", job.ID, job.Attempt, id); err != nil {
					return err
				}
				return worker.AckTx(ctx, tx, job)
			})
		}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 4
		}
		g.Go(func() error { return w.Run(ctx) })
	}
	if err := g.Wait(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	return 0
}

// chaosShard is one shard of the test: its name, a pool scoped to it, the
// node it was placed on, and the orders its producers committed.
type chaosShard struct {
	name      string
	pool      *pgxpool.Pool // through the coordinator
	node      *pgxpool.Pool // on the shard's node
	committed atomic.Int64
}

func (s *chaosShard) count(t *testing.T, ctx context.Context, query string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, s.pool.QueryRow(ctx, query).Scan(&n))
	return n
}

// TestCitusChaos: the chaos accounting across two shards on two nodes
// (above); the figures are logged, the accounting asserted.
func TestCitusChaos(t *testing.T) {
	testdb.Slow(t, "worker processes killed and restarted on a Citus formation")
	f := citusbed.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	shards := []*chaosShard{{name: "hopper_chaos_a"}, {name: "hopper_chaos_b"}}
	for i, s := range shards {
		s.pool = distributedSchema(t, ctx, f, s.name)
		require.NoError(t, schema.Up(ctx, s.pool))
		for _, stmt := range chaosTables {
			_, err := s.pool.Exec(ctx, stmt)
			require.NoError(t, err)
		}
		placeSchema(t, ctx, s.pool, s.name, f.Workers[i].Port())
		s.node = schemaPool(t, ctx, f.Workers[i].URL(), s.name)
	}

	// Three worker processes, each serving both shards, each shard on a
	// connection to its node.
	urls := map[string]string{}
	for i, s := range shards {
		urls[s.name] = f.Workers[i].URL()
	}
	env, err := json.Marshal(urls)
	require.NoError(t, err)
	workers := map[string]*exec.Cmd{}
	start := func(id string) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), chaosURLEnv+"="+string(env), chaosIDEnv+"="+id)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		workers[id] = cmd
	}
	defer func() {
		for _, cmd := range workers {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	ids := []string{"w1", "w2", "w3"}
	for _, id := range ids {
		start(id)
	}

	// Producers: an order and its job in one transaction on one shard
	// (a single-node transaction through the coordinator); one in ten
	// rolled back; a quarter of the jobs in one of four sequences, each
	// sequence's jobs in one shard.
	target := 1500
	if testing.Short() {
		target = 400
	}
	var produced atomic.Int64
	produce := func(seed uint64) error {
		rnd := rand.New(rand.NewPCG(seed, seed+1))
		for produced.Add(1) <= int64(target) {
			n := rnd.IntN(1000)
			var opts []jobs.EnqueueOption
			var key *string
			s := shards[n%len(shards)]
			if n%4 == 0 {
				k := fmt.Sprintf("account-%d", n%8/2) // keys 0 and 2 in shard a, 1 and 3 in shard b
				s = shards[(n%8/2)%len(shards)]
				key = &k
				opts = append(opts, jobs.Sequence(k))
			}
			rollback := n%10 == 3
			err := pgx.BeginFunc(ctx, s.node, func(tx pgx.Tx) error {
				res, err := chore.Enqueue(ctx, tx, bed.Chore{N: n}, opts...)
				if err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, "INSERT INTO chaos_orders (job_id, sequence_key) VALUES ($1, $2)", res.ID, key); err != nil {
					return err
				}
				if rollback {
					return errRollback
				}
				return nil
			})
			switch {
			case err == errRollback:
			case err != nil:
				return err
			default:
				s.committed.Add(1)
			}
		}
		return nil
	}
	var g errgroup.Group
	for p := range 4 {
		g.Go(func() error { return produce(uint64(p) + 1) })
	}

	// The chaos: a random worker process killed and restarted under its
	// ID every few hundred milliseconds while the producers run, and at
	// least six times in all.
	kills := 0
	seed := uint64(time.Now().UnixNano())
	t.Logf("the kills' seed: %d (the producers' are 1 to 4)", seed)
	rnd := rand.New(rand.NewPCG(seed, 7))
	producing := make(chan error, 1)
	go func() { producing <- g.Wait() }()
	var produceErr error
	began := time.Now()
	for done := false; !done || kills < 6; {
		select {
		case produceErr = <-producing:
			done = true
			producing = nil
		case <-time.After(time.Duration(300+rnd.IntN(500)) * time.Millisecond):
		}
		id := ids[rnd.IntN(len(ids))]
		require.NoError(t, workers[id].Process.Kill())
		_ = workers[id].Wait()
		start(id)
		kills++
	}
	require.NoError(t, produceErr)
	t.Logf("figure: %d orders offered in %v, %d worker processes killed and restarted meanwhile", target, time.Since(began).Round(time.Millisecond), kills)

	// Every committed order's job completed: wait on the ledger, failing
	// only when it stops moving (testdb.WaitDrained).
	settled := time.Now()
	testdb.WaitDrained(t, "every committed order's job completed", func() int64 {
		var left int64
		for _, s := range shards {
			left += s.count(t, ctx, "SELECT count(*) FROM chaos_orders AS o WHERE NOT EXISTS (SELECT FROM chaos_ledger AS l WHERE l.job_id = o.job_id)")
		}
		return left
	})
	t.Logf("figure: the last jobs completed %v after the last kill", time.Since(settled).Round(time.Millisecond))

	var committed, runs, duplicates int64
	for _, s := range shards {
		orders := s.count(t, ctx, "SELECT count(*) FROM chaos_orders")
		require.Equal(t, s.committed.Load(), orders, "%s: the orders committed are there", s.name)
		lost := s.count(t, ctx, "SELECT count(*) FROM chaos_orders AS o WHERE NOT EXISTS (SELECT FROM chaos_ledger AS l WHERE l.job_id = o.job_id)")
		ledger := s.count(t, ctx, "SELECT count(*) FROM chaos_ledger")
		completed := s.count(t, ctx, "SELECT count(DISTINCT job_id) FROM chaos_ledger")
		phantom := s.count(t, ctx, "SELECT count(*) FROM chaos_runs AS r WHERE NOT EXISTS (SELECT FROM chaos_orders AS o WHERE o.job_id = r.job_id)")
		claimsRunTwice := s.count(t, ctx, "SELECT count(*) FROM (SELECT 1 FROM chaos_runs GROUP BY job_id, attempt HAVING count(*) > 1) AS d")
		shardRuns := s.count(t, ctx, "SELECT count(*) FROM chaos_runs")
		duplicated := s.count(t, ctx, "SELECT count(*) FROM (SELECT job_id FROM chaos_runs GROUP BY job_id HAVING count(*) > 1) AS d")
		outOfOrder := s.count(t, ctx, `
			SELECT count(*) FROM (
				SELECT l.job_id, lag(l.job_id) OVER (PARTITION BY o.sequence_key ORDER BY l.at) AS before
				FROM chaos_ledger AS l JOIN chaos_orders AS o ON o.job_id = l.job_id
				WHERE o.sequence_key IS NOT NULL) AS s
			WHERE s.job_id < s.before`)
		live := s.count(t, ctx, "SELECT count(*) FROM hopper_jobs")
		dead := s.count(t, ctx, "SELECT count(*) FROM hopper_dead_jobs")
		t.Logf("figure: %s: %d orders committed, %d completed, %d lost, %d runs (%d jobs ran more than once: a killed worker's), %d left, %d dead",
			s.name, orders, completed, lost, shardRuns, duplicated, live, dead)
		require.Zero(t, lost, "%s: lost jobs", s.name)
		require.Equal(t, orders, completed, "%s: every committed order's job completed", s.name)
		require.Equal(t, completed, ledger, "%s: a completion was recorded twice: a stale acknowledgement was accepted", s.name)
		require.Zero(t, phantom, "%s: a rolled-back order's job ran", s.name)
		require.Zero(t, claimsRunTwice, "%s: one claim ran twice", s.name)
		require.Zero(t, outOfOrder, "%s: a sequence's jobs completed out of their order", s.name)
		require.Zero(t, live+dead, "%s: jobs left or dead", s.name)
		committed += orders
		runs += shardRuns
		duplicates += duplicated
	}
	t.Logf("figure: across both shards: %d jobs enqueued, 0 lost, %d runs for them (%d jobs run again after a kill), each completed once", committed, runs, duplicates)
}

// schemaPool opens a pool on url whose search_path is the schema name,
// closed when the test ends.
func schemaPool(t *testing.T, ctx context.Context, url, name string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// errRollback ends a producer's transaction with a rollback on purpose.
var errRollback = fmt.Errorf("rolled back on purpose")

// placeSchema moves a distributed schema to the worker node on port,
// unless Citus placed it there; it is empty, so blocking its writes for
// the move costs nothing.
func placeSchema(t *testing.T, ctx context.Context, pool *pgxpool.Pool, name string, port int) {
	t.Helper()
	var at int
	require.NoError(t, pool.QueryRow(ctx, "SELECT nodeport FROM pg_catalog.citus_shards WHERE table_name = $1::regclass", name+".hopper_jobs").Scan(&at))
	if at != port {
		_, err := pool.Exec(ctx, "SELECT citus_schema_move($1::regnamespace, '127.0.0.1', $2, 'block_writes')", name, port)
		require.NoError(t, err)
	}
	require.NoError(t, pool.QueryRow(ctx, "SELECT nodeport FROM pg_catalog.citus_shards WHERE table_name = $1::regclass", name+".hopper_jobs").Scan(&at))
	require.Equal(t, port, at, "%s is on the node on %d", name, port)
}
