package worker_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// keyLedger records, per concurrency key, how many runs are in their
// handlers at once and the most ever seen.
type keyLedger struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
	done    int
	order   []string // keys in the order their runs started
}

func newKeyLedger() *keyLedger {
	return &keyLedger{running: map[string]int{}, most: map[string]int{}}
}

func (l *keyLedger) enter(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.running[key]++
	l.most[key] = max(l.most[key], l.running[key])
	l.order = append(l.order, key)
}

func (l *keyLedger) leave(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.running[key]--
	l.done++
}

// mostByKey is a copy of the most runs seen at once, per key.
func (l *keyLedger) mostByKey() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.most)
}

func (l *keyLedger) finished() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}

// TestKeyLimitAcrossWorkers: three workers of 10 slots each share a
// per-key limit of 2 (and a kind of their own with a limit of 1): no key
// ever has more runs at once than its limit, and every job runs.
func TestKeyLimitAcrossWorkers(t *testing.T) {
	b := setup(t)
	limited := kind(t, "limited", jobs.KeyBy(func(p Task) string { return fmt.Sprintf("customer-%d", p.N%5) }))
	single := kind(t, "single")
	ledger, singles := newKeyLedger(), newKeyLedger()
	hold := func(l *keyLedger) func(context.Context, *jobs.Job[Task]) error {
		return func(ctx context.Context, j *jobs.Job[Task]) error {
			l.enter(j.ConcurrencyKey)
			defer l.leave(j.ConcurrencyKey)
			select { // long enough for runs of a key to meet, were they allowed to
			case <-time.After(3 * time.Millisecond):
			case <-ctx.Done():
			}
			return nil
		}
	}
	for i := range 3 {
		start(t, b, worker.Config{
			ID:          fmt.Sprintf("w%d", i),
			Queues:      map[string]int{"default": 10},
			FlowControl: map[string]worker.FlowControl{"default": {KeyLimit: 2}},
		}, func(w *worker.Worker) {
			require.NoError(t, worker.Handle(w, limited, hold(ledger)))
			require.NoError(t, worker.Handle(w, single, hold(singles), worker.KeyLimit(1)))
		})
	}
	items := make([]jobs.Item[Task], 200)
	for i := range items {
		items[i] = jobs.Item[Task]{Payload: Task{N: i}}
	}
	_, err := limited.EnqueueMany(b.Ctx, b.Pool, items)
	require.NoError(t, err)
	for i := range 40 {
		_, err := single.Enqueue(b.Ctx, b.Pool, Task{N: i}, jobs.ConcurrencyKey(fmt.Sprintf("account-%d", i%2)))
		require.NoError(t, err)
	}
	testdb.WaitFor(t, "every job to run", func() bool { return ledger.finished() == 200 && singles.finished() == 40 })
	for key, most := range ledger.mostByKey() {
		require.LessOrEqual(t, most, 2, "key %s", key)
	}
	require.Len(t, ledger.mostByKey(), 5)
	for key, most := range singles.mostByKey() {
		require.Equal(t, 1, most, "key %s", key)
	}
	require.Len(t, singles.mostByKey(), 2)
}

