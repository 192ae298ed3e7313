package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
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
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// Sequences under worker crashes: three worker processes run many
// sequences while one of them is SIGKILLed every ~2s and restarted. The
// jobs fail and retry, snooze, and some die (Permanent or Cancel) under
// either policy; the test, as the operator, skips or retries every blocked
// sequence. The verdict comes from the tables the handlers write: every
// run as it starts and ends (seqchaos_runs, committed at once), every
// completion in the acknowledging transaction (seqchaos_ledger, with
// worker.AckTx), every outcome the worker reports (seqchaos_outcomes), and
// the time of every kill (seqchaos_kills).

const seqChaosEnv = "HOPPER_SEQCHAOS_WORKER_URL"

// SeqStep is a job of the sequence chaos test: its place in its sequence
// and what its handler does.
type SeqStep struct {
	Key string `json:"key"`
	Pos int    `json:"pos"`
	// WorkMs: how long each run works before it does what follows: long
	// enough that kills land on running handlers, and that a second run
	// of the key would overlap this one, were it allowed.
	WorkMs int `json:"work_ms"`
	// Fails: the first Fails runs that get past the snooze return an error.
	Fails int `json:"fails,omitempty"`
	// SnoozeMs: the first run snoozes this long.
	SnoozeMs int `json:"snooze_ms,omitempty"`
	// Die: "dead" (worker.Permanent) or "cancelled" (worker.Cancel) on
	// every run, until the operator retries the job (seqchaos_revived).
	Die string `json:"die,omitempty"`
}

var seqChaosStep = jobs.MustDefine[SeqStep]("seqchaos.step")

