package hopper_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

type Posting struct {
	Account string `json:"account"`
	N       int    `json:"n"`
}

var posting = jobs.MustDefine[Posting]("posting", jobs.Defaults(jobs.Queue("ledger")),
	jobs.SequenceBy(func(p Posting) string { return p.Account }))

// runLog records the runs of a handler: per key, in start order, and
// whether two runs of one key ever overlapped.
type runLog struct {
	mu      sync.Mutex
	running map[string]bool
	order   map[string][]int
	overlap []string
}

func newRunLog() *runLog {
	return &runLog{running: map[string]bool{}, order: map[string][]int{}}
}

func (l *runLog) start(key string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running[key] {
		l.overlap = append(l.overlap, fmt.Sprintf("%s/%d", key, n))
	}
	l.running[key] = true
	l.order[key] = append(l.order[key], n)
}

func (l *runLog) end(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.running[key] = false
}

func (l *runLog) runs(key string) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.order[key]...)
}

func (l *runLog) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, o := range l.order {
		n += len(o)
	}
	return n
}

func TestSequencePlacesJobsBehindTheHead(t *testing.T) {
	b := setup(t)
	var ids []int64
	for n := range 3 {
		res, err := posting.Enqueue(b.Ctx, b.Pool, Posting{Account: "acct-1", N: n})
		require.NoError(t, err)
		ids = append(ids, res.ID)
	}
	other, err := posting.Enqueue(b.Ctx, b.Pool, Posting{Account: "acct-2"})
	require.NoError(t, err)
	require.Equal(t, jobs.StatePending, b.state(t, ids[0]))
	require.Equal(t, jobs.StateWaiting, b.state(t, ids[1]))
	require.Equal(t, jobs.StateWaiting, b.state(t, ids[2]))
	require.Equal(t, jobs.StatePending, b.state(t, other.ID), "another key has a head of its own")

	job, err := b.client.GetJob(b.Ctx, ids[1])
	require.NoError(t, err)
	require.Equal(t, "acct-1", job.Meta[jobs.MetaSequence], "the key is in the metadata")

	info, err := b.client.GetSequence(b.Ctx, "acct-1")
	require.NoError(t, err)
	require.Equal(t, hopper.SequenceInfo{Key: "acct-1", HeadID: ids[0], HeadState: jobs.StatePending, Waiting: 2}, info)

	stats, err := b.client.GetStats(b.Ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, stats.Total.Waiting)
	require.EqualValues(t, 2, stats.Total.Ready)

	// A batch in one transaction: the first job of a new key is its head.
	res, err := posting.EnqueueMany(b.Ctx, b.Pool, jobs.Items(Posting{Account: "acct-3", N: 0}, Posting{Account: "acct-3", N: 1}, Posting{Account: "acct-1", N: 3}))
	require.NoError(t, err)
	require.Equal(t, 3, res.Inserted)
	require.Equal(t, jobs.StatePending, b.state(t, res.Results[0].ID))
	require.Equal(t, jobs.StateWaiting, b.state(t, res.Results[1].ID))
	require.Equal(t, jobs.StateWaiting, b.state(t, res.Results[2].ID))
}

