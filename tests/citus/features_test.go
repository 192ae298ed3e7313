package citus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/citusbed"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/shard"
	"github.com/hopperq/hopper/tests/internal/bed"
	"github.com/hopperq/hopper/worker"
)

// feature is the job of TestCitusShardFeatures: its payload's N names it.
var (
	feature = jobs.MustDefine[bed.Chore]("citus_feature")
	awaiter = jobs.MustDefine[bed.Chore]("citus_awaiter")
)

// featureRuns records the runs of the feature jobs, safe for handlers:
// when each run started, when each successful run ended, and, per
// sequence key or workflow id, the jobs in the order they succeeded.
type featureRuns struct {
	mu       sync.Mutex
	started  map[int][]time.Time
	ended    map[int]time.Time
	acked    map[int]time.Time
	done     map[int]int
	order    map[string][]int
	failOnce map[int]bool
}

func (r *featureRuns) handle(_ context.Context, j *jobs.Job[bed.Chore]) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := j.Payload.N
	r.started[n] = append(r.started[n], time.Now())
	if r.failOnce[n] {
		delete(r.failOnce, n)
		return worker.Permanent(errors.New("fails once"))
	}
	key := j.Meta[jobs.MetaSequence]
	if key == "" {
		key = j.Meta[jobs.MetaWorkflow]
	}
	r.order[key] = append(r.order[key], n)
	r.done[n]++
	r.ended[n] = time.Now()
	return nil
}

// outcome records when a job's success was recorded (the worker's
// OnOutcome hook, called after the acknowledgement took effect).
func (r *featureRuns) outcome(job *jobs.Row, o worker.Outcome, _ error) {
	var p bed.Chore
	if o != worker.OutcomeDone || json.Unmarshal(job.Payload, &p) != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acked[p.N] = time.Now()
}

// ackGap is how long job prev's acknowledgement took to be recorded after
// its handler returned, and how long after that job n started.
func (r *featureRuns) ackGap(prev, n int) (ack, next time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.started[n]
	return r.acked[prev].Sub(r.ended[prev]), s[len(s)-1].Sub(r.acked[prev])
}

func (r *featureRuns) ran(n int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done[n] > 0
}

func (r *featureRuns) orderOf(key string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.order[key])
}

// gap is how long job n waited after job prev succeeded: from the end of
// prev's handler to the start of n's last run (an acknowledgement, a
// promotion, a wake-up and a claim).
func (r *featureRuns) gap(prev, n int) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.started[n]
	return s[len(s)-1].Sub(r.ended[prev])
}

// since is how long after t job n's last run started.
func (r *featureRuns) since(t time.Time, n int) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.started[n]
	return s[len(s)-1].Sub(t)
}