// TestFairQueue: one slot, 40 jobs of tenant a enqueued before 5 each of
// b and c. Strict order runs b and c last; a fair queue takes the keys in
// turn, so b's and c's jobs are done within the first 15 runs.
func TestFairQueue(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			b := setup(t)
			k := kind(t, "tenant")
			var entries []jobs.Entry
			for _, tenant := range []struct {
				key string
				n   int
			}{{"a", 40}, {"b", 5}, {"c", 5}} {
				for i := range tenant.n {
					entries = append(entries, k.Entry(Task{N: i}, jobs.ConcurrencyKey(tenant.key)))
				}
			}
			_, err := jobs.EnqueueBatch(b.Ctx, b.Pool, entries)
			require.NoError(t, err)
			ledger := newKeyLedger()
			start(t, b, worker.Config{
				Queues:      map[string]int{"default": 1},
				FlowControl: map[string]worker.FlowControl{"default": {Fair: fair}},
			}, func(w *worker.Worker) {
				require.NoError(t, worker.Handle(w, k, func(_ context.Context, j *jobs.Job[Task]) error {
					ledger.enter(j.ConcurrencyKey)
					ledger.leave(j.ConcurrencyKey)
					return nil
				}))
			})
			testdb.WaitFor(t, "every job to run", func() bool { return ledger.finished() == 50 })
			last := max(lastIndex(ledger.order, "b"), lastIndex(ledger.order, "c"))
			if fair {
				require.Less(t, last, 15, "order: %s", strings.Join(ledger.order, ""))
				require.Equal(t, "abcabc", strings.Join(ledger.order[:6], ""))
			} else {
				require.Equal(t, 49, last, "strict order runs them last")
			}
		})
	}
}

func lastIndex(s []string, v string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == v {
			return i
		}
	}
	return -1
}

// TestRateLimitAcrossWorkers: two workers share a limit of 15 jobs per
// 300ms. The claim times (the database's clock, read from each running
// job's lease) never put more than 15 claims in any window of 300ms, and
// every job runs.
func TestRateLimitAcrossWorkers(t *testing.T) {
	for _, by := range []worker.RateGroup{worker.RateByQueue, worker.RateByKey} {
		t.Run(string(by), func(t *testing.T) {
			b := setup(t)
			k := kind(t, "call")
			const lease = 30 * time.Second
			var mu sync.Mutex
			claimed := map[string][]time.Time{}
			for i := range 2 {
				start(t, b, worker.Config{
					ID:            fmt.Sprintf("w%d", i),
					LeaseDuration: lease,
					// The claim time is read back as lease_until less the
					// lease: no lease extension may move the lease meanwhile.
					ExtendInterval: -1,
					Queues:         map[string]int{"default": 20},
					FlowControl: map[string]worker.FlowControl{"default": {
						Rate: worker.Rate{Limit: 15, Per: 300 * time.Millisecond, By: by},
					}},
				}, func(w *worker.Worker) {
					require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
						var until time.Time
						if err := b.Pool.QueryRow(ctx, "SELECT lease_until FROM hopper_jobs WHERE id = $1", j.ID).Scan(&until); err != nil {
							return err
						}
						mu.Lock()
						claimed[j.ConcurrencyKey] = append(claimed[j.ConcurrencyKey], until.Add(-lease))
						mu.Unlock()
						return nil
					}))
				})
			}
			var entries []jobs.Entry
			for i := range 60 {
				entries = append(entries, k.Entry(Task{N: i}, jobs.ConcurrencyKey([]string{"x", "y"}[i%2])))
			}
			_, err := jobs.EnqueueBatch(b.Ctx, b.Pool, entries)
			require.NoError(t, err)
			testdb.WaitFor(t, "every job to run", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(claimed["x"])+len(claimed["y"]) == 60
			})
			mu.Lock()
			defer mu.Unlock()
			groups := [][]time.Time{append(claimed["x"], claimed["y"]...)}
			if by == worker.RateByKey {
				groups = [][]time.Time{claimed["x"], claimed["y"]}
			}
			for _, times := range groups {
				slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
				for i, end := range times {
					in := 0 // claims in the window (end - 300ms, end]
					for _, t0 := range times[:i+1] {
						if t0.After(end.Add(-300 * time.Millisecond)) {
							in++
						}
					}
					require.LessOrEqual(t, in, 15, "claims in the 300ms before %v", end)
				}
			}
		})
	}
}