func TestSequenceRunsInOrderOneAtATime(t *testing.T) {
	b := setup(t)
	const keys, perKey = 8, 12
	// Enqueued while the worker runs, from goroutines whose transactions
	// each write to every key, in an order of their own: the order to keep
	// is the order of the ids, and the commits' placement must never
	// deadlock with the worker's acknowledgements of the heads (both lock
	// heads in id order).
	var wg sync.WaitGroup
	var produced sync.WaitGroup
	produced.Add(1)
	go func() {
		defer produced.Done()
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := range perKey {
					if n%4 != g {
						continue
					}
					// A transaction that enqueues to several keys sends them
					// as one batch, which takes all their locks at once: one
					// by one, two transactions taking keys in opposite orders
					// deadlock.
					tx, err := b.Pool.Begin(b.Ctx)
					if !assertNoError(t, err) {
						return
					}
					items := make([]jobs.Item[Posting], 0, keys)
					for k := range keys {
						items = append(items, jobs.Item[Posting]{Payload: Posting{Account: fmt.Sprintf("acct-%d", (k*(g+1))%keys), N: n}})
					}
					if _, err := posting.EnqueueMany(b.Ctx, tx, items); !assertNoError(t, err) {
						_ = tx.Rollback(b.Ctx)
						return
					}
					assertNoError(t, tx.Commit(b.Ctx))
				}
			}()
		}
		wg.Wait()
	}()
	done := make(chan struct{})
	go func() { produced.Wait(); close(done) }()
	expected := map[string]int{}
	for g := range 4 {
		for n := range perKey {
			for k := range keys {
				if n%4 == g {
					expected[fmt.Sprintf("acct-%d", (k*(g+1))%keys)]++
				}
			}
		}
	}

	log := newRunLog()
	failed := sync.Map{}
	b.runUntil(t, worker.Config{Queues: map[string]int{"ledger": 16}}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, posting, func(ctx context.Context, j *jobs.Job[Posting]) error {
			log.start(j.Payload.Account, int(j.ID))
			defer log.end(j.Payload.Account)
			time.Sleep(time.Millisecond) // let a second run of the key overlap, were it allowed
			// One job in five fails once: it holds its sequence through the retry.
			if j.ID%5 == 0 {
				if _, again := failed.LoadOrStore(j.ID, true); !again {
					return errors.New("first attempt fails")
				}
			}
			return nil
		}))
	}, "every posting ran", func() bool {
		select {
		case <-done:
		default:
			return false
		}
		live, _ := b.Totals(t)
		return live == 0
	})
	require.Empty(t, log.overlap, "two runs of one key at once")
	for k := range keys {
		key := fmt.Sprintf("acct-%d", k)
		runs := log.runs(key)
		// A failed run is followed by its own retry: collapse repeats.
		var order []int
		for _, id := range runs {
			if len(order) == 0 || order[len(order)-1] != id {
				order = append(order, id)
			}
		}
		require.Len(t, order, expected[key], key)
		delete(expected, key)
		require.IsIncreasing(t, order, "%s ran out of id order: %v", key, runs)
	}
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

