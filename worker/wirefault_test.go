package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/testbed/wirefault"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// Statement markers for the proxy: sqlc puts "-- name: X :many" at the top
// of every query. The two Extend markers both match the Extend statement;
// they differ only so that Fired counts the stall and the cuts apart.
const (
	wfAck         = "-- name: AckBatch :many"
	wfAckKeep     = "-- name: AckBatchKeep :many"
	wfNack        = "-- name: NackBatch :many"
	wfExtendStall = "-- name: Extend :many"
	wfExtendCut   = "-- name: Extend "
	wfDequeue     = "-- name: Dequeue :many"
)

// TestWireFaults cuts and stalls the connection between a worker and
// PostgreSQL at the worst moments (a statement committed, its reply lost;
// a lease extension hanging after its commit; a partition during shutdown) and
// checks the outcomes the worker reports against a ledger.
//
// The faulty worker's pool goes through a wirefault proxy. Every handler
// run writes (job_id, attempt, worker) into a ledger table through the
// test's own direct pool, which no fault touches, and ObserveOutcomes
// collects what every worker reports. After the faults a clean worker
// (direct pool, long lease, fast sweeps) runs until no job is left; then,
// for every job, with final the highest attempt in the ledger:
//   - the job is gone, and dead only if its kind is meant to die;
//   - (id, final) got exactly one report, "done" (or "dead" for a dying
//     job), or "unconfirmed": never "refused" or "unrecorded";
//   - no earlier attempt was reported "done" or "dead";
//   - every report belongs to a run in the ledger, made by the worker that
//     reported it and agreeing with what its handler returned, and no run
//     has two reports.
//
// Each scenario adds the stronger checks its setup makes exact without
// any timing assumption (see wfCheckRuns).
func TestWireFaults(t *testing.T) {
	t.Run("AckRepliesLost", func(t *testing.T) { wfAckRepliesLost(t, false) })
	t.Run("AckKeepRepliesLost", func(t *testing.T) { wfAckRepliesLost(t, true) })
	t.Run("NackRepliesLost", wfNackRepliesLost)
	t.Run("ClaimAnswerLate", wfClaimAnswerLate)
	t.Run("ExtendStalledAndCut", wfExtendStalledAndCut)
	t.Run("ShutdownDuringOutage", wfShutdownDuringOutage)
}

// wfAckRepliesLost: several AckBatch statements commit and lose their
// replies while thousands of quick jobs run. The cuts are armed one at a
// time, each once the worker settled the batch the last one hit (else the
// retry of one batch would use them all up), and with more jobs each time,
// so that each cut hits a batch of its own. The faulty worker never sweeps
// and nobody else runs meanwhile, so no one can take a job from it: every
// one of its runs must be reported exactly once, "done" or (when its lease
// may have lapsed before it looked) "unconfirmed", never "refused". With
// history kept (AckBatchKeep), the history proves every committed ack: each
// run is "done".
func wfAckRepliesLost(t *testing.T, keep bool) {
	h := newWF(t)
	quick := kind(t, "wf.quick")
	const total, cuts = 2000, 5

	p := h.proxy(t)
	kinds := wfKinds{quick: wfQuick}
	cfg := worker.Config{
		Queues:        map[string]int{"default": 16},
		LeaseDuration: time.Second, ExtendInterval: 100 * time.Millisecond,
		SweepInterval: time.Hour, // nobody takes a job away from it
	}
	marker, outcomes := wfAck, []string{string(worker.OutcomeDone), string(worker.OutcomeUnconfirmed)}
	if keep {
		cfg.KeepHistoryByQueue = map[string]time.Duration{"default": time.Hour}
		marker, outcomes = wfAckKeep, []string{string(worker.OutcomeDone)}
	}
	faulty := h.run(t, h.proxiedPool(t, p), "faulty", cfg, kinds)
	for range cuts {
		h.cutWhile(t, p, marker, func() { h.enqueue(t, quick, total/cuts) })
	}
	faulty.stop(t)

	h.drain(t, kinds)
	led := h.verify(t, nil)
	h.logFigures(t, led, p, marker)
	wfCheckRuns(t, led, "faulty", func(wfKey, string) []string { return outcomes })
}

