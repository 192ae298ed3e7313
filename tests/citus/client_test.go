package citus

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/citusbed"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/shard"
	"github.com/hopperq/hopper/tests/internal/bed"
)

// TestCitusShardedClient: on one formation (a coordinator and two worker
// nodes), a sharded Hopper of four shards set up by shard.Create, and the
// sharded Client's enqueue, operations by id and reads across shards; the
// figures (the set-up's time, a 200-job batch across shards against one
// plain schema's in the same run) logged, never asserted.
func TestCitusShardedClient(t *testing.T) {
	testdb.Slow(t, "starts a Citus formation: a coordinator and two worker nodes")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	t.Run("PlainPostgreSQLRefused", func(t *testing.T) {
		plain := testdb.NewEmpty(t)
		_, err := shard.Create(ctx, plain.Pool, shard.Options{Count: 2})
		require.ErrorIs(t, err, shard.ErrNotCitus)
		require.ErrorContains(t, err, "CREATE EXTENSION citus")
		_, err = shard.Open(ctx, plain.Pool)
		require.ErrorIs(t, err, shard.ErrNotCitus)
	})

	f := citusbed.New(t)
	pool := coordinatorPool(t, ctx, f)

	_, err := shard.Open(ctx, pool)
	require.ErrorIs(t, err, shard.ErrNoDirectory, "no directory before Create")

	began := time.Now()
	set, err := shard.Create(ctx, pool, shard.Options{Count: 4, Logf: t.Logf})
	require.NoError(t, err)
	t.Logf("figure: 4 shards created, migrated and prepared in %v", time.Since(began).Round(time.Millisecond))
	require.Equal(t, []string{"hopper_s00", "hopper_s01", "hopper_s02", "hopper_s03"}, set.Names())

	t.Run("SetUp", func(t *testing.T) {
		nodes := map[int]bool{}
		for _, name := range set.Names() {
			checkMigrated(t, ctx, f, shardPool(t, ctx, f, name), name)
			var port int
			require.NoError(t, pool.QueryRow(ctx, `
				SELECT DISTINCT s.nodeport FROM pg_catalog.citus_shards AS s
				WHERE s.table_name = to_regclass($1)`, name+".hopper_jobs").Scan(&port))
			nodes[port] = true
			// The insert trigger's NOTIFY is disabled on the node's own
			// table (Citus passed DISABLE TRIGGER on).
			require.Equal(t, "D", nodeTrigger(t, ctx, f, port, name), "%s's trigger on its node", name)
		}
		require.Len(t, nodes, 2, "the shards are spread over both worker nodes")

		// Idempotent: a second run with the same count migrates and
		// applies the settings again, and does not restart the ids.
		res, err := shard.Enqueue(ctx, set, pool, chore, bed.Chore{N: -1})
		require.NoError(t, err)
		again, err := shard.Create(ctx, pool, shard.Options{Count: 4})
		require.NoError(t, err)
		require.Equal(t, set.Names(), again.Names())
		res2, err := shard.EnqueueRouted(ctx, again, pool, "", chore, bed.Chore{N: -2})
		require.NoError(t, err)
		require.Greater(t, res2.ID, int64(0))
		for _, id := range []int64{res.ID, res2.ID} {
			_, err := set.GetJob(ctx, id)
			require.NoError(t, err)
		}
		for _, id := range []int64{res.ID, res2.ID} {
			_, err := set.DeleteJob(ctx, id)
			require.NoError(t, err)
		}

		// Another count (or prefix) is refused, and changes nothing.
		_, err = shard.Create(ctx, pool, shard.Options{Count: 8})
		require.ErrorIs(t, err, shard.ErrCountMismatch)
		_, err = shard.Create(ctx, pool, shard.Options{Count: 4, Prefix: "other_"})
		require.ErrorIs(t, err, shard.ErrCountMismatch)
		opened, err := shard.Open(ctx, pool)
		require.NoError(t, err)
		require.Equal(t, set.Names(), opened.Names())
	})

	t.Run("IDsNameShards", func(t *testing.T) {
		for i := range 12 {
			res, err := shard.Enqueue(ctx, set, pool, chore, bed.Chore{N: i})
			require.NoError(t, err)
			want := set.ShardOfID(res.ID)
			// The job is in the shard its id names, and in no other.
			for _, name := range set.Names() {
				var n int
				require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s.hopper_jobs WHERE id = $1",
					pgx.Identifier{name}.Sanitize()), res.ID).Scan(&n))
				require.Equal(t, name == want, n == 1, "job %d in %s (id names %s)", res.ID, name, want)
			}
		}
	})

	t.Run("PlacementByKeys", func(t *testing.T) {
		seed := uint64(time.Now().UnixNano())
		if s := os.Getenv("HOPPER_SHARD_SEED"); s != "" {
			seed, err = strconv.ParseUint(s, 10, 64)
			require.NoError(t, err)
		}
		t.Logf("seed %d: repeat with HOPPER_SHARD_SEED=%d go test -run %s ./tests/citus", seed, seed, t.Name())
		rng := rand.New(rand.NewPCG(seed, seed))
		// Go's hash and the coordinator's SQL function agree, on keys of
		// every shape (empty, ASCII, multi-byte UTF-8), for several counts.
		for range 500 {
			key := randomKey(rng)
			count := 1 + rng.IntN(64)
			var sqlPos int
			require.NoError(t, pool.QueryRow(ctx, "SELECT hopper_directory.hopper_shard_position($1, $2)", key, count).Scan(&sqlPos))
			require.Equal(t, shard.Position(key, count), sqlPos, "key %q among %d", key, count)
		}
		var viaDirectory string
		require.NoError(t, pool.QueryRow(ctx, "SELECT hopper_directory.hopper_shard_for('tenant-42')").Scan(&viaDirectory))
		require.Equal(t, set.ShardOfKey("tenant-42"), viaDirectory)

		// Placement: the unique key first, then the concurrency key, then
		// the routing key.
		for range 20 {
			u, c, r := randomKey(rng)+"u", randomKey(rng)+"c", randomKey(rng)+"r"
			res, err := shard.EnqueueRouted(ctx, set, pool, r, chore, bed.Chore{N: 1}, jobs.UniqueKey(u), jobs.ConcurrencyKey(c))
			require.NoError(t, err)
			require.Equal(t, set.ShardOfKey(u), set.ShardOfID(res.ID), "by the unique key")
			res, err = shard.EnqueueRouted(ctx, set, pool, r, chore, bed.Chore{N: 2}, jobs.ConcurrencyKey(c))
			require.NoError(t, err)
			require.Equal(t, set.ShardOfKey(c), set.ShardOfID(res.ID), "by the concurrency key")
			res, err = shard.EnqueueRouted(ctx, set, pool, r, chore, bed.Chore{N: 3})
			require.NoError(t, err)
			require.Equal(t, set.ShardOfKey(r), set.ShardOfID(res.ID), "by the routing key")
		}
		// A unique key deduplicates across the set: both land in its shard.
		first, err := shard.Enqueue(ctx, set, pool, chore, bed.Chore{N: 4}, jobs.UniqueKey("once"))
		require.NoError(t, err)
		second, err := shard.Enqueue(ctx, set, pool, chore, bed.Chore{N: 5}, jobs.UniqueKey("once"))
		require.NoError(t, err)
		require.True(t, second.Duplicate)
		require.Equal(t, first.ID, second.ID)
	})

	t.Run("BatchAcrossNodesWakesAtCommit", func(t *testing.T) {
		listener, err := pgx.Connect(ctx, f.URL())
		require.NoError(t, err)
		defer listener.Close(context.WithoutCancel(ctx))
		_, err = listener.Exec(ctx, "LISTEN hopper_jobs")
		require.NoError(t, err)

		const n = 200
		items := shard.Items(make([]bed.Chore, n)...)
		// Rolled back: nothing is written, and no wake-up is sent.
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		res, err := shard.EnqueueMany(ctx, set, tx, chore, items, jobs.Queue("sharded"))
		require.NoError(t, err)
		require.Equal(t, n, res.Inserted)
		require.NoError(t, tx.Rollback(ctx))

		// Committed, in a transaction of the batch's own: every shard (on
		// both nodes) written in one two-phase commit.
		began := time.Now()
		res, err = shard.EnqueueMany(ctx, set, pool, chore, items, jobs.Queue("sharded"))
		took := time.Since(began)
		require.NoError(t, err)
		require.Equal(t, n, res.Inserted)
		perShard := map[string]int{}
		for _, r := range res.Results {
			perShard[set.ShardOfID(r.ID)]++
		}
		require.Len(t, perShard, 4, "round-robin placement reached every shard")
		for _, name := range set.Names() {
			require.Equal(t, n/4, perShard[name])
		}

		// The wake-ups are those of the committed batch: one per shard,
		// for its queue; the rolled-back batch's never came.
		var got []string
		for range 4 {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			note, err := listener.WaitForNotification(wctx)
			cancel()
			require.NoError(t, err)
			var wake struct{ Schema, Queue string }
			require.NoError(t, json.Unmarshal([]byte(note.Payload), &wake))
			require.Equal(t, "sharded", wake.Queue)
			got = append(got, wake.Schema)
		}
		slices.Sort(got)
		require.Equal(t, set.Names(), got)
		var live int
		require.NoError(t, pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM hopper_s00.hopper_jobs WHERE queue = 'sharded') + (SELECT count(*) FROM hopper_s01.hopper_jobs WHERE queue = 'sharded') +
			(SELECT count(*) FROM hopper_s02.hopper_jobs WHERE queue = 'sharded') + (SELECT count(*) FROM hopper_s03.hopper_jobs WHERE queue = 'sharded')`).Scan(&live))
		require.Equal(t, n, live, "the committed batch and nothing of the rolled-back one")

		// The figure: the same batch, five times each way, across the
		// shards and into one plain PostgreSQL schema, in the same run
		// (another queue, so the counts above stay the batch's).
		plain := testdb.New(t)
		var sharded, single []time.Duration
		for range 5 {
			began := time.Now()
			_, err := shard.EnqueueMany(ctx, set, pool, chore, items, jobs.Queue("timing"))
			require.NoError(t, err)
			sharded = append(sharded, time.Since(began))
			began = time.Now()
			_, err = chore.EnqueueMany(ctx, plain.Pool, jobs.Items(make([]bed.Chore, n)...), jobs.Queue("timing"))
			require.NoError(t, err)
			single = append(single, time.Since(began))
		}
		t.Logf("figure: %d jobs by shard.EnqueueMany across 4 shards on 2 nodes (one two-phase commit): first %v, median of 5 more %v; by jobs.EnqueueMany into one plain PostgreSQL schema: median of 5 %v",
			n, took.Round(time.Millisecond), median(sharded).Round(time.Millisecond), median(single).Round(time.Millisecond))
		for range 5 { // their wake-ups: one per shard each time
			for range 4 {
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				note, err := listener.WaitForNotification(wctx)
				cancel()
				require.NoError(t, err)
				require.Contains(t, note.Payload, `"queue":"timing"`)
			}
		}

		// No more notifications are waiting: the rolled-back batch sent none.
		_, err = listener.Exec(ctx, "SELECT pg_notify('hopper_jobs', 'marker')")
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		note, err := listener.WaitForNotification(wctx)
		cancel()
		require.NoError(t, err)
		require.Equal(t, "marker", note.Payload)
	})

	t.Run("WorkflowRefused", func(t *testing.T) {
		// A workflow enqueued into one shard through the coordinator:
		// Citus 13.2.2 refuses it (docs/scaling-out.md), and nothing is
		// written.
		scoped, err := jobs.InSchema(pool, set.ShardOfKey("order-77"))
		require.NoError(t, err)
		wf := jobs.NewWorkflow("order-77").
			Add("charge", chore.Entry(bed.Chore{N: 1}, jobs.Queue("flow"))).
			Add("ship", chore.Entry(bed.Chore{N: 2}, jobs.Queue("flow")), jobs.After("charge"))
		_, err = jobs.EnqueueWorkflow(ctx, scoped, wf)
		if err == nil {
			t.Log("Citus accepts a workflow's enqueue through the coordinator now: docs/scaling-out.md's open mark can go")
			return
		}
		t.Logf("known: Citus refuses a workflow's enqueue through the coordinator: %v", err)
		_, err = set.Client(set.ShardOfKey("order-77")).ListWorkflow(ctx, "order-77")
		require.ErrorIs(t, err, hopper.ErrNotFound, "no step of it was written")
	})

	t.Run("OperationsByID", func(t *testing.T) {
		var ids []int64
		for i := range 8 {
			res, err := shard.Enqueue(ctx, set, pool, chore, bed.Chore{N: 100 + i}, jobs.Queue("byid"))
			require.NoError(t, err)
			ids = append(ids, res.ID)
		}
		row, err := set.GetJob(ctx, ids[0])
		require.NoError(t, err)
		require.Equal(t, ids[0], row.ID)
		require.Equal(t, "byid", row.Queue)
		_, err = set.GetJob(ctx, ids[0]+4*1000)
		require.ErrorIs(t, err, hopper.ErrNotFound)
		_, err = set.GetJob(ctx, 0)
		require.ErrorIs(t, err, hopper.ErrNotFound)

		// DeleteJob: routed to the id's shard, one node.
		deleted, err := set.DeleteJob(ctx, ids[1])
		require.NoError(t, err)
		require.Equal(t, ids[1], deleted.ID)
		_, err = set.GetJob(ctx, ids[1])
		require.ErrorIs(t, err, hopper.ErrNotFound)

		// CancelJob: the job moves to its shard's dead jobs as cancelled,
		// what it carried intact (payload, metadata, keys; none stays none).
		require.NoError(t, set.CancelJob(ctx, ids[0]))
		require.ErrorIs(t, set.CancelJob(ctx, ids[0]), hopper.ErrFinished)
		row, err = set.GetJob(ctx, ids[0])
		require.NoError(t, err)
		require.Equal(t, jobs.StateCancelled, row.State)
		require.Equal(t, "byid", row.Queue)
		require.JSONEq(t, `{"n":100}`, string(row.Payload))
		var metaIsNull, keyIsNull bool
		require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf("SELECT meta IS NULL, concurrency_key IS NULL FROM %s.hopper_dead_jobs WHERE id = $1",
			pgx.Identifier{set.ShardOfID(ids[0])}.Sanitize()), ids[0]).Scan(&metaIsNull, &keyIsNull))
		require.True(t, metaIsNull)
		require.True(t, keyIsNull)
		keyed, err := shard.Enqueue(ctx, set, pool, chore, bed.Chore{N: 7}, jobs.Queue("byid"),
			jobs.ConcurrencyKey("acct-7"), jobs.UniqueKey("u-7"), jobs.Metadata(jobs.Meta{"tenant": "acme"}))
		require.NoError(t, err)
		require.NoError(t, set.CancelJob(ctx, keyed.ID))
		row, err = set.GetJob(ctx, keyed.ID)
		require.NoError(t, err)
		require.Equal(t, jobs.StateCancelled, row.State)
		require.Equal(t, "acme", row.Meta["tenant"])
		require.Equal(t, "acct-7", row.ConcurrencyKey)
		require.Equal(t, "u-7", row.UniqueKey)

		// A running job: its worker is told on the coordinator, where the
		// shards' workers listen, naming the shard, the job and its attempt.
		listener, err := pgx.Connect(ctx, f.URL())
		require.NoError(t, err)
		defer listener.Close(context.WithoutCancel(ctx))
		_, err = listener.Exec(ctx, "LISTEN hopper_jobs")
		require.NoError(t, err)
		running := ids[2]
		home := shardPool(t, ctx, f, set.ShardOfID(running))
		_, err = home.Exec(ctx, "UPDATE hopper_jobs SET state = 'running', attempt = 1, lease_owner = 'w-1', lease_until = now() + interval '1 minute' WHERE id = $1", running)
		require.NoError(t, err)
		require.NoError(t, set.CancelJob(ctx, running))
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		note, err := listener.WaitForNotification(wctx)
		cancel()
		require.NoError(t, err)
		var told struct {
			Schema  string
			Cancel  int64
			Attempt int
			Owner   string
		}
		require.NoError(t, json.Unmarshal([]byte(note.Payload), &told))
		require.Equal(t, set.ShardOfID(running), told.Schema)
		require.Equal(t, running, told.Cancel)
		require.Equal(t, 1, told.Attempt)
		require.Equal(t, "w-1", told.Owner)

		// Several ids across shards on both nodes, in one transaction: the
		// live ones cancelled, the others said to be finished or missing.
		res, err := set.CancelJobs(ctx, append(ids[3:], ids[0], ids[1], 0)...)
		require.NoError(t, err)
		require.Len(t, res, len(ids)-3+3)
		for _, r := range res {
			switch r.ID {
			case 0, ids[1]:
				require.ErrorIs(t, r.Err, hopper.ErrNotFound, "job %d", r.ID)
			case ids[0]:
				require.ErrorIs(t, r.Err, hopper.ErrFinished)
				require.Equal(t, jobs.StateCancelled, r.Was)
			default:
				require.NoError(t, r.Err, "job %d", r.ID)
				require.Equal(t, jobs.StatePending, r.Was)
			}
		}
		shards := map[string]bool{}
		for _, id := range ids[3:] {
			shards[set.ShardOfID(id)] = true
			row, err := set.GetJob(ctx, id)
			require.NoError(t, err)
			require.Equal(t, jobs.StateCancelled, row.State)
		}
		require.Len(t, shards, 4, "the ids cancelled together span every shard")
	})

	t.Run("ReadsAcrossShards", func(t *testing.T) {
		// Every job the set holds, by a listing page by page and by stats.
		var want int64
		for _, name := range set.Names() {
			var n int64
			require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf("SELECT (SELECT count(*) FROM %[1]s.hopper_jobs) + (SELECT count(*) FROM %[1]s.hopper_dead_jobs)",
				pgx.Identifier{name}.Sanitize())).Scan(&n))
			want += n
		}
		seen := map[int64]bool{}
		p := hopper.ListParams{Limit: 37}
		last := int64(1 << 62)
		for pages := 0; ; pages++ {
			require.Less(t, pages, 100)
			page, err := set.ListJobs(ctx, p)
			require.NoError(t, err)
			for _, j := range page.Jobs {
				require.Less(t, j.ID, last, "ids descend across pages")
				last = j.ID
				require.False(t, seen[j.ID])
				seen[j.ID] = true
			}
			if page.Next == "" {
				break
			}
			p.After = page.Next
		}
		require.EqualValues(t, want, len(seen), "the listing has every job of every shard once")

		st, err := set.GetStats(ctx)
		require.NoError(t, err)
		require.Equal(t, want, st.Total.Live()+st.Total.Dead+st.Total.Cancelled)
		per, err := set.ListShardStats(ctx)
		require.NoError(t, err)
		require.Len(t, per, 4)
		var sum int64
		for _, s := range per {
			sum += s.Total.Live()
		}
		require.Equal(t, st.Total.Live(), sum)
		sharded := slices.IndexFunc(st.Rows, func(r hopper.StatsRow) bool { return r.Queue == "sharded" })
		require.GreaterOrEqual(t, sharded, 0)
		require.EqualValues(t, 200, st.Rows[sharded].Ready)
	})

	t.Run("CLI", func(t *testing.T) {
		bin, remove, err := bed.BuildHopper(".")
		require.NoError(t, err)
		t.Cleanup(remove)
		out, err := exec.CommandContext(ctx, bin, "--database-url", f.URL(), "shards", "create", "--count", "4").CombinedOutput()
		require.NoError(t, err, "%s", out)
		out, err = exec.CommandContext(ctx, bin, "--database-url", f.URL(), "shards", "create", "--count", "3").CombinedOutput()
		require.Error(t, err, "%s", out)
		require.Contains(t, string(out), "shard count differs")
		out, err = exec.CommandContext(ctx, bin, "--database-url", f.URL(), "shards", "status", "--json").Output()
		require.NoError(t, err)
		var status []struct {
			Shard    string `json:"shard"`
			Position int    `json:"position"`
			Node     string `json:"node"`
			Version  int    `json:"version"`
			Live     int64  `json:"live"`
			Dead     int64  `json:"dead"`
		}
		require.NoError(t, json.Unmarshal(out, &status), "%s", out)
		require.Len(t, status, 4)
		for k, s := range status {
			require.Equal(t, set.Names()[k], s.Shard)
			require.Equal(t, k, s.Position)
			require.NotEmpty(t, s.Node)
			require.EqualValues(t, schema.Latest(), s.Version)
		}
		out, err = exec.CommandContext(ctx, bin, "--database-url", f.URL(), "shards", "status").CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "hopper_s03")
	})
}

// coordinatorPool is a pool on the formation's coordinator, closed when
// the test ends.
func coordinatorPool(t *testing.T, ctx context.Context, f *citusbed.Formation) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(ctx, f.URL())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// shardPool is a pool on the coordinator whose search_path is the shard.
func shardPool(t *testing.T, ctx context.Context, f *citusbed.Formation, name string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(f.URL())
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// nodeTrigger is the state (pg_trigger.tgenabled) of the insert trigger's
// NOTIFY on the shard's own table on its node (Citus hides shard tables
// from other applications unless asked to show them).
func nodeTrigger(t *testing.T, ctx context.Context, f *citusbed.Formation, port int, name string) string {
	t.Helper()
	for _, w := range f.Workers {
		if w.Port() != port {
			continue
		}
		conn, err := pgx.Connect(ctx, w.URL())
		require.NoError(t, err)
		defer conn.Close(context.WithoutCancel(ctx))
		_, err = conn.Exec(ctx, "SET citus.show_shards_for_app_name_prefixes = '*'")
		require.NoError(t, err)
		var state string
		require.NoError(t, conn.QueryRow(ctx, `
			SELECT t.tgenabled::text FROM pg_trigger AS t
			JOIN pg_class AS c ON c.oid = t.tgrelid
			WHERE c.relnamespace = $1::regnamespace AND c.relname ~ '^hopper_jobs_[0-9]+$'
			  AND t.tgname ~ '^hopper_jobs_notify_enqueued_[0-9]+$'`, name).Scan(&state))
		return state
	}
	require.FailNow(t, "no worker node on port", "%d", port)
	return ""
}

// median is the middle of the durations.
func median(ds []time.Duration) time.Duration {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// randomKey is a key of 0 to 20 characters, some beyond ASCII.
func randomKey(rng *rand.Rand) string {
	alphabet := []rune("abcXYZ019-_ éλ中😀")
	r := make([]rune, rng.IntN(21))
	for i := range r {
		r[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(r)
}