func TestSequenceBlockRetryAndSkip(t *testing.T) {
	b := setup(t)
	head := b.enqueue(t, email, "head", jobs.Sequence("s"), jobs.MaxAttempts(1))
	second := b.enqueue(t, email, "second", jobs.Sequence("s"))
	third := b.enqueue(t, email, "third", jobs.Sequence("s"))

	var mu sync.Mutex
	var ran []string
	fail := true
	handle := func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, email, func(_ context.Context, j *jobs.Job[Email]) error {
			mu.Lock()
			defer mu.Unlock()
			ran = append(ran, j.Payload.To)
			if j.Payload.To == "head" && fail {
				return worker.Permanent(errors.New("bad posting"))
			}
			return nil
		}))
	}
	cfg := worker.Config{Queues: map[string]int{"mail": 4}}
	b.runUntil(t, cfg, handle, "the head died", func() bool {
		blocked, err := b.client.ListBlockedSequences(b.Ctx, hopper.SequencePage{})
		require.NoError(t, err)
		return len(blocked) == 1
	})
	blocked, err := b.client.ListBlockedSequences(b.Ctx, hopper.SequencePage{})
	require.NoError(t, err)
	require.Len(t, blocked, 1)
	require.Equal(t, "s", blocked[0].Key)
	require.Equal(t, head, blocked[0].JobID)
	require.Equal(t, jobs.StateDead, blocked[0].State)
	require.Contains(t, blocked[0].Reason, "bad posting")
	require.EqualValues(t, 2, blocked[0].Waiting)
	require.Equal(t, []string{"head"}, ran, "nothing behind a dead head runs")
	require.Equal(t, jobs.StateWaiting, b.state(t, second))

	// A job enqueued to a blocked sequence waits too.
	fourth := b.enqueue(t, email, "fourth", jobs.Sequence("s"))
	require.Equal(t, jobs.StateWaiting, b.state(t, fourth))

	// Retry: the head comes back first, and this time succeeds.
	mu.Lock()
	fail = false
	mu.Unlock()
	id, err := b.client.RetrySequence(b.Ctx, "s")
	require.NoError(t, err)
	require.Equal(t, head, id)
	require.Equal(t, jobs.StatePending, b.state(t, head))
	require.Equal(t, jobs.StateWaiting, b.state(t, second))
	b.runUntil(t, cfg, handle, "the sequence ran", func() bool {
		info, err := b.client.GetSequence(b.Ctx, "s")
		require.NoError(t, err)
		return info.HeadID == 0 && info.Waiting == 0
	})
	require.Equal(t, []string{"head", "head", "second", "third", "fourth"}, ran)
	_, err = b.client.RetrySequence(b.Ctx, "s")
	require.ErrorIs(t, err, hopper.ErrNotBlocked)
	_, err = b.client.SkipSequence(b.Ctx, "s")
	require.ErrorIs(t, err, hopper.ErrNotBlocked)
	_ = third

	// Skip: a cancelled head stays cancelled, the next job runs.
	a := b.enqueue(t, email, "a", jobs.Sequence("t"))
	bb := b.enqueue(t, email, "b", jobs.Sequence("t"))
	require.NoError(t, b.client.CancelJob(b.Ctx, a))
	info, err := b.client.GetSequence(b.Ctx, "t")
	require.NoError(t, err)
	require.NotNil(t, info.Blocked)
	require.Equal(t, jobs.StateCancelled, info.Blocked.State)
	require.Equal(t, jobs.StateWaiting, b.state(t, bb))
	next, err := b.client.SkipSequence(b.Ctx, "t")
	require.NoError(t, err)
	require.Equal(t, bb, next)
	require.Equal(t, jobs.StatePending, b.state(t, bb))
	require.Equal(t, jobs.StateCancelled, b.state(t, a))
}

func TestSequenceContinuePolicy(t *testing.T) {
	b := setup(t)
	first := b.enqueue(t, email, "first", jobs.Sequence("c"), jobs.SequenceOnDead(jobs.SequenceContinue))
	second := b.enqueue(t, email, "second", jobs.Sequence("c"))
	require.NoError(t, b.client.CancelJob(b.Ctx, first))
	require.Equal(t, jobs.StatePending, b.state(t, second), "continue: the next job runs")
	blocked, err := b.client.ListBlockedSequences(b.Ctx, hopper.SequencePage{})
	require.NoError(t, err)
	require.Empty(t, blocked)

	// Retried while the next job is the head, it waits behind it.
	res, err := b.client.RetryDeadJobs(b.Ctx, hopper.DeadFilter{IDs: []int64{first}, States: []jobs.State{jobs.StateCancelled}})
	require.NoError(t, err)
	require.Equal(t, []int64{first}, res.Retried)
	require.Equal(t, jobs.StateWaiting, b.state(t, first))
	require.Equal(t, jobs.StatePending, b.state(t, second))
}

func TestSequenceHeadDeletedOrEdited(t *testing.T) {
	b := setup(t)
	first := b.enqueue(t, email, "first", jobs.Sequence("d"))
	second := b.enqueue(t, email, "second", jobs.Sequence("d"), jobs.Delay(time.Hour))
	third := b.enqueue(t, email, "third", jobs.Sequence("d"))

	// A waiting job can be edited and keeps waiting; deleting it leaves the
	// head alone.
	_, err := b.client.UpdateJob(b.Ctx, third, hopper.JobUpdate{Priority: ptr(3)})
	require.NoError(t, err)
	require.Equal(t, jobs.StateWaiting, b.state(t, third))

	// Deleting the head makes the next job the head: due in an hour, it is
	// scheduled, and the job behind it does not overtake it.
	_, err = b.client.DeleteJob(b.Ctx, first)
	require.NoError(t, err)
	require.Equal(t, jobs.StateScheduled, b.state(t, second))
	require.Equal(t, jobs.StateWaiting, b.state(t, third))
	_, err = b.client.DeleteJob(b.Ctx, third)
	require.NoError(t, err)
	require.Equal(t, jobs.StateScheduled, b.state(t, second))
}