// wfNackRepliesLost: jobs whose first attempt fails; several NackBatch
// statements commit and lose their replies (armed one at a time, as in
// wfAckRepliesLost). A few jobs run only once and die. The attempt-1 nacks
// must be reported "failed" (or "dead" for a dying job), or "unconfirmed"
// when the job already moved on, never "refused": the faulty worker never
// sweeps and nobody else runs meanwhile.
func wfNackRepliesLost(t *testing.T) {
	h := newWF(t)
	flaky := kind(t, "wf.flaky")
	doomed := kind(t, "wf.doomed")
	const total, dying, cuts = 400, 20, 5

	p := h.proxy(t)
	kinds := wfKinds{flaky: wfFlaky, doomed: wfDoomed}
	faulty := h.run(t, h.proxiedPool(t, p), "faulty", worker.Config{
		Queues:        map[string]int{"default": 16},
		LeaseDuration: time.Second, ExtendInterval: 100 * time.Millisecond,
		SweepInterval: time.Hour,
	}, kinds)
	for range cuts {
		h.cutWhile(t, p, wfNack, func() {
			h.enqueue(t, doomed, dying/cuts, jobs.MaxAttempts(1))
			h.enqueue(t, flaky, total/cuts)
		})
	}
	faulty.stop(t)

	h.drain(t, kinds)
	led := h.verify(t, map[string]bool{doomed.Name(): true})
	h.logFigures(t, led, p, wfNack)
	nackOutcomes := func(k wfKey, kindName string) []string {
		switch {
		case kindName == doomed.Name():
			return []string{string(worker.OutcomeDead), string(worker.OutcomeUnconfirmed)}
		case k.attempt == 1:
			return []string{string(worker.OutcomeFailed), string(worker.OutcomeUnconfirmed)}
		default:
			return []string{string(worker.OutcomeDone), string(worker.OutcomeUnconfirmed)}
		}
	}
	wfCheckRuns(t, led, "faulty", nackOutcomes)
	// Every job failed its first attempt, whoever ran it.
	for id := range led.kinds {
		reps := led.reports[wfKey{id, 1}]
		require.Len(t, reps, 1, "job %d: attempt 1 reported once", id)
		require.NotEqual(t, string(worker.OutcomeRefused), reps[0].outcome, "job %d: a nack whose reply was lost reported refused", id)
	}
}

// wfClaimAnswerLate: a claim commits and its answer is held back until its
// leases have run out in the database (a server or network slow beyond
// any lease). The worker must still take the answer and run those jobs:
// a claim given up on leaves its jobs leased to a worker that does not know
// them, until a sweep (here: none) takes them back. Every job runs once,
// by the faulty worker, and is reported done.
func wfClaimAnswerLate(t *testing.T) {
	h := newWF(t)
	quick := kind(t, "wf.quick")
	const total = 50
	h.enqueue(t, quick, total)

	p := h.proxy(t)
	p.StallAfterRequest(wfDequeue, 1)
	kinds := wfKinds{quick: wfQuick}
	faulty := h.run(t, h.proxiedPool(t, p), "faulty", worker.Config{
		Queues:        map[string]int{"default": 16},
		LeaseDuration: time.Second, ExtendInterval: 100 * time.Millisecond,
		SweepInterval: time.Hour, // nobody takes a job away from it
	}, kinds)
	h.waitFired(t, p, wfDequeue, 1) // the first claim committed; its answer is held
	testdb.WaitFor(t, "the held claim's leases ran out", func() bool {
		var expired int
		require.NoError(t, h.b.Pool.QueryRow(h.b.Ctx,
			"SELECT count(*) FROM hopper_jobs WHERE state = 'running' AND lease_until < now() AND lease_owner = $1",
			faulty.w.ID()).Scan(&expired))
		return expired > 0
	})
	p.Release()
	h.waitReported(t)
	faulty.stop(t)

	h.drain(t, kinds)
	led := h.verify(t, nil)
	h.logFigures(t, led, p, wfDequeue)
	wfCheckRuns(t, led, "faulty", func(wfKey, string) []string { return []string{string(worker.OutcomeDone)} })
	require.Equal(t, total, led.byWorker["faulty"][string(worker.OutcomeDone)], "every job run once, by the worker that claimed it")
}