// TestRateExactStarts: with ExactStarts, once the last handler of a claim
// has started, the claim's entry in the rate log moves from the claim's
// time to then, and the next claims count their window back from there;
// without it the entry stays. A trigger keeps every version of the log's
// rows. The handlers of an exact claim wait until its entry has moved, so
// that no later claim can come before the move (they hold every slot).
func TestRateExactStarts(t *testing.T) {
	for _, exact := range []bool{false, true} {
		t.Run(fmt.Sprintf("exact=%t", exact), func(t *testing.T) {
			b := setup(t)
			_, err := b.Pool.Exec(b.Ctx, `
				CREATE TABLE rate_log (op text, old_at timestamptz, new_at timestamptz, jobs integer);
				CREATE FUNCTION rate_log() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN
					INSERT INTO rate_log VALUES (TG_OP, CASE WHEN TG_OP = 'UPDATE' THEN OLD.claimed_at END, NEW.claimed_at, NEW.jobs);
					RETURN NULL;
				END $$;
				CREATE TRIGGER rate_log AFTER INSERT OR UPDATE ON hopper_rate_claims
					FOR EACH ROW EXECUTE FUNCTION rate_log();`)
			require.NoError(t, err)
			k := kind(t, "call")
			const lease, limit, per = 30 * time.Second, 5, 500 * time.Millisecond
			var mu sync.Mutex
			ran := 0
			start(t, b, worker.Config{
				LeaseDuration:  lease,
				ExtendInterval: -1, // the claim time is lease_until less the lease
				Queues:         map[string]int{"default": limit},
				FlowControl: map[string]worker.FlowControl{"default": {
					Rate: worker.Rate{Limit: limit, Per: per, ExactStarts: exact},
				}},
			}, func(w *worker.Worker) {
				require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
					var claimedAt time.Time
					if err := b.Pool.QueryRow(ctx, "SELECT lease_until FROM hopper_jobs WHERE id = $1", j.ID).Scan(&claimedAt); err != nil {
						return err
					}
					claimedAt = claimedAt.Add(-lease)
					for exact {
						var moved bool
						if err := b.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM rate_log WHERE op = 'UPDATE' AND old_at = $1)", claimedAt).Scan(&moved); err != nil {
							return err
						}
						if moved {
							break
						}
						select {
						case <-ctx.Done():
							return ctx.Err()
						case <-time.After(5 * time.Millisecond):
						}
					}
					mu.Lock()
					defer mu.Unlock()
					ran++
					return nil
				}))
			})
			_, err = k.EnqueueMany(b.Ctx, b.Pool, jobs.Items(make([]Task, 3*limit)...))
			require.NoError(t, err)
			testdb.WaitFor(t, "every job to run", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return ran == 3*limit
			})

			type claimLog struct {
				at, counted time.Time // when it claimed; from when the limit counted it
				jobs        int
			}
			var claims []claimLog
			rows, err := b.Pool.Query(b.Ctx, `
				SELECT i.new_at, coalesce(max(u.new_at), i.new_at), i.jobs, count(u.op)
				FROM rate_log AS i
				LEFT JOIN rate_log AS u ON u.op = 'UPDATE' AND u.old_at = i.new_at
				WHERE i.op = 'INSERT'
				GROUP BY i.new_at, i.jobs
				ORDER BY i.new_at`)
			require.NoError(t, err)
			for rows.Next() {
				var c claimLog
				var moves int
				require.NoError(t, rows.Scan(&c.at, &c.counted, &c.jobs, &moves))
				if exact {
					require.Equal(t, 1, moves, "an exact claim's entry moves once, when its last handler started")
					require.True(t, c.counted.After(c.at), "moved later, not earlier")
				} else {
					require.Zero(t, moves, "without ExactStarts the entry stays at the claim's time")
				}
				claims = append(claims, c)
			}
			require.NoError(t, rows.Err())
			total := 0
			for j, c := range claims {
				total += c.jobs
				inWindow := c.jobs // this claim and those counted less than a window before it
				for _, earlier := range claims[:j] {
					if earlier.counted.After(c.at.Add(-per)) {
						inWindow += earlier.jobs
					}
				}
				require.LessOrEqual(t, inWindow, limit, "claim at %v", c.at)
			}
			require.Equal(t, 3*limit, total)
		})
	}
}