// TestCitusShardFeatures: sequences, unique jobs and workflows through the
// sharded Set, on one formation (four shards by shard.Create on two
// nodes), run by one shard.Worker whose poll interval (2s) is far above a
// wake-up's delay: sequences over eight keys enqueued one by one and in
// batches across both nodes run in order; unique keys deduplicate;
// workflows with dependencies run their steps in order; a batch mixing
// the features across every shard, with a workflow, rolls back whole and
// commits whole; a cancel lets a sequence continue, or blocks it until
// SkipSequence; a deleted head lets it continue; RetrySequence and
// RetryWorkflow run a dead job again;
// CancelWorkflow cancels the steps. At the end no job is lost and every
// job succeeded once. Figures (a sequence's next job after its
// predecessor, a job after a cancel, a skip or a retry) are logged, never
// asserted.
func TestCitusShardFeatures(t *testing.T) {
	testdb.Slow(t, "starts a Citus formation: a coordinator and two worker nodes")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	f := citusbed.New(t)
	pool := coordinatorPool(t, ctx, f)
	set, err := shard.Create(ctx, pool, shard.Options{Count: 4})
	require.NoError(t, err)
	names := set.Names()
	nodes := map[int]bool{}
	for _, name := range names {
		var port int
		require.NoError(t, pool.QueryRow(ctx, `SELECT DISTINCT s.nodeport FROM pg_catalog.citus_shards AS s
			WHERE s.table_name = to_regclass($1)`, name+".hopper_jobs").Scan(&port))
		nodes[port] = true
	}
	require.Len(t, nodes, 2, "the shards are on both nodes")
	// keyIn is a key of the prefix that places in shard k.
	keyIn := func(prefix string, k int) string {
		for i := 0; ; i++ {
			if key := fmt.Sprintf("%s-%d", prefix, i); shard.Position(key, len(names)) == k {
				return key
			}
		}
	}

	runs := &featureRuns{started: map[int][]time.Time{}, ended: map[int]time.Time{}, acked: map[int]time.Time{}, done: map[int]int{},
		order: map[string][]int{}, failOnce: map[int]bool{}}
	// The worker's pool of its own: a listening connection per shard, and
	// claims, acknowledgements and beats in each.
	wcfg, err := pgxpool.ParseConfig(f.URL())
	require.NoError(t, err)
	wcfg.MaxConns = 32
	wpool, err := pgxpool.NewWithConfig(ctx, wcfg)
	require.NoError(t, err)
	t.Cleanup(wpool.Close)
	w := newWorkerOn(t, wpool, names, worker.Config{ID: "features", Queues: map[string]int{jobs.DefaultQueue: 8},
		PollInterval: 2 * time.Second, OnOutcome: []worker.OutcomeHook{runs.outcome}})
	require.NoError(t, shard.Handle(w, feature, runs.handle))
	// An awaiter waits for an event (a durable wait) and hands on what it
	// received.
	received := make(chan [2]int, 16)
	require.NoError(t, shard.Handle(w, awaiter, func(ctx context.Context, j *jobs.Job[bed.Chore]) error {
		v, err := worker.AwaitEvent[int](ctx, j, "citus-event", time.Hour)
		if err != nil {
			return err
		}
		received <- [2]int{j.Payload.N, v}
		return nil
	}))
	stop := start(t, ctx, w)
	defer func() { require.NoError(t, stop()) }()
	var expected []int // every job that must succeed once
	waitRan := func(what string, ns ...int) {
		t.Helper()
		testdb.WaitFor(t, what, func() bool {
			for _, n := range ns {
				if !runs.ran(n) {
					return false
				}
			}
			return true
		})
	}

	t.Run("SequencesInOrder", func(t *testing.T) {
		const keys, perKey = 8, 10
		seqKeys := make([]string, keys)
		for i := range seqKeys {
			seqKeys[i] = keyIn(fmt.Sprintf("seq%d", i), i%len(names))
		}
		var all []int
		for i := range perKey {
			if i%2 == 0 {
				// One batch over every key: every shard, both nodes, one
				// two-phase commit.
				entries := make([]shard.Entry, keys)
				for k, key := range seqKeys {
					entries[k] = shard.Entry{Job: feature.Entry(bed.Chore{N: k*100 + i}, jobs.Sequence(key))}
				}
				res, err := set.EnqueueBatch(ctx, pool, entries)
				require.NoError(t, err)
				for k, r := range res.Results {
					require.Equal(t, set.ShardOfKey(seqKeys[k]), set.ShardOfID(r.ID), "placed by its sequence key")
				}
			} else {
				for k, key := range seqKeys {
					res, err := shard.Enqueue(ctx, set, pool, feature, bed.Chore{N: k*100 + i}, jobs.Sequence(key))
					require.NoError(t, err)
					require.Equal(t, set.ShardOfKey(key), set.ShardOfID(res.ID), "placed by its sequence key")
				}
			}
			for k := range seqKeys {
				all = append(all, k*100+i)
			}
		}
		expected = append(expected, all...)
		waitRan("every sequence's jobs", all...)
		var gaps, acks, afterAck []time.Duration
		for k, key := range seqKeys {
			want := make([]int, perKey)
			for i := range want {
				want[i] = k*100 + i
			}
			require.Equal(t, want, runs.orderOf(key), "sequence %s in order", key)
			for i := 1; i < perKey; i++ {
				gaps = append(gaps, runs.gap(want[i-1], want[i]))
				ack, next := runs.ackGap(want[i-1], want[i])
				acks, afterAck = append(acks, ack), append(afterAck, next)
			}
			info, err := set.GetSequence(ctx, key)
			require.NoError(t, err)
			require.Zero(t, info.HeadID)
			require.Nil(t, info.Blocked)
		}
		t.Logf("figure: a sequence's next job started %v (median) after its predecessor's handler returned, at most %v, over %d turns (poll interval 2s)",
			median(gaps).Round(time.Microsecond), slices.Max(gaps).Round(time.Microsecond), len(gaps))
		t.Logf("figure: of which the acknowledgement, recorded %v (median) after the handler returned, at most %v; then the next job's start %v (median) after, at most %v",
			median(acks).Round(time.Microsecond), slices.Max(acks).Round(time.Microsecond),
			median(afterAck).Round(time.Microsecond), slices.Max(afterAck).Round(time.Microsecond))
	})

	t.Run("UniqueDeduplicated", func(t *testing.T) {
		var all []int
		for k := range names {
			key := keyIn("unique", k)
			// In one transaction, so that the worker cannot run the
			// first before the others are enqueued.
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			first, err := shard.Enqueue(ctx, set, tx, feature, bed.Chore{N: 1000 + k}, jobs.UniqueKey(key))
			require.NoError(t, err)
			require.False(t, first.Duplicate)
			require.Equal(t, names[k], set.ShardOfID(first.ID))
			for range 2 {
				again, err := shard.Enqueue(ctx, set, tx, feature, bed.Chore{N: 1100 + k}, jobs.UniqueKey(key))
				require.NoError(t, err)
				require.True(t, again.Duplicate, "the key %s is held", key)
				require.Equal(t, first.ID, again.ID)
			}
			require.NoError(t, tx.Commit(ctx))
			all = append(all, 1000+k)
		}
		expected = append(expected, all...)
		waitRan("the unique jobs", all...)
	})

	t.Run("WorkflowsInOrder", func(t *testing.T) {
		const flows = 6
		ws := make([]*jobs.Workflow, flows)
		for i := range ws {
			n := 2000 + i*10
			ws[i] = jobs.NewWorkflow(fmt.Sprintf("wf-%d", i)).
				Add("a", feature.Entry(bed.Chore{N: n})).
				Add("b", feature.Entry(bed.Chore{N: n + 1}), jobs.After("a")).
				Add("c", feature.Entry(bed.Chore{N: n + 2}), jobs.After("a")).
				Add("d", feature.Entry(bed.Chore{N: n + 3}), jobs.After("b", "c"))
			expected = append(expected, n, n+1, n+2, n+3)
		}
		res, err := set.EnqueueWorkflows(ctx, pool, ws)
		require.NoError(t, err)
		touched := map[string]bool{}
		for i, r := range res {
			require.Equal(t, ws[i].ID(), r.ID)
			require.Len(t, r.Steps, 4)
			for step, id := range r.Steps {
				require.Equal(t, set.ShardOfKey(r.ID), set.ShardOfID(id), "step %s of %s in the workflow's shard", step, r.ID)
			}
			touched[set.ShardOfKey(r.ID)] = true
		}
		t.Logf("%d workflows in %d shards", flows, len(touched))
		for i := range ws {
			n := 2000 + i*10
			waitRan("workflow "+ws[i].ID(), n+3)
			order := runs.orderOf(ws[i].ID())
			require.Len(t, order, 4)
			require.Equal(t, n, order[0], "a first")
			require.ElementsMatch(t, []int{n + 1, n + 2}, order[1:3], "b and c after a")
			require.Equal(t, n+3, order[3], "d last")
			// Completed steps leave no row (no history kept): a workflow
			// whose steps all completed is not found.
			testdb.WaitFor(t, "every step of "+ws[i].ID()+" ended", func() bool {
				steps, err := set.ListWorkflow(ctx, ws[i].ID())
				if errors.Is(err, hopper.ErrNotFound) {
					return true
				}
				require.NoError(t, err)
				for _, s := range steps {
					if s.State.Live() {
						return false
					}
				}
				return true
			})
		}
	})

	t.Run("MixedBatchAtomic", func(t *testing.T) {
		seqKey, uniqueKey, routed := keyIn("mixed-seq", 0), keyIn("mixed-unique", 1), keyIn("mixed-routed", 2)
		wfID := keyIn("mixed-wf", 3)
		entries := func() []shard.Entry {
			return []shard.Entry{
				{Job: feature.Entry(bed.Chore{N: 4000}, jobs.Sequence(seqKey))},
				{Job: feature.Entry(bed.Chore{N: 4001}, jobs.Sequence(seqKey))},
				{Job: feature.Entry(bed.Chore{N: 4002}, jobs.UniqueKey(uniqueKey))},
				{Job: feature.Entry(bed.Chore{N: 4003}), RoutingKey: routed},
			}
		}
		flow := func() *jobs.Workflow {
			return jobs.NewWorkflow(wfID).
				Add("a", feature.Entry(bed.Chore{N: 4004})).
				Add("b", feature.Entry(bed.Chore{N: 4005}), jobs.After("a"))
		}
		write := func(tx pgx.Tx) ([]int64, error) {
			res, err := set.EnqueueBatch(ctx, tx, entries())
			if err != nil {
				return nil, err
			}
			wf, err := set.EnqueueWorkflow(ctx, tx, flow())
			if err != nil {
				return nil, err
			}
			ids := []int64{wf.Steps["a"], wf.Steps["b"]}
			for _, r := range res.Results {
				ids = append(ids, r.ID)
			}
			return ids, nil
		}

		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		gone, err := write(tx)
		require.NoError(t, err)
		shards := map[string]bool{}
		for _, id := range gone {
			shards[set.ShardOfID(id)] = true
		}
		require.Len(t, shards, 4, "the batch spans every shard")
		require.NoError(t, tx.Rollback(ctx))
		for _, id := range gone {
			_, err := set.GetJob(ctx, id)
			require.ErrorIs(t, err, hopper.ErrNotFound, "job %d rolled back", id)
		}
		info, err := set.GetSequence(ctx, seqKey)
		require.NoError(t, err)
		require.Zero(t, info.HeadID)
		_, err = set.ListWorkflow(ctx, wfID)
		require.ErrorIs(t, err, hopper.ErrNotFound, "no step of the workflow committed")

		tx, err = pool.Begin(ctx)
		require.NoError(t, err)
		ids, err := write(tx)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.Len(t, ids, 6)
		expected = append(expected, 4000, 4001, 4002, 4003, 4004, 4005)
		waitRan("the mixed batch", 4000, 4001, 4002, 4003, 4004, 4005)
		require.Equal(t, []int{4000, 4001}, runs.orderOf(seqKey))
		require.Equal(t, []int{4004, 4005}, runs.orderOf(wfID))
	})

	t.Run("CancelSkipRetry", func(t *testing.T) {
		// A cancelled head whose policy is to continue: the next job runs,
		// woken by the cancel.
		kc := keyIn("cancel-continue", 0)
		head, err := shard.Enqueue(ctx, set, pool, feature, bed.Chore{N: 5000}, jobs.Sequence(kc),
			jobs.SequenceOnDead(jobs.SequenceContinue), jobs.Delay(time.Hour))
		require.NoError(t, err)
		_, err = shard.Enqueue(ctx, set, pool, feature, bed.Chore{N: 5001}, jobs.Sequence(kc))
		require.NoError(t, err)
		began := time.Now()
		require.NoError(t, set.CancelJob(ctx, head.ID))
		waitRan("the job after a cancelled head", 5001)
		t.Logf("figure: a sequence's next job started %v after its head's cancel was called", runs.since(began, 5001).Round(time.Microsecond))
		row, err := set.GetJob(ctx, head.ID)
		require.NoError(t, err)
		require.Equal(t, jobs.StateCancelled, row.State)

		// A cancelled head that blocks: SkipSequence lets the rest run.
		kb := keyIn("cancel-block", 1)
		head, err = shard.Enqueue(ctx, set, pool, feature, bed.Chore{N: 5100}, jobs.Sequence(kb), jobs.Delay(time.Hour))
		require.NoError(t, err)
		next, err := shard.Enqueue(ctx, set, pool, feature, bed.Chore{N: 5101}, jobs.Sequence(kb))
		require.NoError(t, err)
		_, err = shard.Enqueue(ctx, set, pool, feature, bed.Chore{N: 5102}, jobs.Sequence(kb))
		require.NoError(t, err)
		require.NoError(t, set.CancelJob(ctx, head.ID))
		info, err := set.GetSequence(ctx, kb)
		require.NoError(t, err)
		require.NotNil(t, info.Blocked, "a cancelled head blocks its sequence")
		require.Equal(t, head.ID, info.Blocked.JobID)
		began = time.Now()
		promoted, err := set.SkipSequence(ctx, kb)
		require.NoError(t, err)
		require.Equal(t, next.ID, promoted)
		waitRan("the jobs after a skipped head", 5101, 5102)
		t.Logf("figure: a sequence's next job started %v after SkipSequence was called", runs.since(began, 5101).Round(time.Microsecond))
		require.Equal(t, []int{5101, 5102}, runs.orderOf(kb))
		_, err = set.SkipSequence(ctx, kb)
		require.ErrorIs(t, err, hopper.ErrNotBlocked)

		// A dead head: RetrySequence runs it again, then the rest.
		kr := keyIn("retry", 2)
		runs.mu.Lock()
		runs.failOnce[5200] = true
		runs.mu.Unlock()
		head, err = shard.Enqueue(ctx, set, pool, feature, bed.Chore{N: 5200}, jobs.Sequence(kr), jobs.MaxAttempts(1))
		require.NoError(t, err)
		_, err = shard.Enqueue(ctx, set, pool, feature, bed.Chore{N: 5201}, jobs.Sequence(kr))
		require.NoError(t, err)
		testdb.WaitFor(t, "the head dead, its sequence blocked", func() bool {
			info, err := set.GetSequence(ctx, kr)
			require.NoError(t, err)
			return info.Blocked != nil
		})
		began = time.Now()
		retried, err := set.RetrySequence(ctx, kr)
		require.NoError(t, err)
		require.Equal(t, head.ID, retried)
		waitRan("a retried head and the job after it", 5200, 5201)
		t.Logf("figure: a retried head started %v after RetrySequence was called", runs.since(began, 5200).Round(time.Microsecond))
		require.Equal(t, []int{5200, 5201}, runs.orderOf(kr))

		// A deleted head: the next job runs, woken by the Set after the
		// delete.
		kd := keyIn("delete", 3)
		head, err = shard.Enqueue(ctx, set, pool, feature, bed.Chore{N: 5500}, jobs.Sequence(kd), jobs.Delay(time.Hour))
		require.NoError(t, err)
		_, err = shard.Enqueue(ctx, set, pool, feature, bed.Chore{N: 5501}, jobs.Sequence(kd))
		require.NoError(t, err)
		began = time.Now()
		_, err = set.DeleteJob(ctx, head.ID)
		require.NoError(t, err)
		waitRan("the job after a deleted head", 5501)
		t.Logf("figure: a sequence's next job started %v after its head's DeleteJob was called", runs.since(began, 5501).Round(time.Microsecond))

		// CancelWorkflow cancels every live step.
		wc := keyIn("wf-cancel", 3)
		wres, err := set.EnqueueWorkflow(ctx, pool, jobs.NewWorkflow(wc).
			Add("a", feature.Entry(bed.Chore{N: 5300}, jobs.Delay(time.Hour))).
			Add("b", feature.Entry(bed.Chore{N: 5301}), jobs.After("a")))
		require.NoError(t, err)
		cancelled, err := set.CancelWorkflow(ctx, wc)
		require.NoError(t, err)
		want := []int64{wres.Steps["a"], wres.Steps["b"]}
		slices.Sort(want)
		require.Equal(t, want, cancelled)
		for _, id := range want {
			row, err := set.GetJob(ctx, id)
			require.NoError(t, err)
			require.Equal(t, jobs.StateCancelled, row.State)
		}

		// RetryWorkflow runs a dead step again; its child, which waits
		// for an operator, then runs.
		wr := keyIn("wf-retry", 0)
		runs.mu.Lock()
		runs.failOnce[5400] = true
		runs.mu.Unlock()
		wres, err = set.EnqueueWorkflow(ctx, pool, jobs.NewWorkflow(wr).
			Add("a", feature.Entry(bed.Chore{N: 5400}, jobs.MaxAttempts(1))).
			Add("b", feature.Entry(bed.Chore{N: 5401}), jobs.After("a"), jobs.OnParentFailure(jobs.WorkflowWait)))
		require.NoError(t, err)
		testdb.WaitFor(t, "the workflow's first step dead", func() bool {
			row, err := set.GetJob(ctx, wres.Steps["a"])
			require.NoError(t, err)
			return row.State == jobs.StateDead
		})
		began = time.Now()
		again, err := set.RetryWorkflow(ctx, wr)
		require.NoError(t, err)
		require.Contains(t, again, wres.Steps["a"])
		waitRan("a retried step and its child", 5400, 5401)
		t.Logf("figure: a retried workflow step started %v after RetryWorkflow was called", runs.since(began, 5400).Round(time.Microsecond))
		require.Equal(t, []int{5400, 5401}, runs.orderOf(wr))
		expected = append(expected, 5001, 5101, 5102, 5200, 5201, 5400, 5401, 5501)
	})

	// The SQL API through the coordinator, as a producer without Go does
	// it: the directory names the key's shard, the transaction's
	// search_path enters it, and hopper_enqueue (a unique job, then a
	// sequence's two jobs) runs there. A silent shard sends no NOTIFY:
	// the worker's poll finds the jobs.
	t.Run("SQLAPIEnqueue", func(t *testing.T) {
		var all []int
		for k := range names {
			key := keyIn("sql", k)
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				var name string
				if err := tx.QueryRow(ctx, "SELECT hopper_directory.hopper_shard_for($1)", key).Scan(&name); err != nil {
					return err
				}
				if name != names[k] {
					return fmt.Errorf("hopper_shard_for(%q) = %s, want %s", key, name, names[k])
				}
				if _, err := tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", name); err != nil {
					return err
				}
				for i, meta := range []string{`{}`, `{"hopper.sequence": "` + key + `"}`, `{"hopper.sequence": "` + key + `"}`} {
					var id int64
					var inserted bool
					if err := tx.QueryRow(ctx, "SELECT id, inserted FROM hopper_enqueue(kind => $1, payload => $2::jsonb, unique_key => $3, meta => $4::jsonb)",
						feature.Name(), fmt.Sprintf(`{"n": %d}`, 9000+k*10+i), fmt.Sprintf("%s/%d", key, i), meta).Scan(&id, &inserted); err != nil {
						return fmt.Errorf("hopper_enqueue in %s: %w", name, err)
					}
					if !inserted || set.ShardOfID(id) != name {
						return fmt.Errorf("job %d (inserted %v) is not in %s", id, inserted, name)
					}
					all = append(all, 9000+k*10+i)
				}
				return nil
			})
			require.NoError(t, err)
		}
		expected = append(expected, all...)
		waitRan("the jobs enqueued by SQL", all...)
		for k := range names {
			key := keyIn("sql", k)
			require.Equal(t, []int{9000 + k*10 + 1, 9000 + k*10 + 2}, runs.orderOf(key), "the sequence enqueued by SQL in order")
		}
	})

	// An event emitted by the Set reaches the jobs waiting for it in every
	// shard, in one transaction; one rolled back reaches none.
	t.Run("EventsAcrossShards", func(t *testing.T) {
		ids := make([]int64, len(names))
		for k := range names {
			res, err := shard.EnqueueRouted(ctx, set, pool, keyIn("await", k), awaiter, bed.Chore{N: 9500 + k})
			require.NoError(t, err)
			require.Equal(t, names[k], set.ShardOfID(res.ID))
			ids[k] = res.ID
		}
		testdb.WaitFor(t, "every awaiter waiting", func() bool {
			for _, id := range ids {
				if row, err := set.GetJob(ctx, id); err != nil || row.State != jobs.StateScheduled {
					return false
				}
			}
			return true
		})
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		woken, err := set.EmitEventTx(ctx, tx, "citus-event", 41)
		require.NoError(t, err)
		require.Equal(t, len(names), woken, "one waiting job in each shard")
		require.NoError(t, tx.Rollback(ctx))
		for _, id := range ids {
			row, err := set.GetJob(ctx, id)
			require.NoError(t, err)
			require.Equal(t, jobs.StateScheduled, row.State, "a rolled-back event wakes no job")
		}
		emitted := time.Now()
		woken, err = set.EmitEvent(ctx, "citus-event", 42)
		require.NoError(t, err)
		require.Equal(t, len(names), woken)
		got := map[int]int{}
		for range names {
			r := <-received
			got[r[0]] = r[1]
		}
		t.Logf("figure: an event emitted by the Set reached the waiting jobs of %d shards in %v", len(names), time.Since(emitted).Round(time.Millisecond))
		for k := range names {
			require.Equal(t, 42, got[9500+k], "the awaiter of %s received the event", names[k])
		}
		_, err = set.EmitEvent(ctx, "", 1)
		require.ErrorIs(t, err, hopper.ErrInvalidEvent)
	})

	t.Run("NoneLost", func(t *testing.T) {
		testdb.WaitDrained(t, "every shard drained", func() int64 {
			var live int64
			for _, name := range names {
				var n int64
				require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s.hopper_jobs",
					pgx.Identifier{name}.Sanitize())).Scan(&n))
				live += n
			}
			return live
		})
		runs.mu.Lock()
		defer runs.mu.Unlock()
		for _, n := range expected {
			require.Equal(t, 1, runs.done[n], "job %d succeeded once", n)
		}
		require.Len(t, runs.done, len(expected), "no other job ran")
		t.Logf("figure: %d jobs, 0 lost, 0 run twice", len(expected))
	})
}