// wfExtendStalledAndCut: lease extensions that hang after their commit (the
// reply held back until Release), extensions cut after their commit, and
// acks cut after their commit, with a 1s lease and handlers that run longer
// than it. Then a partition: the faulty worker's leases run out, the clean
// worker sweeps its jobs and runs them again, and only then does the
// network come back: the faulty worker's late results must be refused (or
// unconfirmed), never done.
func wfExtendStalledAndCut(t *testing.T) {
	h := newWF(t)
	slow := kind(t, "wf.slow")
	const total, slots = 60, 20
	h.enqueue(t, slow, total, jobs.MaxAttempts(100))

	p := h.proxy(t)
	// Two stalls, in case one Extend's client gives up before its reply
	// came: a stall counts as fired only once the reply is there.
	p.StallAfterRequest(wfExtendStall, 2)
	p.CutAfterReply(wfAck, 2)
	fpool := h.proxiedPool(t, p)
	faulty := h.run(t, fpool, "faulty", worker.Config{
		Queues:        map[string]int{"default": slots},
		LeaseDuration: time.Second, ExtendInterval: 100 * time.Millisecond,
		SweepInterval:   time.Hour, // the clean worker sweeps, later
		ShutdownTimeout: 10 * time.Second,
	}, wfKinds{slow: wfSlow(1500 * time.Millisecond)})

	h.waitFired(t, p, wfExtendStall, 1)
	p.CutAfterReply(wfExtendCut, 3)
	h.waitFired(t, p, wfExtendCut, 1)
	p.Release()
	h.waitFired(t, p, wfAck, 1)

	// Partition: nothing flows. Wait until a lease of the faulty worker
	// has run out in the database (or it holds nothing any more).
	p.Stall()
	var expired int
	testdb.WaitFor(t, "a lease of the partitioned worker ran out", func() bool {
		var held int
		require.NoError(t, h.b.Pool.QueryRow(h.b.Ctx,
			"SELECT count(*), count(*) FILTER (WHERE lease_until < now()) FROM hopper_jobs WHERE state = 'running' AND lease_owner = $1",
			faulty.w.ID()).Scan(&held, &expired))
		return expired > 0 || held == 0
	})
	clean := h.runClean(t, wfKinds{slow: wfQuick})
	testdb.WaitFor(t, "the clean worker re-ran a job taken from the faulty one", func() bool {
		return h.reportsAfterFirst("clean") > 0 || h.liveOf(t, slow.Name()) == 0
	})
	p.Unstall()
	faulty.stop(t)
	p.Release() // a second stall may have fired after the first Release

	testdb.WaitFor(t, "every job gone", func() bool { return h.live(t) == 0 })
	clean.stop(t)
	led := h.verify(t, nil)
	t.Logf("ExtendStalledAndCut: %d leases of the faulty worker had run out in the partition", expired)
	h.logFigures(t, led, p, wfExtendStall, wfExtendCut, wfAck)
}