func TestSequenceBadInput(t *testing.T) {
	b := setup(t)
	for _, tc := range []struct {
		name string
		opts []jobs.EnqueueOption
		want string
	}{
		{"empty key", []jobs.EnqueueOption{jobs.Sequence("")}, "empty"},
		{"over-long key", []jobs.EnqueueOption{jobs.Sequence(strings.Repeat("é", 128))}, "256 bytes long, over the limit of 255"},
		{"not UTF-8", []jobs.EnqueueOption{jobs.Sequence("a\xff")}, "not valid UTF-8"},
		{"unknown policy", []jobs.EnqueueOption{jobs.Sequence("k"), jobs.SequenceOnDead("maybe")}, `unknown policy "maybe"`},
		{"key in the metadata", []jobs.EnqueueOption{jobs.Metadata(jobs.Meta{jobs.MetaSequence: ""})}, "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := email.Enqueue(b.Ctx, b.Pool, Email{To: "x"}, tc.opts...)
			require.ErrorIs(t, err, jobs.ErrInvalidSequenceKey)
			require.ErrorContains(t, err, tc.want)
		})
	}
	live, _ := b.Totals(t)
	require.Zero(t, live, "nothing written")

	// A sequence and a concurrency key on the same value both apply.
	id := b.enqueue(t, email, "both", jobs.Sequence("acct"), jobs.ConcurrencyKey("acct"))
	require.Equal(t, jobs.StatePending, b.state(t, id))

	// Raw SQL: a ready job out of turn is refused by the head index; one
	// inserted waiting is placed at commit; a key of the wrong type is
	// refused by the table.
	_, err := b.Pool.Exec(b.Ctx, `INSERT INTO hopper_jobs (queue, kind, payload, meta) VALUES ('mail', 'email', '{}', '{"hopper.sequence": "acct"}')`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "hopper_jobs_sequence_head_idx", pgErr.ConstraintName)
	var raw int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `INSERT INTO hopper_jobs (queue, kind, payload, meta, state) VALUES ('mail', 'email', '{}', '{"hopper.sequence": "raw"}', 'waiting') RETURNING id`).Scan(&raw))
	require.Equal(t, jobs.StatePending, b.state(t, raw), "alone in its sequence: placed as the head at commit")
	_, err = b.Pool.Exec(b.Ctx, `INSERT INTO hopper_jobs (queue, kind, payload, meta) VALUES ('mail', 'email', '{}', '{"hopper.sequence": 7}')`)
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "hopper_jobs_sequence_check", pgErr.ConstraintName)
	_, err = b.Pool.Exec(b.Ctx, `INSERT INTO hopper_jobs (queue, kind, payload, state) VALUES ('mail', 'email', '{}', 'waiting')`)
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "hopper_jobs_sequence_check", pgErr.ConstraintName, "only a job of a sequence waits")
}

type TenantPosting struct {
	Tenant  string `json:"tenant"`
	Account string `json:"account"`
	N       int    `json:"n"`
}

// Sequences by account, a key limit of 1 by tenant and fairness across
// tenants, on one queue: both rules hold at once.
var tenantPosting = jobs.MustDefine[TenantPosting]("tenant_posting", jobs.Defaults(jobs.Queue("fair")),
	jobs.SequenceBy(func(p TenantPosting) string { return p.Account }),
	jobs.KeyBy(func(p TenantPosting) string { return p.Tenant }))