// TestFlowControlRejectsBadInput: limits and keys are checked where they
// are given, with errors users can match.
func TestFlowControlRejectsBadInput(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t).Pool
	for _, tc := range []struct {
		name string
		flow worker.FlowControl
		want string
	}{
		{"negative key limit", worker.FlowControl{KeyLimit: -1}, "key limit -1"},
		{"rate without limit", worker.FlowControl{Rate: worker.Rate{Per: time.Second}}, "rate limit 0 jobs"},
		{"negative rate", worker.FlowControl{Rate: worker.Rate{Limit: -5, Per: time.Second}}, "rate limit -5 jobs"},
		{"rate without window", worker.FlowControl{Rate: worker.Rate{Limit: 5}}, "rate window 0s"},
		{"window too short", worker.FlowControl{Rate: worker.Rate{Limit: 5, Per: time.Microsecond}}, "rate window 1µs"},
		{"window too long", worker.FlowControl{Rate: worker.Rate{Limit: 5, Per: 48 * time.Hour}}, "rate window 48h0m0s"},
		{"unknown group", worker.FlowControl{Rate: worker.Rate{Limit: 5, Per: time.Second, By: "tenant"}}, `rate group "tenant"`},
		{"aging too short", worker.FlowControl{PriorityAging: time.Millisecond}, "priority aging 1ms"},
		{"negative aging", worker.FlowControl{PriorityAging: -time.Second}, "priority aging -1s"},
		{"local by key", worker.FlowControl{Rate: worker.Rate{Limit: 5, Per: time.Second, By: worker.RateByKey, Local: true}}, "local rate limit"},
		{"local exact starts", worker.FlowControl{Rate: worker.Rate{Limit: 5, Per: time.Second, Local: true, ExactStarts: true}}, "ExactStarts needs the database"},
		{"exact starts without limit", worker.FlowControl{Rate: worker.Rate{ExactStarts: true}}, "rate limit 0 jobs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := worker.New(pool, worker.Config{FlowControl: map[string]worker.FlowControl{"default": tc.flow}})
			require.ErrorIs(t, err, worker.ErrInvalidConfig)
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err := worker.New(pool, worker.Config{FlowControl: map[string]worker.FlowControl{"other": {KeyLimit: 1}}})
	require.ErrorIs(t, err, worker.ErrInvalidConfig)
	require.ErrorContains(t, err, `queue "other", which this worker does not serve`)

	w, err := worker.New(pool, worker.Config{})
	require.NoError(t, err)
	err = worker.Handle(w, kind(t, "k"), func(context.Context, *jobs.Job[Task]) error { return nil }, worker.KeyLimit(-2))
	require.ErrorIs(t, err, worker.ErrInvalidConfig)
	require.ErrorContains(t, err, "key limit -2")

	k := kind(t, "keyed")
	long := kind(t, "long", jobs.KeyBy(func(Task) string { return strings.Repeat("k", 256) }))
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"empty", k.Check(Task{}, jobs.ConcurrencyKey(""))},
		{"too long", k.Check(Task{}, jobs.ConcurrencyKey(strings.Repeat("é", 256)))},
		{"not UTF-8", k.Check(Task{}, jobs.ConcurrencyKey("\xff"))},
		{"NUL", k.Check(Task{}, jobs.ConcurrencyKey("a\x00b"))},
		{"derived too long", long.Check(Task{})},
	} {
		require.ErrorIs(t, tc.err, jobs.ErrInvalidConcurrencyKey, tc.name)
	}
	require.NoError(t, k.Check(Task{}, jobs.ConcurrencyKey(strings.Repeat("é", 255))))
	_, err = jobs.Define[Task]("wrong", jobs.KeyBy(func(string) string { return "" }))
	require.ErrorIs(t, err, jobs.ErrInvalidDefinition)
}