// wfShutdownDuringOutage: the faulty worker has acked a first set of jobs
// (so its connections have AckBatch prepared), holds the handlers of a
// second set at a gate and a few handlers that run until cancelled. The
// gate opens with the next AckBatch armed to commit and hang; once it has,
// the whole network stalls and Run's context is cancelled. Run must return
// within ShutdownTimeout (checked with a generous slack:
// this bounds a hang, it does not measure speed), report every gated
// result "unconfirmed" or "unrecorded" (it can confirm nothing, though
// some of them did commit), and none for the handlers it cancelled.
func wfShutdownDuringOutage(t *testing.T) {
	h := newWF(t)
	warm := kind(t, "wf.warm")
	gated := kind(t, "wf.gated")
	block := kind(t, "wf.block")
	const warmed, held, blockers = 100, 25, 5
	// In claim order: the warm jobs first, then the rest, which all fit in
	// the worker's slots at once.
	h.enqueue(t, warm, warmed, jobs.MaxAttempts(100))
	h.enqueue(t, block, blockers, jobs.MaxAttempts(100))
	h.enqueue(t, gated, held, jobs.MaxAttempts(100))

	p := h.proxy(t)
	arrived := make(chan struct{}, held+blockers)
	gate := make(chan struct{})
	faulty := h.run(t, h.proxiedPool(t, p), "faulty", worker.Config{
		Queues:        map[string]int{"default": held + blockers},
		LeaseDuration: time.Second, ExtendInterval: 100 * time.Millisecond,
		SweepInterval:   time.Hour,
		ShutdownTimeout: 3 * time.Second,
	}, wfKinds{
		warm: wfQuick,
		gated: func(ctx context.Context, _ *jobs.Job[Task]) error {
			arrived <- struct{}{}
			select {
			case <-gate:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		},
		block: func(ctx context.Context, _ *jobs.Job[Task]) error {
			arrived <- struct{}{}
			<-ctx.Done()
			return context.Cause(ctx)
		},
	})
	for range held + blockers {
		select {
		case <-arrived:
		case <-h.b.Ctx.Done():
			require.FailNow(t, "the gated and blocking handlers did not all start")
		}
	}
	testdb.WaitFor(t, "the warm jobs acked", func() bool { return h.liveOf(t, warm.Name()) == 0 })

	p.StallAfterRequest(wfAck, 1)
	close(gate)
	h.waitFired(t, p, wfAck, 1) // an ack of gated results committed; its reply hangs
	testdb.WaitFor(t, "every gated handler finished", func() bool { return h.ledgerOf(t, gated.Name()) == held })
	p.Stall()
	began := time.Now()
	faulty.stop(t) // bounded by ShutdownTimeout + 30s
	t.Logf("ShutdownDuringOutage: Run returned %v after its context ended (bound %v + 30s slack)",
		time.Since(began).Round(time.Millisecond), faulty.shutdownBound)
	p.Release()
	p.Unstall()

	h.drain(t, wfKinds{warm: wfQuick, gated: wfQuick, block: wfQuick})
	led := h.verify(t, nil)
	h.logFigures(t, led, p, wfAck)
	wfCheckRuns(t, led, "faulty", func(_ wfKey, kindName string) []string {
		switch kindName {
		case warm.Name():
			return []string{string(worker.OutcomeDone)}
		case block.Name():
			return nil // cancelled at the deadline: its result is discarded
		default:
			return []string{string(worker.OutcomeUnconfirmed), string(worker.OutcomeUnrecorded)}
		}
	})
	require.Equal(t, warmed, led.byWorker["faulty"][string(worker.OutcomeDone)])
	require.Equal(t, held, led.byWorker["faulty"][string(worker.OutcomeUnconfirmed)]+led.byWorker["faulty"][string(worker.OutcomeUnrecorded)])
	committed := 0
	for id, k := range led.kinds {
		if k == gated.Name() && led.runs[wfKey{id, led.final[id]}] == "faulty" {
			committed++ // the faulty worker's ack took effect: it must say it cannot tell
			reps := led.reports[wfKey{id, led.final[id]}]
			require.Len(t, reps, 1)
			require.Equal(t, string(worker.OutcomeUnconfirmed), reps[0].outcome, "job %d: its ack committed, so it is never unrecorded", id)
		}
	}
	// Results never sent before the deadline are unrecorded, not unconfirmed:
	// only the held batch may have committed.
	require.Equal(t, committed, led.byWorker["faulty"][string(worker.OutcomeUnconfirmed)], "unconfirmed = the held batch")
	require.Positive(t, committed, "the held ack committed gated results")
	t.Logf("ShutdownDuringOutage: %d of %d gated results committed by the ack whose reply hung", committed, held)
}

// Handler bodies.

func wfQuick(context.Context, *jobs.Job[Task]) error { return nil }

func wfFlaky(_ context.Context, j *jobs.Job[Task]) error {
	if j.Attempt == 1 {
		return errBoom
	}
	return nil
}

func wfDoomed(context.Context, *jobs.Job[Task]) error { return errBoom }

// wfSlow works for d (longer than a lease, so it needs the lease extension),
// unless its context ends first.
func wfSlow(d time.Duration) func(context.Context, *jobs.Job[Task]) error {
	return func(ctx context.Context, _ *jobs.Job[Task]) error {
		work := time.NewTimer(d)
		defer work.Stop()
		select {
		case <-work.C:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

type wfKinds map[*jobs.Kind[Task]]func(context.Context, *jobs.Job[Task]) error

type wfKey struct {
	id      int64
	attempt int32
}

type wfReport struct {
	worker  string
	outcome string
}

// wf is one scenario's ledger and the reports of its workers.
type wf struct {
	b      *bundle
	ledger *pgxpool.Pool // direct, small: for the handlers' ledger writes

	mu        sync.Mutex
	reports   map[wfKey][]wfReport
	ledgerErr error // the first ledger write that failed
	kinds     map[int64]string

	logs testdb.Buffer // the workers' warnings, logged if the test fails
}

// wfSlots bounds how many scenarios run at once: each holds a few dozen
// connections, and the server's max_connections is shared with every
// other test running beside these.
var wfSlots = make(chan struct{}, 2)

func newWF(t *testing.T) *wf {
	b := setup(t)
	select {
	case wfSlots <- struct{}{}:
		t.Cleanup(func() { <-wfSlots })
	case <-b.Ctx.Done():
		require.FailNow(t, "no slot for the scenario")
	}
	_, err := b.Pool.Exec(b.Ctx, `CREATE TABLE wf_ledger (
		job_id  bigint  NOT NULL,
		attempt integer NOT NULL,
		worker  text    NOT NULL,
		ok      boolean NOT NULL,
		PRIMARY KEY (job_id, attempt))`)
	require.NoError(t, err)
	cfg, err := pgxpool.ParseConfig(b.URL)
	require.NoError(t, err)
	cfg.MaxConns = 4
	ledger, err := pgxpool.NewWithConfig(b.Ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(ledger.Close)
	h := &wf{b: b, ledger: ledger, reports: map[wfKey][]wfReport{}, kinds: map[int64]string{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the workers' warnings:\n%s", h.logs.String())
		}
	})
	return h
}

// enqueue adds n jobs of k and records their ids and kind: in the same
// transaction, before any worker can take them (COPY does not return ids).
// The test is the only one enqueueing, so the new ids are those above the
// highest known.
func (h *wf) enqueue(t *testing.T, k *jobs.Kind[Task], n int, opts ...jobs.EnqueueOption) {
	t.Helper()
	var known int64
	for id := range h.kinds {
		known = max(known, id)
	}
	tx, err := h.b.Pool.Begin(h.b.Ctx)
	require.NoError(t, err)
	defer tx.Rollback(h.b.Ctx) //nolint:errcheck
	_, err = k.EnqueueMany(h.b.Ctx, tx, jobs.Items(make([]Task, n)...), opts...)
	require.NoError(t, err)
	rows, err := tx.Query(h.b.Ctx, "SELECT id FROM hopper_jobs WHERE id > $1", known)
	require.NoError(t, err)
	added := 0
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		h.kinds[id] = k.Name()
		added++
	}
	rows.Close()
	require.NoError(t, rows.Err())
	require.Equal(t, n, added)
	require.NoError(t, tx.Commit(h.b.Ctx))
}

// cutWhile arms a cut of the reply of the next statement marked marker,
// runs enqueue (so that such a statement comes), waits for the cut, then
// for the first attempt of every job enqueued so far to be reported: the
// batch the cut hit is settled, so the next cut hits another batch, not
// the retry of this one.
func (h *wf) cutWhile(t *testing.T, p *wirefault.Proxy, marker string, enqueue func()) {
	t.Helper()
	target := p.Fired(marker) + 1
	p.CutAfterReply(marker, 1)
	enqueue()
	h.waitFired(t, p, marker, target)
	h.waitReported(t)
}

// waitReported waits for the first attempt of every job enqueued so far to
// be reported.
func (h *wf) waitReported(t *testing.T) {
	t.Helper()
	defer func() {
		if t.Failed() {
			h.logUnreported(t)
		}
	}()
	testdb.WaitFor(t, "every first attempt so far reported", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		for id := range h.kinds {
			if len(h.reports[wfKey{id, 1}]) == 0 {
				return false
			}
		}
		return true
	})
}

// logUnreported logs, for a stuck test, what the database and the ledger
// say of up to ten jobs whose first attempt has no report yet.
func (h *wf) logUnreported(t *testing.T) {
	h.mu.Lock()
	var ids []int64
	for id := range h.kinds {
		if len(h.reports[wfKey{id, 1}]) == 0 && len(ids) < 10 {
			ids = append(ids, id)
		}
	}
	h.mu.Unlock()
	for _, id := range ids {
		var state, owner string
		var attempt int32
		var runs int
		var expired bool
		err := h.b.Pool.QueryRow(h.b.Ctx, `SELECT j.state, j.attempt, coalesce(j.lease_owner, ''),
			coalesce(j.lease_until < now(), false),
			(SELECT count(*) FROM wf_ledger WHERE job_id = j.id)
			FROM hopper_all_jobs AS j WHERE j.id = $1`, id).Scan(&state, &attempt, &owner, &expired, &runs)
		t.Logf("unreported job %d: state=%s attempt=%d lease_owner=%q lease_expired=%v ledger_runs=%d err=%v",
			id, state, attempt, owner, expired, runs, err)
	}
}

// proxy starts a proxy to the server the test's pool reaches. Over a Unix
// socket (the libpq default) it proxies to 127.0.0.1 on the socket's port,
// and skips unless that reaches the same server.
func (h *wf) proxy(t *testing.T) *wirefault.Proxy {
	t.Helper()
	conn, err := h.b.Pool.Acquire(h.b.Ctx)
	require.NoError(t, err)
	addr := conn.Conn().PgConn().Conn().RemoteAddr()
	upstream := addr.String()
	if addr.Network() != "tcp" {
		upstream = net.JoinHostPort("127.0.0.1", strconv.Itoa(int(conn.Conn().Config().Port)))
	}
	conn.Release()
	p := wirefault.Start(t, upstream)
	ctx, cancel := context.WithTimeout(h.b.Ctx, 30*time.Second)
	defer cancel()
	pc, err := pgx.Connect(ctx, p.URL(h.b.URL))
	if err != nil {
		t.Skipf("PostgreSQL not reachable over TCP at %s for the proxy: %v", upstream, err)
	}
	defer pc.Close(ctx)
	var same bool
	require.NoError(t, pc.QueryRow(ctx, "SELECT to_regclass('wf_ledger') IS NOT NULL").Scan(&same))
	if !same {
		t.Skipf("%s is not the server of the test's pool", upstream)
	}
	return p
}

// proxiedPool connects to the test's schema (its search_path kept) through p.
func (h *wf) proxiedPool(t *testing.T, p *wirefault.Proxy) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(p.URL(h.b.URL))
	require.NoError(t, err)
	cfg.MaxConns = 6
	pool, err := pgxpool.NewWithConfig(h.b.Ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close) // after the worker stopped, before the proxy closes
	return pool
}

// handler runs body, then writes the run into the ledger through a direct
// pool, whatever body returned.
func (h *wf) handler(name string, body func(context.Context, *jobs.Job[Task]) error) func(context.Context, *jobs.Job[Task]) error {
	return func(ctx context.Context, j *jobs.Job[Task]) error {
		err := body(ctx, j)
		if lerr := h.record(j, name, err == nil); lerr != nil {
			h.mu.Lock()
			if h.ledgerErr == nil {
				h.ledgerErr = fmt.Errorf("ledger: job %d attempt %d by %s: %w", j.ID, j.Attempt, name, lerr)
			}
			h.mu.Unlock()
			return lerr
		}
		return err
	}
}

// record writes one run into the ledger. Getting a connection is retried
// (the server may be out of connection slots for a moment, with other
// tests running): a failed connect wrote nothing. The insert itself is
// not: its primary key would turn a second try into a false duplicate.
func (h *wf) record(j *jobs.Job[Task], name string, ok bool) error {
	var conn *pgxpool.Conn
	for {
		var err error
		conn, err = h.ledger.Acquire(h.b.Ctx)
		if err == nil {
			break
		}
		pause := time.NewTimer(20 * time.Millisecond)
		select {
		case <-h.b.Ctx.Done():
			pause.Stop()
			return err
		case <-pause.C:
		}
	}
	defer conn.Release()
	_, err := conn.Exec(h.b.Ctx, "INSERT INTO wf_ledger (job_id, attempt, worker, ok) VALUES ($1, $2, $3, $4)",
		j.ID, j.Attempt, name, ok)
	return err
}

// wfRunner is a worker's Run in a goroutine of its own.
type wfRunner struct {
	w             *worker.Worker
	cancel        context.CancelFunc
	errc          chan error
	shutdownBound time.Duration // ShutdownTimeout
	once          sync.Once
	err           error
}

// run starts a worker on pool whose handlers write the ledger and whose
// reports are collected under name.
func (h *wf) run(t *testing.T, pool *pgxpool.Pool, name string, cfg worker.Config, kinds wfKinds) *wfRunner {
	t.Helper()
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	cfg.Logger = slog.New(slog.NewTextHandler(&h.logs, &slog.HandlerOptions{Level: slog.LevelWarn})).With("runner", name)
	w, err := worker.New(pool, fast(cfg))
	require.NoError(t, err)
	for k, body := range kinds {
		require.NoError(t, worker.Handle(w, k, h.handler(name, body)))
	}
	worker.ObserveOutcomes(w, func(id int64, attempt int32, outcome string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		key := wfKey{id, attempt}
		h.reports[key] = append(h.reports[key], wfReport{name, outcome})
	})
	ctx, cancel := context.WithCancel(h.b.Ctx)
	r := &wfRunner{w: w, cancel: cancel, errc: make(chan error, 1), shutdownBound: cfg.ShutdownTimeout}
	go func() {
		defer func() {
			if v := recover(); v != nil {
				r.errc <- fmt.Errorf("%s: Run panicked: %v", name, v)
			}
		}()
		r.errc <- w.Run(ctx)
	}()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels Run and requires it to return nil within ShutdownTimeout
// plus 30s of slack: a bound on a hang, not a measure of
// speed.
func (r *wfRunner) stop(t *testing.T) {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		limit := time.NewTimer(r.shutdownBound + 30*time.Second)
		defer limit.Stop()
		select {
		case r.err = <-r.errc:
		case <-limit.C:
			r.err = fmt.Errorf("Run did not return within %v + 30s of its context ending", r.shutdownBound)
		}
	})
	require.NoError(t, r.err)
}