func TestSequenceWithFlowControl(t *testing.T) {
	b := setup(t)
	var items []jobs.Item[TenantPosting]
	for n := range 6 {
		for _, acct := range []struct{ tenant, account string }{{"t1", "a1"}, {"t1", "a2"}, {"t2", "a3"}, {"t2", "a3"}} {
			items = append(items, jobs.Item[TenantPosting]{Payload: TenantPosting{Tenant: acct.tenant, Account: acct.account, N: n}})
		}
	}
	res, err := tenantPosting.EnqueueMany(b.Ctx, b.Pool, items)
	require.NoError(t, err)
	ids := res.Results

	accounts, tenants := newRunLog(), newRunLog()
	b.runUntil(t, worker.Config{
		Queues:      map[string]int{"fair": 8},
		FlowControl: map[string]worker.FlowControl{"fair": {KeyLimit: 1, Fair: true}},
	}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, tenantPosting, func(ctx context.Context, j *jobs.Job[TenantPosting]) error {
			accounts.start(j.Payload.Account, int(j.ID))
			tenants.start(j.Payload.Tenant, int(j.ID))
			time.Sleep(time.Millisecond)
			tenants.end(j.Payload.Tenant)
			accounts.end(j.Payload.Account)
			return nil
		}))
	}, "every posting ran", func() bool {
		live, _ := b.Totals(t)
		return live == 0
	})
	require.Empty(t, tenants.overlap, "the key limit held")
	require.Empty(t, accounts.overlap, "the sequences held")
	require.Equal(t, len(ids), accounts.total())
	for _, acct := range []string{"a1", "a2", "a3"} {
		require.IsIncreasing(t, accounts.runs(acct), acct)
	}
}

// TestSequenceEnqueueWhileHeadEnds: an enqueue that commits while the
// key's head is being acknowledged. With no job waiting, the commit locks
// the head, so it waits for the acknowledgement, then sees the head gone
// and makes its job the head. With a job waiting, it locks that job
// instead, which the acknowledgement promotes without waiting for the
// enqueue, and its job waits behind it. One head, none stranded.
func TestSequenceEnqueueWhileHeadEnds(t *testing.T) {
	for _, tc := range []struct {
		name      string
		waiting   bool // a job waits behind the head
		waitsAck  bool // the enqueue's commit waits for the acknowledgement
		lateState jobs.State
	}{
		{"head alone", false, true, jobs.StatePending},
		{"head and a waiting job", true, false, jobs.StateWaiting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			head := b.enqueue(t, email, "head", jobs.Sequence("race"))
			var next int64
			if tc.waiting {
				next = b.enqueue(t, email, "next", jobs.Sequence("race"))
			}
			ack, err := b.Pool.Begin(b.Ctx)
			require.NoError(t, err)
			defer func() { _ = ack.Rollback(b.Ctx) }()
			_, err = ack.Exec(b.Ctx, "DELETE FROM hopper_jobs WHERE id = $1", head) // as an acknowledgement does
			require.NoError(t, err)
			var ackPID int32
			require.NoError(t, ack.QueryRow(b.Ctx, "SELECT pg_backend_pid()").Scan(&ackPID))

			type enqueued struct {
				id  int64
				err error
			}
			done := make(chan enqueued, 1)
			go func() {
				res, err := email.Enqueue(b.Ctx, b.Pool, Email{To: "late"}, jobs.Sequence("race"))
				done <- enqueued{res.ID, err}
			}()
			var late enqueued
			if tc.waitsAck {
				testdb.WaitFor(t, "the enqueue's commit waits for the head's row", func() bool {
					var waiting bool
					require.NoError(t, b.Pool.QueryRow(b.Ctx,
						`SELECT count(*) > 0 FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`, ackPID).Scan(&waiting))
					return waiting
				})
				require.NoError(t, ack.Commit(b.Ctx))
				late = <-done
			} else {
				late = <-done // committed without waiting for the acknowledgement
				require.NoError(t, ack.Commit(b.Ctx))
			}
			require.NoError(t, late.err)
			if tc.waiting {
				require.Equal(t, jobs.StatePending, b.state(t, next), "the acknowledgement promoted the next job")
			}
			require.Equal(t, tc.lateState, b.state(t, late.id))
		})
	}
}