// TestFlowStats: with a per-key limit of 1 and handlers that hold their
// jobs, the operations API, the CLI's source, and the metrics endpoint show
// each key's ready and running jobs, and the rate limit's window.
func TestFlowStats(t *testing.T) {
	b := setup(t)
	k := kind(t, "held")
	release := make(chan struct{})
	r := start(t, b, worker.Config{
		Queues:          map[string]int{"default": 10},
		MetricsAddr:     ":0",
		MetricsInterval: 20 * time.Millisecond,
		FlowControl: map[string]worker.FlowControl{"default": {
			KeyLimit: 1,
			Rate:     worker.Rate{Limit: 1000, Per: time.Hour, By: worker.RateByKey},
		}},
	}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, _ *jobs.Job[Task]) error {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}))
	})
	var entries []jobs.Entry
	for i := range 5 {
		entries = append(entries, k.Entry(Task{N: i}, jobs.ConcurrencyKey("big")))
	}
	entries = append(entries, k.Entry(Task{}, jobs.ConcurrencyKey("small")), k.Entry(Task{}))
	_, err := jobs.EnqueueBatch(b.Ctx, b.Pool, entries)
	require.NoError(t, err)
	client := hopper.NewClient(b.Pool)
	var keys []hopper.KeyCount
	testdb.WaitFor(t, "one job of each key running", func() bool {
		keys, err = client.ListKeys(b.Ctx, "", 0)
		require.NoError(t, err)
		return len(keys) == 2 && keys[0].Running == 1 && keys[1].Running == 1
	})
	require.Equal(t, []hopper.KeyCount{
		{Queue: "default", Key: "big", Ready: 4, Running: 1},
		{Queue: "default", Key: "small", Running: 1},
	}, keys)
	budgets, err := client.ListRateBudgets(b.Ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []hopper.RateBudget{
		{Queue: "default", Group: "", Limit: 1000, Per: time.Hour, Used: 1}, // the job without a key
		{Queue: "default", Group: "big", Limit: 1000, Per: time.Hour, Used: 1},
		{Queue: "default", Group: "small", Limit: 1000, Per: time.Hour, Used: 1},
	}, budgets)
	require.Equal(t, 999, budgets[0].Left())
	_, err = client.ListKeys(b.Ctx, "", hopper.MaxKeysLimit+1)
	require.ErrorIs(t, err, hopper.ErrInvalidFilter)

	testdb.WaitFor(t, "the flow gauges", func() bool {
		body := scrape(r.w)
		return strings.Contains(body, `hopper_key_jobs{key="big",queue="default",state="ready"} 4`) &&
			strings.Contains(body, `hopper_key_jobs{key="big",queue="default",state="running"} 1`) &&
			strings.Contains(body, `hopper_rate_limit_used{group="small",queue="default"} 1`) &&
			strings.Contains(body, `hopper_rate_limit_jobs{group="small",queue="default"} 1000`)
	})
	close(release)
	testdb.WaitFor(t, "every job done", func() bool {
		live, _ := b.Totals(t)
		return live == 0
	})
}