// runClean starts the clean worker: the direct pool, a lease far longer
// than the test (its own jobs are never taken from it) and fast sweeps (the
// faulty worker's jobs come back soon after their 1s leases run out). It
// also enqueues a sentinel job for it, so that waiting for every job to be
// gone also waits for it to have started (stopped while starting, Run
// would return the context's error).
func (h *wf) runClean(t *testing.T, kinds wfKinds) *wfRunner {
	t.Helper()
	sentinel := kind(t, "wf.sentinel")
	res, err := sentinel.Enqueue(h.b.Ctx, h.b.Pool, Task{})
	require.NoError(t, err)
	h.kinds[res.ID] = sentinel.Name()
	withSentinel := wfKinds{sentinel: wfQuick}
	for k, body := range kinds {
		withSentinel[k] = body
	}
	return h.run(t, h.b.Pool, "clean", worker.Config{
		Queues:        map[string]int{"default": 16},
		LeaseDuration: 30 * time.Second, SweepInterval: 100 * time.Millisecond,
	}, withSentinel)
}

// drain runs the clean worker until no job is left, and stops it.
func (h *wf) drain(t *testing.T, kinds wfKinds) {
	t.Helper()
	clean := h.runClean(t, kinds)
	testdb.WaitFor(t, "every job gone", func() bool { return h.live(t) == 0 })
	clean.stop(t)
}