// runSeqChaosWorker is the worker process: the test binary run again with
// seqChaosEnv set (TestMain).
func runSeqChaosWorker() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv(seqChaosEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer pool.Close()
	proc := os.Getenv("HOPPER_SEQCHAOS_PROC") // this process: its ID and its restart
	log := quietLog
	if os.Getenv("HOPPER_SEQCHAOS_VERBOSE") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("proc", proc)
	}
	cfg := worker.Config{
		ID:     os.Getenv("HOPPER_SEQCHAOS_ID"),
		Queues: map[string]int{jobs.DefaultQueue: 16},
		// The lease outlasts the stale window of three 1s beats: a killed
		// worker's jobs come back through the registry, and a live one
		// under load keeps its own.
		LeaseDuration:   10 * time.Second,
		PollInterval:    100 * time.Millisecond,
		SweepInterval:   200 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second,
		RetryBackoff:    worker.Backoff{Base: 10 * time.Millisecond, Max: 100 * time.Millisecond},
		Logger:          log,
	}
	cfg.OnOutcome = []worker.OutcomeHook{func(job *jobs.Row, o worker.Outcome, _ error) {
		_, _ = pool.Exec(context.WithoutCancel(ctx), "INSERT INTO seqchaos_outcomes (job_id, attempt, outcome) VALUES ($1, $2, $3)",
			job.ID, job.Attempt, string(o))
	}}
	w, err := worker.New(pool, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	err = worker.Handle(w, seqChaosStep, func(ctx context.Context, job *jobs.Job[SeqStep]) error {
		return seqChaosHandle(ctx, pool, proc, job)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	if err := w.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	return 0
}

// seqChaosHandle runs one step: it records its start, does what the
// job's plan says for this run, and records its end (after its ack has
// committed, for a completion: the ledger's finished_at is the end that
// counts then).
func seqChaosHandle(ctx context.Context, pool *pgxpool.Pool, proc string, job *jobs.Job[SeqStep]) (err error) {
	p := job.Payload
	var run int64
	var started time.Time
	if err := pool.QueryRow(ctx, "INSERT INTO seqchaos_runs (seq_key, job_id, attempt, proc) VALUES ($1, $2, $3, $4) RETURNING id, started_at",
		p.Key, job.ID, job.Attempt, proc).Scan(&run, &started); err != nil {
		return err
	}
	outcome := "error"
	defer func() {
		lost := errors.Is(context.Cause(ctx), worker.ErrLeaseLost)
		_, _ = pool.Exec(context.WithoutCancel(ctx), "UPDATE seqchaos_runs SET ended_at = clock_timestamp(), outcome = $2, lost = $3 WHERE id = $1",
			run, outcome, lost)
	}()
	time.Sleep(time.Duration(p.WorkMs) * time.Millisecond)
	var snoozed, failed int
	var revived bool
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE outcome = 'snooze'), count(*) FILTER (WHERE outcome = 'fail'),
		EXISTS (SELECT FROM seqchaos_revived WHERE job_id = $1) FROM seqchaos_runs WHERE job_id = $1`, job.ID).Scan(&snoozed, &failed, &revived); err != nil {
		return err
	}
	switch {
	case p.SnoozeMs > 0 && snoozed == 0:
		outcome = "snooze"
		return worker.Snooze(time.Duration(p.SnoozeMs) * time.Millisecond)
	case failed < p.Fails:
		outcome = "fail"
		return fmt.Errorf("planned failure %d of %d", failed+1, p.Fails)
	case p.Die == "cancelled" && !revived:
		outcome = p.Die
		return worker.Cancel(errors.New("planned cancel"))
	case p.Die != "" && !revived:
		outcome = p.Die
		return worker.Permanent(errors.New("planned death"))
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, "INSERT INTO seqchaos_ledger (seq_key, job_id, attempt, proc, started_at) VALUES ($1, $2, $3, $4, $5)",
		p.Key, job.ID, job.Attempt, proc, started); err != nil {
		return err
	}
	if err := worker.AckTx(ctx, tx, job); err != nil {
		if errors.Is(err, worker.ErrLeaseLost) {
			outcome = "refused"
		}
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		outcome = "commit failed"
		return err
	}
	outcome = "ok"
	return nil
}

// seqPlan is what the test made of one sequence.
type seqPlan struct {
	key    string
	policy jobs.SequencePolicy
	steps  []SeqStep
	ids    []int64 // by position, once enqueued
	// retry, by the position of a job that dies: whether the operator
	// retries it (else it skips it) when it blocks the sequence.
	retry map[int]bool
}

func planSequences(rng *rand.Rand, keys, perKey int) []*seqPlan {
	plans := make([]*seqPlan, keys)
	for k := range plans {
		p := &seqPlan{key: fmt.Sprintf("seq-%03d", k), policy: jobs.SequenceBlock, retry: map[int]bool{}}
		if rng.IntN(2) == 0 {
			p.policy = jobs.SequenceContinue
		}
		for pos := range perKey {
			s := SeqStep{Key: p.key, Pos: pos, WorkMs: 20 + rng.IntN(280)}
			switch r := rng.IntN(100); {
			case r < 5:
				s.Fails = 2
			case r < 15:
				s.Fails = 1
			}
			if rng.IntN(100) < 10 {
				s.SnoozeMs = 20 + rng.IntN(130)
			}
			p.steps = append(p.steps, s)
		}
		// None, one or two jobs that die, a quarter of them cancelled.
		deaths := []int{0, 1, 1, 2}[rng.IntN(4)]
		for _, pos := range rng.Perm(perKey)[:deaths] {
			p.steps[pos].Die = string(jobs.StateDead)
			if rng.IntN(4) == 0 {
				p.steps[pos].Die = string(jobs.StateCancelled)
			}
			p.retry[pos] = rng.IntN(2) == 0
		}
		plans[k] = p
	}
	return plans
}

// seqChaosBed is the test's database, worker processes and plan.
type seqChaosBed struct {
	*processBed
	url    string
	client *hopper.Client
	plans  []*seqPlan
	byKey  map[string]*seqPlan
	byID   map[int64]*seqPlan
	posOf  map[int64]int
	// gen counts each worker's restarts: a run names its process.
	gen      map[string]int
	enqueued int // positions enqueued
	// What the operator saw and did.
	blocks, skips, retries int
	blocked                map[int64]bool
}

func newSeqChaosBed(t *testing.T, limit time.Duration, plans []*seqPlan) *seqChaosBed {
	t.Helper()
	pb := newProcessBed(t, limit,
		"CREATE TABLE seqchaos_runs (id bigserial PRIMARY KEY, seq_key text NOT NULL, job_id bigint NOT NULL, attempt int NOT NULL, proc text NOT NULL, started_at timestamptz NOT NULL DEFAULT clock_timestamp(), ended_at timestamptz, outcome text, lost boolean NOT NULL DEFAULT false)",
		"CREATE INDEX ON seqchaos_runs (job_id)",
		"CREATE INDEX ON seqchaos_runs (seq_key, job_id)",
		"CREATE TABLE seqchaos_ledger (seq_key text NOT NULL, job_id bigint NOT NULL, attempt int NOT NULL, proc text NOT NULL, started_at timestamptz NOT NULL, finished_at timestamptz NOT NULL DEFAULT clock_timestamp())",
		"CREATE INDEX ON seqchaos_ledger (seq_key, job_id)",
		"CREATE TABLE seqchaos_outcomes (job_id bigint NOT NULL, attempt int NOT NULL, outcome text NOT NULL)",
		"CREATE TABLE seqchaos_kills (proc text PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp())",
		"CREATE TABLE seqchaos_revived (job_id bigint PRIMARY KEY)")
	url := pb.db.URL
	if strings.Contains(url, "://") {
		url += "&pool_max_conns=24&application_name=" + pb.db.Schema
	} else {
		url += " pool_max_conns=24 application_name=" + pb.db.Schema
	}
	b := &seqChaosBed{processBed: pb, url: url, client: hopper.NewClient(pb.db.Pool), plans: plans,
		byKey: map[string]*seqPlan{}, byID: map[int64]*seqPlan{}, posOf: map[int64]int{}, gen: map[string]int{}, blocked: map[int64]bool{}}
	for _, p := range plans {
		b.byKey[p.key] = p
	}
	pb.explain = func() string {
		return fmt.Sprintf("positions enqueued %d, live jobs by state %s, blocks %d, ledger %d, dead %d",
			b.enqueued, b.liveByState(), b.count("SELECT count(*) FROM hopper_sequence_blocks"),
			b.count("SELECT count(*) FROM seqchaos_ledger"), b.count("SELECT count(*) FROM hopper_dead_jobs"))
	}
	return b
}

func (b *seqChaosBed) liveByState() string {
	var s string
	err := b.db.Pool.QueryRow(b.ctx, "SELECT coalesce(string_agg(state || ' ' || n, ', ' ORDER BY state), 'none') FROM (SELECT state, count(*) AS n FROM hopper_jobs GROUP BY state) s").Scan(&s)
	if err != nil {
		return err.Error()
	}
	return s
}

func (b *seqChaosBed) start(id string) {
	b.t.Helper()
	b.spawn(id, seqChaosEnv+"="+b.url, "HOPPER_SEQCHAOS_ID="+id, fmt.Sprintf("HOPPER_SEQCHAOS_PROC=%s.%d", id, b.gen[id]))
}

// kill SIGKILLs worker id, records when (by the database's clock, which
// stamps the runs: every statement the process sent is behind it), and
// starts it again.
func (b *seqChaosBed) kill(id string) {
	b.t.Helper()
	b.stop(id, syscall.SIGKILL)
	_, err := b.db.Pool.Exec(b.ctx, "INSERT INTO seqchaos_kills (proc) VALUES ($1)", fmt.Sprintf("%s.%d", id, b.gen[id]))
	require.NoError(b.t, err)
	b.gen[id]++
	b.start(id)
}

// enqueueNext enqueues the next position of every sequence, in one
// transaction (one batch takes every key's lock at once), in key order.
func (b *seqChaosBed) enqueueNext() {
	b.t.Helper()
	pos := b.enqueued
	items := make([]jobs.Item[SeqStep], len(b.plans))
	for i, p := range b.plans {
		items[i] = jobs.Item[SeqStep]{Payload: p.steps[pos], Options: []jobs.EnqueueOption{
			jobs.Sequence(p.key), jobs.SequenceOnDead(p.policy),
			// Every kill charges an attempt: only the planned deaths die.
			jobs.MaxAttempts(1000),
		}}
	}
	res, err := seqChaosStep.EnqueueMany(b.ctx, b.db.Pool, items)
	require.NoError(b.t, err)
	require.Equal(b.t, len(items), res.Inserted)
	for i, p := range b.plans {
		id := res.Results[i].ID
		if pos > 0 {
			require.Greater(b.t, id, p.ids[pos-1], "%s: ids follow enqueue order", p.key)
		}
		p.ids = append(p.ids, id)
		b.byID[id] = p
		b.posOf[id] = pos
	}
	b.enqueued++
}

// operate plays the operator: every blocked sequence is checked against
// the plan (blocked by the job the test made die, under the block policy,
// with nothing after it run) and then skipped or retried as planned.
func (b *seqChaosBed) operate() {
	b.t.Helper()
	t := b.t
	var blocked []hopper.BlockedSequence
	for page := (hopper.SequencePage{Limit: 1000}); ; {
		got, err := b.client.ListBlockedSequences(b.ctx, page)
		require.NoError(t, err)
		blocked = append(blocked, got...)
		if len(got) < page.Limit {
			break
		}
		page.After = got[len(got)-1].Key
	}
	for _, bl := range blocked {
		p := b.byKey[bl.Key]
		require.NotNil(t, p, "blocked sequence %q is none of the test's", bl.Key)
		pos, ok := b.posOf[bl.JobID]
		require.True(t, ok && b.byID[bl.JobID] == p, "%s is blocked by job %d, not one of its own", bl.Key, bl.JobID)
		step := p.steps[pos]
		require.Equal(t, jobs.SequenceBlock, p.policy, "%s: blocked by job %d (position %d) under the continue policy (%s: %s)", bl.Key, bl.JobID, pos, bl.State, bl.Reason)
		require.NotEmpty(t, step.Die, "%s: blocked by job %d (position %d), which the test did not make die (%s: %s)", bl.Key, bl.JobID, pos, bl.State, bl.Reason)
		require.EqualValues(t, step.Die, bl.State, "%s: job %d", bl.Key, bl.JobID)
		require.False(t, b.blocked[bl.JobID], "%s: job %d blocked its sequence a second time", bl.Key, bl.JobID)
		b.blocked[bl.JobID] = true
		b.blocks++

		// Nothing after it has run, and nothing before it is left.
		require.Zero(t, b.count("SELECT count(*) FROM seqchaos_runs WHERE seq_key = $1 AND job_id > $2", bl.Key, bl.JobID),
			"%s: a job behind the dead job %d ran while it blocked the sequence", bl.Key, bl.JobID)
		require.Zero(t, b.count("SELECT count(*) FROM seqchaos_ledger WHERE seq_key = $1 AND job_id > $2", bl.Key, bl.JobID),
			"%s: a job behind the dead job %d completed", bl.Key, bl.JobID)
		require.Zero(t, b.count("SELECT count(*) FROM hopper_jobs WHERE meta ->> 'hopper.sequence' = $1 AND (id < $2 OR state <> 'waiting')", bl.Key, bl.JobID),
			"%s: blocked by %d, yet a job before it is live or one behind it is not waiting", bl.Key, bl.JobID)
		require.EqualValues(t, 1, b.count("SELECT count(*) FROM hopper_dead_jobs WHERE id = $1 AND state = $2", bl.JobID, step.Die),
			"%s: the blocking job %d is in the dead table", bl.Key, bl.JobID)
		waiting := b.count("SELECT count(*) FROM hopper_jobs WHERE meta ->> 'hopper.sequence' = $1", bl.Key)
		require.EqualValues(t, waiting, bl.Waiting, "%s: jobs waiting behind the block", bl.Key)

		if p.retry[pos] {
			_, err := b.db.Pool.Exec(b.ctx, "INSERT INTO seqchaos_revived (job_id) VALUES ($1)", bl.JobID)
			require.NoError(t, err)
			id, err := b.client.RetrySequence(b.ctx, bl.Key)
			require.NoError(t, err)
			require.Equal(t, bl.JobID, id, "%s: the retried head", bl.Key)
			b.retries++
			continue
		}
		var first int64
		require.NoError(t, b.db.Pool.QueryRow(b.ctx, "SELECT coalesce(min(id), 0) FROM hopper_jobs WHERE meta ->> 'hopper.sequence' = $1 AND state = 'waiting'", bl.Key).Scan(&first))
		next, err := b.client.SkipSequence(b.ctx, bl.Key)
		require.NoError(t, err)
		require.Equal(t, first, next, "%s: a skip promotes the first job waiting", bl.Key)
		b.skips++
	}
}

// settled: every job enqueued, none live, no sequence blocked.
func (b *seqChaosBed) settled(perKey int) bool {
	return b.enqueued == perKey && b.count("SELECT (SELECT count(*) FROM hopper_jobs) + (SELECT count(*) FROM hopper_sequence_blocks)") == 0
}

// seqRun is a run as the tables show it.
type seqRun struct {
	key       string
	jobID     int64
	attempt   int32
	proc      string
	outcome   string
	started   time.Time
	ended     *time.Time // the ledger's finished_at for a completion, else its end, else its process's kill
	fenced    bool       // its ack or result was refused: its lease was lost
	completed bool
}

// TestSequenceChaos: sequences under SIGKILLs, failures, snoozes, planned
// deaths under both policies, and an operator skipping or retrying every
// blocked sequence. Per sequence: completions in id order, no two runs at
// once (but runs whose results the fence refused), no job lost, every block
// where the plan put it.
func TestSequenceChaos(t *testing.T) {
	testdb.Slow(t, "sequences across killed worker processes")
	keys, perKey, limit := 40, 25, 8*time.Minute
	if chaosFull() {
		keys, perKey, limit = 200, 50, 30*time.Minute
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("HOPPER_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "HOPPER_SEED")
	}
	t.Logf("seed %d: repeat with HOPPER_SEED=%d go test -count=1 -run TestSequenceChaos -v ./tests/chaos", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x5e9))
	plans := planSequences(rng, keys, perKey)
	b := newSeqChaosBed(t, limit, plans)

	began := time.Now()
	// Half the jobs before the workers start, the rest while they run: new
	// jobs land behind running heads, behind blocks, and in sequences that
	// ran dry.
	for b.enqueued < perKey/2 {
		b.enqueueNext()
	}
	names := []string{"w1", "w2", "w3"}
	for _, name := range names {
		b.start(name)
	}
	kills := 0
	nextKill := time.Now().Add(time.Duration(1500+rng.IntN(1000)) * time.Millisecond)
	b.waitWithin("every sequence ran to its end", limit-2*time.Minute, func() bool {
		if b.enqueued < perKey {
			b.enqueueNext()
		}
		b.operate()
		if b.settled(perKey) {
			return true
		}
		if time.Now().After(nextKill) { // the kill cadence
			b.kill(names[rng.IntN(len(names))])
			kills++
			nextKill = time.Now().Add(time.Duration(1500+rng.IntN(1000)) * time.Millisecond)
		}
		return false
	})
	took := time.Since(began)
	// A clean stop flushes the runs' ends.
	for _, name := range names {
		cmd := b.workers[name]
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		_ = cmd.Wait() // a worker still waiting out its killed predecessor's ID exits with an error
		delete(b.workers, name)
	}

	b.verdict(keys, perKey, kills, took)
}

func (b *seqChaosBed) verdict(keys, perKey, kills int, took time.Duration) {
	t := b.t
	n := keys * perKey

	// Every job where the plan says: completed once, or dead (or
	// cancelled) by design and not retried.
	completedOnce := map[int64]bool{}
	rows, err := b.db.Pool.Query(b.ctx, "SELECT job_id, count(*) FROM seqchaos_ledger GROUP BY job_id")
	require.NoError(t, err)
	counts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		ID int64
		N  int64
	}])
	require.NoError(t, err)
	for _, c := range counts {
		require.EqualValues(t, 1, c.N, "job %d completed %d times: a stale ack was accepted", c.ID, c.N)
		completedOnce[c.ID] = true
	}
	rows, err = b.db.Pool.Query(b.ctx, "SELECT id, state FROM hopper_dead_jobs")
	require.NoError(t, err)
	deadRows, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		ID    int64
		State string
	}])
	require.NoError(t, err)
	dead := map[int64]string{}
	for _, d := range deadRows {
		dead[d.ID] = d.State
	}
	var wantDead, wantBlocks, completed int
	for _, p := range b.plans {
		require.Len(t, p.ids, perKey)
		for pos, id := range p.ids {
			step := p.steps[pos]
			endsDead := step.Die != "" && (p.policy == jobs.SequenceContinue || !p.retry[pos])
			if step.Die != "" && p.policy == jobs.SequenceBlock {
				wantBlocks++
				require.True(t, b.blocked[id], "%s: job %d (position %d) died without blocking its sequence", p.key, id, pos)
			}
			if endsDead {
				wantDead++
				require.Equal(t, step.Die, dead[id], "%s: job %d (position %d) ends %s by design", p.key, id, pos, step.Die)
				require.False(t, completedOnce[id], "%s: job %d (position %d) completed, yet it ended %s", p.key, id, pos, step.Die)
				continue
			}
			completed++
			require.True(t, completedOnce[id], "%s: job %d (position %d) lost: neither completed nor dead by design (dead table: %q)", p.key, id, pos, dead[id])
			require.Empty(t, dead[id], "%s: job %d (position %d) completed and is in the dead table", p.key, id, pos)
		}
	}
	require.Len(t, dead, wantDead, "the dead table holds the planned deaths only")
	require.Len(t, completedOnce, completed, "the ledger holds the test's jobs only")
	require.Equal(t, wantBlocks, b.blocks)
	require.Zero(t, b.count("SELECT count(*) FROM hopper_jobs"))
	require.Zero(t, b.count("SELECT count(*) FROM hopper_sequence_blocks"))

	// Per sequence, completions in id order, each begun after the one
	// before it ended.
	rows, err = b.db.Pool.Query(b.ctx, "SELECT seq_key, job_id, started_at, finished_at FROM seqchaos_ledger ORDER BY seq_key, job_id")
	require.NoError(t, err)
	ledger, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		Key      string
		ID       int64
		Started  time.Time
		Finished time.Time
	}])
	require.NoError(t, err)
	for i := 1; i < len(ledger); i++ {
		prev, cur := ledger[i-1], ledger[i]
		if prev.Key == cur.Key {
			require.True(t, cur.Started.After(prev.Finished),
				"%s: job %d began at %v, before job %d, enqueued before it, finished at %v", cur.Key, cur.ID, cur.Started, prev.ID, prev.Finished)
		}
	}

	// Per sequence, every run in start order: job ids never go back, and
	// each run begins after the one before it ended, but for runs whose
	// result the fence refused (their lease was lost: they commit nothing).
	rows, err = b.db.Pool.Query(b.ctx, `
		SELECT r.seq_key, r.job_id, r.attempt, r.proc, coalesce(r.outcome, ''), r.started_at,
		       coalesce(l.finished_at, r.ended_at, CASE WHEN k.at IS NOT NULL THEN greatest(k.at, r.started_at) END),
		       r.lost OR coalesce(r.outcome, '') = 'refused' OR EXISTS (SELECT FROM seqchaos_outcomes AS o
		                                                  WHERE o.job_id = r.job_id AND o.attempt = r.attempt AND o.outcome = 'refused'),
		       l.job_id IS NOT NULL
		FROM seqchaos_runs AS r
		LEFT JOIN seqchaos_ledger AS l ON l.job_id = r.job_id AND l.attempt = r.attempt
		LEFT JOIN seqchaos_kills AS k ON k.proc = r.proc
		ORDER BY r.seq_key, r.started_at, r.id`)
	require.NoError(t, err)
	runs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (seqRun, error) {
		var s seqRun
		return s, r.Scan(&s.key, &s.jobID, &s.attempt, &s.proc, &s.outcome, &s.started, &s.ended, &s.fenced, &s.completed)
	})
	require.NoError(t, err)
	var fenced, killed int
	var last *seqRun
	for i := range runs {
		r := &runs[i]
		if r.fenced {
			fenced++
			require.False(t, r.completed, "%s: job %d attempt %d was refused, yet its ledger row committed", r.key, r.jobID, r.attempt)
			continue
		}
		if r.outcome == "" && !r.completed {
			killed++
		}
		require.NotNil(t, r.ended, "%s: job %d attempt %d (%s) never ended, and its process was not killed", r.key, r.jobID, r.attempt, r.proc)
		if last != nil && last.key == r.key {
			require.GreaterOrEqual(t, r.jobID, last.jobID,
				"%s: job %d ran (attempt %d, %s, at %v) after job %d, enqueued after it (attempt %d, %s, at %v)",
				r.key, r.jobID, r.attempt, r.proc, r.started, last.jobID, last.attempt, last.proc, last.started)
			require.True(t, r.started.After(*last.ended),
				"%s: job %d attempt %d (%s) began at %v, while job %d attempt %d (%s, %s) ran (%v to %v)",
				r.key, r.jobID, r.attempt, r.proc, r.started, last.jobID, last.attempt, last.proc, last.outcome, last.started, *last.ended)
		}
		last = r
	}

	outcomes := map[string]int64{}
	rows, err = b.db.Pool.Query(b.ctx, "SELECT outcome, count(*) FROM seqchaos_outcomes GROUP BY outcome")
	require.NoError(t, err)
	for rows.Next() {
		var o string
		var c int64
		require.NoError(t, rows.Scan(&o, &c))
		outcomes[o] = c
	}
	require.NoError(t, rows.Err())
	names := make([]string, 0, len(outcomes))
	for o := range outcomes {
		names = append(names, o)
	}
	slices.Sort(names)
	var reported []string
	for _, o := range names {
		reported = append(reported, fmt.Sprintf("%s %d", o, outcomes[o]))
	}
	t.Logf("sequence chaos: %d sequences of %d (%d jobs) in %v: %d kills; %d runs (%d cut short by a kill, %d refused by the fence), %d completed, %d dead or cancelled by design; %d blocks: %d skipped, %d retried; worker outcomes: %s",
		keys, perKey, n, took.Round(time.Millisecond), kills, len(runs), killed, fenced, completed, wantDead, b.blocks, b.skips, b.retries, strings.Join(reported, ", "))
}