// TestSequenceSweptHeadKeepsItsPlace: a head whose lease expired (its
// worker gone) is swept back to pending, still the head, its followers
// still waiting; one on its last attempt is swept to the dead table and
// blocks its sequence.
func TestSequenceSweptHeadKeepsItsPlace(t *testing.T) {
	b := setup(t)
	head := b.enqueue(t, email, "head", jobs.Sequence("swept"))
	next := b.enqueue(t, email, "next", jobs.Sequence("swept"))
	last := b.enqueue(t, email, "last", jobs.Sequence("doomed"), jobs.MaxAttempts(1))
	behind := b.enqueue(t, email, "behind", jobs.Sequence("doomed"))
	// Claimed by a worker that vanished: the leases ran out a minute ago.
	_, err := b.Pool.Exec(b.Ctx, `UPDATE hopper_jobs SET state = 'running', attempt = attempt + 1, lease_owner = 'gone',
		lease_until = now() - interval '1 minute' WHERE id = ANY ($1)`, []int64{head, last})
	require.NoError(t, err)
	swept, err := db.New(b.Pool).Sweep(b.Ctx, db.SweepParams{MaxJobs: 100})
	require.NoError(t, err)
	require.Len(t, swept, 2)

	require.Equal(t, jobs.StatePending, b.state(t, head), "back in front")
	require.Equal(t, jobs.StateWaiting, b.state(t, next), "never ahead of its head")
	require.Equal(t, jobs.StateDead, b.state(t, last))
	require.Equal(t, jobs.StateWaiting, b.state(t, behind))
	info, err := b.client.GetSequence(b.Ctx, "doomed")
	require.NoError(t, err)
	require.NotNil(t, info.Blocked)
	require.Equal(t, last, info.Blocked.JobID)
	require.Contains(t, info.Blocked.Reason, "lease expired")
}

// TestSequenceSQLBatchesNeverDeadlock: hopper_enqueue_many takes all its
// sequence keys' locks at once, in one order: batches naming the same keys
// in opposite orders, from concurrent transactions, never deadlock.
func TestSequenceSQLBatchesNeverDeadlock(t *testing.T) {
	b := setup(t)
	batch := func(keys ...string) string {
		out := "["
		for i, k := range keys {
			if i > 0 {
				out += ","
			}
			out += fmt.Sprintf(`{"kind": "email", "payload": {}, "meta": {"hopper.sequence": %q}}`, k)
		}
		return out + "]"
	}
	orders := [][]string{{"a", "b", "c", "d"}, {"d", "c", "b", "a"}, {"b", "d", "a", "c"}}
	var wg sync.WaitGroup
	for _, keys := range orders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				tx, err := b.Pool.Begin(b.Ctx)
				if !assertNoError(t, err) {
					return
				}
				_, err = tx.Exec(b.Ctx, "SELECT count(*) FROM hopper_enqueue_many($1)", batch(keys...))
				if !assertNoError(t, err) {
					_ = tx.Rollback(b.Ctx)
					return
				}
				// Hold the locks a moment, as an application's transaction would.
				_, err = tx.Exec(b.Ctx, "SELECT pg_sleep(0.002)")
				assertNoError(t, err)
				assertNoError(t, tx.Commit(b.Ctx))
			}
		}()
	}
	wg.Wait()
	for _, k := range orders[0] {
		info, err := b.client.GetSequence(b.Ctx, k)
		require.NoError(t, err)
		require.NotZero(t, info.HeadID, k)
		require.EqualValues(t, 3*25-1, info.Waiting, k)
	}
}