// TestKeyLimitDoesNotBlockOtherKeys: strict order with a per-key limit of
// 1, and 1000 jobs of one key ahead of 10 each of ten others. The head of
// the queue is all the one key, at its limit: the claim looks past it for
// the other keys, which finish while most of the first key's backlog still
// waits (it runs one at a time; each claim takes at most one of it). Were
// they blocked behind it, they would run only once it had drained.
func TestKeyLimitDoesNotBlockOtherKeys(t *testing.T) {
	b := setup(t)
	k := kind(t, "tenant")
	var entries []jobs.Entry
	for i := range 1000 {
		entries = append(entries, k.Entry(Task{N: i}, jobs.ConcurrencyKey("flood")))
	}
	_, err := jobs.EnqueueBatch(b.Ctx, b.Pool, entries)
	require.NoError(t, err)
	entries = entries[:0]
	for i := range 100 {
		entries = append(entries, k.Entry(Task{N: i}, jobs.ConcurrencyKey(fmt.Sprintf("tenant-%d", i%10))))
	}
	_, err = jobs.EnqueueBatch(b.Ctx, b.Pool, entries)
	require.NoError(t, err)
	ledger := newKeyLedger()
	var mu sync.Mutex
	others, floodDone := 0, 0
	floodLeftWhenOthersDone := -1
	start(t, b, worker.Config{
		Queues:      map[string]int{"default": 10},
		FlowControl: map[string]worker.FlowControl{"default": {KeyLimit: 1}},
	}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(_ context.Context, j *jobs.Job[Task]) error {
			ledger.enter(j.ConcurrencyKey)
			defer ledger.leave(j.ConcurrencyKey)
			mu.Lock()
			defer mu.Unlock()
			if j.ConcurrencyKey == "flood" {
				floodDone++
				return nil
			}
			if others++; others == 100 {
				floodLeftWhenOthersDone = 1000 - floodDone
			}
			return nil
		}))
	})
	testdb.WaitFor(t, "the other keys' jobs to run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return others == 100
	})
	mu.Lock()
	defer mu.Unlock()
	require.Greater(t, floodLeftWhenOthersDone, 500, "the flood runs one at a time, the others beside it")
	for key, most := range ledger.mostByKey() {
		require.Equal(t, 1, most, key)
	}
}

// TestCrowdedHeadLeavesNoJobBehindTheCursor: a strict claim whose head is
// all one key at its limit goes round the keys, which may take jobs far
// beyond the head (keys are visited in key order, not in the ready
// order); the claim cursor must stop at the head's end, or the ready jobs
// between the head and those would be passed over until a full scan (an
// hour away here). The flood's running job never ends while the others
// run (nor times out), so no result of its key moves the cursor back to
// the front.
func TestCrowdedHeadLeavesNoJobBehindTheCursor(t *testing.T) {
	b := setup(t)
	k := kind(t, "tenant")
	release := make(chan struct{})
	var mu sync.Mutex
	done := map[string]int{} // finished jobs per key group
	r := start(t, b, worker.Config{
		Queues:           map[string]int{"default": 5},
		FullScanInterval: time.Hour,
		Timeout:          time.Hour, // the held job's end would move the cursor back
		FlowControl:      map[string]worker.FlowControl{"default": {KeyLimit: 1}},
	}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			group, _, _ := strings.Cut(j.ConcurrencyKey, "-")
			if group == "flood" {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			mu.Lock()
			defer mu.Unlock()
			done[group]++
			return nil
		}))
	})
	testdb.WaitFor(t, "the wake-up listener", func() bool { return worker.Listening(r.w) })

	// In the ready order: the flood (more than a head's worth), then the
	// middle keys, then the far keys, whose names come first in key order.
	var entries []jobs.Entry
	for i := range 100 {
		entries = append(entries, k.Entry(Task{N: i}, jobs.ConcurrencyKey("flood")))
	}
	for i := range 20 {
		entries = append(entries, k.Entry(Task{N: i}, jobs.ConcurrencyKey(fmt.Sprintf("zmid-%d", i))))
	}
	for i := range 20 {
		entries = append(entries, k.Entry(Task{N: i}, jobs.ConcurrencyKey(fmt.Sprintf("afar-%d", i))))
	}
	_, err := jobs.EnqueueBatch(b.Ctx, b.Pool, entries)
	require.NoError(t, err)

	testdb.WaitFor(t, "the middle and far keys' jobs to run beside the held flood", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return done["zmid"] == 20 && done["afar"] == 20
	})
	mu.Lock()
	require.Zero(t, done["flood"], "the flood's job is held")
	mu.Unlock()
	close(release)
	testdb.WaitFor(t, "the flood to drain", func() bool {
		live, _ := b.Totals(t)
		return live == 0
	})
}