func (h *wf) waitFired(t *testing.T, p *wirefault.Proxy, marker string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(h.b.Ctx, time.Minute)
	defer cancel()
	require.NoError(t, p.WaitFired(ctx, marker, n))
}

func (h *wf) live(t *testing.T) int {
	var n int
	require.NoError(t, h.b.Pool.QueryRow(h.b.Ctx, "SELECT count(*) FROM hopper_jobs").Scan(&n))
	return n
}

// liveOf counts the live jobs of one kind.
func (h *wf) liveOf(t *testing.T, kindName string) int {
	var n int
	require.NoError(t, h.b.Pool.QueryRow(h.b.Ctx, "SELECT count(*) FROM hopper_jobs WHERE kind = $1", kindName).Scan(&n))
	return n
}

// ledgerOf counts the runs of the jobs of one kind.
func (h *wf) ledgerOf(t *testing.T, kindName string) int {
	ids := []int64{}
	for id, k := range h.kinds {
		if k == kindName {
			ids = append(ids, id)
		}
	}
	var n int
	require.NoError(t, h.b.Pool.QueryRow(h.b.Ctx, "SELECT count(*) FROM wf_ledger WHERE job_id = ANY($1)", ids).Scan(&n))
	return n
}

// reportsAfterFirst counts the reports by the named worker on attempts
// after the first.
func (h *wf) reportsAfterFirst(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for k, reps := range h.reports {
		for _, r := range reps {
			if r.worker == name && k.attempt > 1 {
				n++
			}
		}
	}
	return n
}

// wfLedger is what the verdict is taken from.
type wfLedger struct {
	kinds    map[int64]string // every job enqueued, and its kind
	runs     map[wfKey]string // each handler run: the worker that made it
	final    map[int64]int32  // the highest attempt run, per job
	reports  map[wfKey][]wfReport
	byWorker map[string]map[string]int // reports per worker and outcome
	dead     int
}

// verify checks the verdict every scenario shares (see TestWireFaults)
// and returns the ledger for the scenario's own checks. dying names the
// kinds whose jobs must end dead instead of done.
func (h *wf) verify(t *testing.T, dying map[string]bool) *wfLedger {
	t.Helper()
	h.mu.Lock()
	ledgerErr := h.ledgerErr
	led := &wfLedger{kinds: h.kinds, runs: map[wfKey]string{}, final: map[int64]int32{},
		reports: make(map[wfKey][]wfReport, len(h.reports)), byWorker: map[string]map[string]int{}}
	for k, reps := range h.reports {
		led.reports[k] = append([]wfReport(nil), reps...)
		for _, r := range reps {
			if led.byWorker[r.worker] == nil {
				led.byWorker[r.worker] = map[string]int{}
			}
			led.byWorker[r.worker][r.outcome]++
		}
	}
	h.mu.Unlock()
	require.NoError(t, ledgerErr)
	require.NotEmpty(t, led.kinds)
	require.Zero(t, h.live(t), "every job gone from hopper_jobs")

	succeeded := map[wfKey]bool{}
	rows, err := h.b.Pool.Query(h.b.Ctx, "SELECT job_id, attempt, worker, ok FROM wf_ledger")
	require.NoError(t, err)
	for rows.Next() {
		var k wfKey
		var name string
		var ok bool
		require.NoError(t, rows.Scan(&k.id, &k.attempt, &name, &ok))
		led.runs[k] = name
		succeeded[k] = ok
		led.final[k.id] = max(led.final[k.id], k.attempt)
	}
	rows.Close()
	require.NoError(t, rows.Err())

	dead := map[int64]bool{}
	rows, err = h.b.Pool.Query(h.b.Ctx, "SELECT id FROM hopper_dead_jobs")
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		dead[id] = true
	}
	rows.Close()
	require.NoError(t, rows.Err())
	led.dead = len(dead)

	for id, kindName := range led.kinds {
		dies := dying[kindName]
		require.Equal(t, dies, dead[id], "job %d (%s): dead only if its kind dies", id, kindName)
		final, ran := led.final[id]
		require.True(t, ran, "job %d (%s) finished without a run in the ledger", id, kindName)
		want := string(worker.OutcomeDone)
		if dies {
			want = string(worker.OutcomeDead)
		}
		reps := led.reports[wfKey{id, final}]
		require.Len(t, reps, 1, "job %d: its final attempt %d reported exactly once: %v", id, final, reps)
		require.Contains(t, []string{want, string(worker.OutcomeUnconfirmed)}, reps[0].outcome,
			"job %d: its final attempt %d, which took effect, reported %q", id, final, reps[0].outcome)
		for a := int32(1); a < final; a++ {
			for _, r := range led.reports[wfKey{id, a}] {
				require.NotContains(t, []string{string(worker.OutcomeDone), string(worker.OutcomeDead)}, r.outcome,
					"job %d: attempt %d reported %q by %s, but attempt %d ran after it", id, a, r.outcome, r.worker, final)
			}
		}
	}
	for k, reps := range led.reports {
		_, ours := led.kinds[k.id]
		require.True(t, ours, "report for unknown job %d", k.id)
		name, ran := led.runs[k]
		require.True(t, ran, "job %d attempt %d reported %v without a run in the ledger", k.id, k.attempt, reps)
		require.Len(t, reps, 1, "job %d attempt %d reported more than once: %v", k.id, k.attempt, reps)
		require.Equal(t, name, reps[0].worker, "job %d attempt %d reported by another worker than the one that ran it", k.id, k.attempt)
		switch reps[0].outcome {
		case string(worker.OutcomeDone):
			require.True(t, succeeded[k], "job %d attempt %d reported done, but its handler failed", k.id, k.attempt)
		case string(worker.OutcomeFailed), string(worker.OutcomeDead):
			require.False(t, succeeded[k], "job %d attempt %d reported %s, but its handler succeeded", k.id, k.attempt, reps[0].outcome)
		}
	}
	// The clean worker works on a healthy connection with a lease nobody
	// can outlast: each of its runs is recorded exactly, and at once.
	wfCheckRuns(t, led, "clean", func(wfKey, string) []string {
		return []string{string(worker.OutcomeDone), string(worker.OutcomeFailed), string(worker.OutcomeDead)}
	})
	return led
}