// TestPriorityAging: one slot, and chains of priority-0 jobs that each
// enqueue the next, so that a priority-0 job is always ready. A job of
// priority 9 would wait forever; aged every 100ms, it runs, at priority 0
// by then.
func TestPriorityAging(t *testing.T) {
	b := setup(t)
	k := kind(t, "chain")
	low := kind(t, "low")
	var mu sync.Mutex
	ranAt := -1
	stop := false
	// Enqueued before the worker starts: from its first claim on, a
	// priority-0 job is always ready ahead of the priority-9 one.
	_, err := k.EnqueueMany(b.Ctx, b.Pool, jobs.Items(Task{}, Task{}, Task{}))
	require.NoError(t, err)
	_, err = low.Enqueue(b.Ctx, b.Pool, Task{}, jobs.Priority(9))
	require.NoError(t, err)
	start(t, b, worker.Config{
		Queues:      map[string]int{"default": 1},
		FlowControl: map[string]worker.FlowControl{"default": {PriorityAging: 100 * time.Millisecond}},
	}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			mu.Lock()
			done := stop
			mu.Unlock()
			if done {
				return nil
			}
			_, err := k.Enqueue(ctx, b.Pool, Task{N: j.Payload.N + 1})
			return err
		}))
		require.NoError(t, worker.Handle(w, low, func(_ context.Context, j *jobs.Job[Task]) error {
			mu.Lock()
			defer mu.Unlock()
			ranAt, stop = j.Priority, true
			return nil
		}))
	})
	testdb.WaitFor(t, "the priority-9 job to run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ranAt >= 0
	})
	require.Equal(t, 0, ranAt)
}

// TestHeldJobRunsWhenItsKeyFrees: a strict claim under a key limit starts
// from the queue's cursor, which moves past jobs held back by their keys'
// limits; recording a keyed job's result moves it back to that job, before
// the rest of its key. The full scan is an hour away: the held job runs
// only if the cursor went back for it.
func TestHeldJobRunsWhenItsKeyFrees(t *testing.T) {
	b := setup(t)
	k := kind(t, "tenant")
	slow1, err := k.Enqueue(b.Ctx, b.Pool, Task{N: 1}, jobs.ConcurrencyKey("slow"))
	require.NoError(t, err)
	slow2, err := k.Enqueue(b.Ctx, b.Pool, Task{N: 2}, jobs.ConcurrencyKey("slow"))
	require.NoError(t, err)
	release := make(chan struct{})
	ran := newRanSet()
	r := start(t, b, worker.Config{
		Queues:           map[string]int{"default": 4},
		FullScanInterval: time.Hour,
		FlowControl:      map[string]worker.FlowControl{"default": {KeyLimit: 1}},
	}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			if j.ID == slow1.ID {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return ran.handler(ctx, j)
		}))
	})
	testdb.WaitFor(t, "the wake-up listener", func() bool { return worker.Listening(r.w) })
	var others []int64
	for i := range 20 {
		j, err := k.Enqueue(b.Ctx, b.Pool, Task{N: 10 + i}, jobs.ConcurrencyKey(fmt.Sprintf("quick-%d", i)))
		require.NoError(t, err)
		others = append(others, j.ID)
	}
	testdb.WaitFor(t, "the other keys' jobs run past the held one", func() bool {
		for _, id := range others {
			if !ran.has(id) {
				return false
			}
		}
		return true
	})
	p, _, id := worker.CursorAt(r.w, "default")
	require.GreaterOrEqual(t, p, int16(0), "the queue claims from its cursor")
	// The next claim starts after the cursor. The last result recorded
	// moved it back to just before its job, which for the first quick job
	// is (its priority and run_at, id - 1): slow2's id, but after slow2 in
	// the ready order, so the held job is passed then too.
	require.GreaterOrEqual(t, id, slow2.ID, "the cursor passed the held job")
	require.False(t, ran.has(slow2.ID), "its key is at its limit")

	close(release)
	testdb.WaitFor(t, "the held job runs once its key frees", func() bool { return ran.has(slow2.ID) })
}