// wfCheckRuns requires every run of the named worker to have exactly one
// report, among allowed(run, kind); none when allowed returns nil.
func wfCheckRuns(t *testing.T, led *wfLedger, name string, allowed func(k wfKey, kindName string) []string) {
	t.Helper()
	for k, ranBy := range led.runs {
		if ranBy != name {
			continue
		}
		want := allowed(k, led.kinds[k.id])
		reps := led.reports[k]
		if want == nil {
			require.Empty(t, reps, "%s: job %d attempt %d must not be reported", name, k.id, k.attempt)
			continue
		}
		require.Len(t, reps, 1, "%s: job %d attempt %d reported exactly once", name, k.id, k.attempt)
		require.Contains(t, want, reps[0].outcome, "%s: job %d attempt %d", name, k.id, k.attempt)
	}
}

// logFigures prints the ledger figures of the scenario.
func (h *wf) logFigures(t *testing.T, led *wfLedger, p *wirefault.Proxy, markers ...string) {
	t.Helper()
	total := map[string]int{}
	for _, byOutcome := range led.byWorker {
		for o, n := range byOutcome {
			total[o] += n
		}
	}
	var fired []string
	for _, m := range markers {
		fired = append(fired, fmt.Sprintf("%q=%d", strings.TrimPrefix(m, "-- name: "), p.Fired(m)))
	}
	names := make([]string, 0, len(led.byWorker))
	for name := range led.byWorker {
		names = append(names, name)
	}
	sort.Strings(names)
	var per []string
	for _, name := range names {
		per = append(per, fmt.Sprintf("%s %v", name, led.byWorker[name]))
	}
	retried := 0
	for _, final := range led.final {
		if final > 1 {
			retried++
		}
	}
	t.Logf("%s: jobs=%d runs=%d (jobs run more than once: %d) dead=%d cuts/stalls fired [%s]; done=%d failed=%d dead=%d refused=%d unconfirmed=%d unrecorded=%d; by worker: %s",
		t.Name(), len(led.kinds), len(led.runs), retried, led.dead, strings.Join(fired, " "),
		total[string(worker.OutcomeDone)], total[string(worker.OutcomeFailed)], total[string(worker.OutcomeDead)], total[string(worker.OutcomeRefused)],
		total[string(worker.OutcomeUnconfirmed)], total[string(worker.OutcomeUnrecorded)], strings.Join(per, "; "))
}

// TestAckTxUnconfirmedWhenItsFateCannotBeRead: a handler commits its
// AckTx (on a connection of its own), then ignores its context until it
// is abandoned; when it returns at last, the worker has lost the
// database, so whether the AckTx committed cannot be read. The outcome
// is "unconfirmed", never "abandoned" or "released", which would say the
// job runs again: it does not, its AckTx committed.
func TestAckTxUnconfirmedWhenItsFateCannotBeRead(t *testing.T) {
	h := newWF(t)
	p := h.proxy(t)
	pool := h.proxiedPool(t, p)
	k := kind(t, "acktx_unreadable")
	res, err := k.Enqueue(h.b.Ctx, h.b.Pool, Task{})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	unstick := make(chan struct{})
	w, err := worker.New(pool, fast(worker.Config{ExtendInterval: 20 * time.Millisecond, AbandonAfter: 50 * time.Millisecond,
		Registerer: reg, Logger: quiet}))
	require.NoError(t, err)
	seen := observe(w)
	require.NoError(t, worker.Handle(w, k, ackThenStick(h.ledger, unstick), worker.Timeout(time.Second))) // AckTx on a direct pool: no fault touches it
	ctx, cancel := context.WithCancel(h.b.Ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()

	testdb.WaitFor(t, "the handler abandoned", func() bool { return metricValue(t, reg, `hopper_job_outcomes_total{outcome="abandoned"}`) == 1 })
	p.Refuse(true)
	p.CutAll()
	close(unstick)
	testdb.WaitFor(t, "the outcome reported", func() bool { return len(seen.of(res.ID, 1)) > 0 })
	require.Equal(t, []string{string(worker.OutcomeUnconfirmed)}, seen.of(res.ID, 1))

	p.Refuse(false)
	cancel()
	require.NoError(t, <-errc)
	var n int
	require.NoError(t, h.b.Pool.QueryRow(h.b.Ctx, `SELECT count(*) FROM hopper_all_jobs WHERE id = $1`, res.ID).Scan(&n))
	require.Zero(t, n, "the AckTx committed: the job is done and runs no more")
}
