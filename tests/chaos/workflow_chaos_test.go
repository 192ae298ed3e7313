package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
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

// Workflows under worker crashes: three worker processes run many random
// DAGs and batches while one of them is SIGKILLed every ~2s and restarted.
// Steps fail and retry, some die (worker.Permanent) under every policy of
// their children (cancel, run, wait), and the test, as an operator, cancels
// a few steps while they wait or run. Some steps, as they complete, add a
// step to their own running workflow (jobs.AfterJobs, in the ack's
// transaction) after themselves and after other steps that may be ending
// at that moment. Once nothing is left to run, the DAGs with steps left
// waiting (and half the others with a failed step) are retried whole with
// Client.RetryWorkflow, and run to their end under the same kills.
//
// The verdict comes from tables the handlers and the database write: every
// run as it starts (wfchaos_runs, committed at once), every completion in
// the acknowledging transaction (wfchaos_ledger, with worker.AckTx, and a
// batch callback's jobs.CountParents), every move to the dead table (a
// trigger: wfchaos_deaths), and every retry (wfchaos_revivals, in the
// retry's transaction). All times are the database's clock_timestamp(),
// taken inside the transaction that makes the event (before its commit).
//
// CI size by default; HOPPER_CHAOS_FULL=1 (or HOPPER_CHAOS=full) runs the
// full size; HOPPER_SEED repeats a run; HOPPER_WFCHAOS_FAULT breaks one
// workflow function in the test's schema, to see the test fail.

const wfChaosEnv = "HOPPER_WFCHAOS_WORKER_URL"

// The worker process is this test binary run again with wfChaosEnv set:
// it runs from init, before TestMain (which this file leaves alone).
func init() {
	if os.Getenv(wfChaosEnv) != "" {
		os.Exit(runWfChaosWorker())
	}
}

// WfChaosStep is a step of the workflow chaos test and what its handler
// does.
type WfChaosStep struct {
	WF   string `json:"wf"`
	Step string `json:"step"`
	// WorkMs: how long each run works first (kills land on running
	// handlers).
	WorkMs int `json:"work_ms"`
	// Fails: the first Fails runs return an error (retried).
	Fails int `json:"fails,omitempty"`
	// Die: every run fails permanently, until the operator retries the
	// workflow (wfchaos_retries).
	Die bool `json:"die,omitempty"`
	// Callback: a batch's callback, which records jobs.CountParents in
	// its ledger row.
	Callback bool `json:"callback,omitempty"`
	// Grow: as it completes, the step adds this step to its own workflow,
	// in its ack's transaction (jobs.AfterJobs), after itself and the steps
	// named in GrowAfter (found by name, wherever they are: steps running
	// or ending at that very moment too), with GrowPolicy.
	Grow       *WfChaosStep `json:"grow,omitempty"`
	GrowAfter  []string     `json:"grow_after,omitempty"`
	GrowPolicy string       `json:"grow_policy,omitempty"`
}

var wfChaosKind = jobs.MustDefine[WfChaosStep]("wfchaos.step")

func runWfChaosWorker() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv(wfChaosEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer pool.Close()
	proc := os.Getenv("HOPPER_WFCHAOS_PROC")
	log := quietLog
	if os.Getenv("HOPPER_WFCHAOS_VERBOSE") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("proc", proc)
	}
	w, err := worker.New(pool, worker.Config{
		ID:              os.Getenv("HOPPER_WFCHAOS_ID"),
		Queues:          map[string]int{jobs.DefaultQueue: 16},
		LeaseDuration:   10 * time.Second,
		PollInterval:    100 * time.Millisecond,
		SweepInterval:   200 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second,
		RetryBackoff:    worker.Backoff{Base: 10 * time.Millisecond, Max: 100 * time.Millisecond},
		Logger:          log,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	err = worker.Handle(w, wfChaosKind, func(ctx context.Context, job *jobs.Job[WfChaosStep]) error {
		return wfChaosHandle(ctx, pool, proc, job)
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

// wfChaosHandle runs one step: it records its start, works, fails as
// planned, and otherwise writes its ledger row (a callback's with its
// parents' counts, read in the same transaction) and acks in one
// transaction.
func wfChaosHandle(ctx context.Context, pool *pgxpool.Pool, proc string, job *jobs.Job[WfChaosStep]) error {
	p := job.Payload
	var run int64
	var started time.Time
	if err := pool.QueryRow(ctx, "INSERT INTO wfchaos_runs (job_id, attempt, proc) VALUES ($1, $2, $3) RETURNING id, started_at",
		job.ID, job.Attempt, proc).Scan(&run, &started); err != nil {
		return err
	}
	outcome := "error"
	defer func() {
		_, _ = pool.Exec(context.WithoutCancel(ctx), "UPDATE wfchaos_runs SET ended_at = clock_timestamp(), outcome = $2 WHERE id = $1", run, outcome)
	}()
	select {
	case <-time.After(time.Duration(p.WorkMs) * time.Millisecond):
	case <-ctx.Done():
		outcome = "interrupted"
		return context.Cause(ctx)
	}
	var failed int
	var revived bool
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE outcome = 'fail'),
		EXISTS (SELECT FROM wfchaos_retries WHERE workflow = $2) FROM wfchaos_runs WHERE job_id = $1`, job.ID, p.WF).Scan(&failed, &revived); err != nil {
		return err
	}
	switch {
	case failed < p.Fails:
		outcome = "fail"
		return fmt.Errorf("planned failure %d of %d", failed+1, p.Fails)
	case p.Die && !revived:
		outcome = "dead"
		return worker.Permanent(errors.New("planned death"))
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	var counts *jobs.ParentCounts
	if p.Callback {
		c, err := jobs.CountParents(ctx, tx, job.ID)
		if err != nil {
			return err
		}
		counts = &c
	}
	var completed, dead, cancelled, live *int64
	if counts != nil {
		completed, dead, cancelled, live = &counts.Completed, &counts.Dead, &counts.Cancelled, &counts.Live
	}
	if _, err := tx.Exec(ctx, `INSERT INTO wfchaos_ledger (job_id, workflow, step, run_id, started_at, completed, dead, cancelled, live)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		job.ID, p.WF, p.Step, run, started, completed, dead, cancelled, live); err != nil {
		return err
	}
	if p.Grow != nil {
		var after []int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(array_agg(id), '{}') FROM (
			SELECT id, meta FROM hopper_jobs UNION ALL SELECT id, meta FROM hopper_dead_jobs UNION ALL SELECT id, meta FROM hopper_job_history) AS j
			WHERE meta ->> 'hopper.workflow' = $1 AND meta ->> 'hopper.step' = ANY ($2)`, p.WF, p.GrowAfter).Scan(&after); err != nil {
			return err
		}
		if len(after) != len(p.GrowAfter) {
			return fmt.Errorf("grow: found %d of the steps %v", len(after), p.GrowAfter)
		}
		w := jobs.NewWorkflow(p.WF).Add(p.Grow.Step, wfChaosKind.Entry(*p.Grow, jobs.MaxAttempts(1000)),
			jobs.AfterJobs(append(after, job.ID)...), jobs.OnParentFailure(jobs.WorkflowPolicy(p.GrowPolicy)))
		if _, err := jobs.EnqueueWorkflow(ctx, tx, w); err != nil {
			return err
		}
	}
	if err := worker.AckTx(ctx, tx, job); err != nil {
		outcome = "refused"
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		outcome = "commit failed"
		return err
	}
	outcome = "ok"
	return nil
}

// wfStep is what the test made of one step.
type wfStep struct {
	name    string
	parents []int // indices of earlier steps
	policy  jobs.WorkflowPolicy
	payload WfChaosStep
}

// wfPlan is one DAG or batch.
type wfPlan struct {
	id    string
	batch bool
	steps []wfStep
	ids   []int64 // by index, once enqueued
	retry bool    // retried whole once everything settled
}

func wfStepPayload(rng *rand.Rand, wf, name string, dieIn100 int) WfChaosStep {
	s := WfChaosStep{WF: wf, Step: name, WorkMs: 5 + rng.IntN(60)}
	switch r := rng.IntN(100); {
	case r < 3:
		s.Fails = 2
	case r < 10:
		s.Fails = 1
	}
	s.Die = rng.IntN(100) < dieIn100
	return s
}

// randomPolicy: cancel half the time, run or wait a quarter each.
func randomPolicy(rng *rand.Rand) jobs.WorkflowPolicy {
	switch rng.IntN(4) {
	case 0:
		return jobs.WorkflowRun
	case 1:
		return jobs.WorkflowWait
	}
	return jobs.WorkflowCancel
}

func planWorkflows(rng *rand.Rand, dags, batches int) []*wfPlan {
	var plans []*wfPlan
	for d := range dags {
		p := &wfPlan{id: fmt.Sprintf("dag-%04d", d)}
		n := 1 + rng.IntN(20)
		for i := range n {
			name := fmt.Sprintf("s%02d", i)
			s := wfStep{name: name, payload: wfStepPayload(rng, p.id, name, 8)}
			if i > 0 && rng.IntN(8) == 0 {
				// Grows a step after itself and up to two other steps,
				// earlier or later.
				g := wfStepPayload(rng, p.id, name+"+", 8)
				s.payload.Grow, s.payload.GrowPolicy = &g, string(randomPolicy(rng))
				for _, j := range rng.Perm(n)[:rng.IntN(min(n, 3))] {
					if j != i {
						s.payload.GrowAfter = append(s.payload.GrowAfter, fmt.Sprintf("s%02d", j))
					}
				}
			}
			if i > 0 && rng.IntN(5) > 0 { // a fifth of the later steps are roots too
				s.parents = append(s.parents, rng.Perm(i)[:1+rng.IntN(min(i, 3))]...)
				slices.Sort(s.parents)
			}
			s.policy = randomPolicy(rng)
			p.steps = append(p.steps, s)
		}
		plans = append(plans, p)
	}
	for b := range batches {
		p := &wfPlan{id: fmt.Sprintf("batch-%03d", b), batch: true}
		n := 20 + rng.IntN(181)
		cb := wfStep{name: "callback", policy: jobs.WorkflowRun}
		for i := range n {
			name := fmt.Sprintf("job-%d", i+1)
			p.steps = append(p.steps, wfStep{name: name, policy: jobs.WorkflowCancel, payload: wfStepPayload(rng, p.id, name, 10)})
			cb.parents = append(cb.parents, i)
		}
		cb.payload = WfChaosStep{WF: p.id, Step: "callback", WorkMs: 5 + rng.IntN(100), Callback: true}
		if rng.IntN(3) == 0 {
			cb.payload.Fails = 1
		}
		p.steps = append(p.steps, cb)
		plans = append(plans, p)
	}
	return plans
}

// workflow builds the plan's jobs.Workflow: a batch with jobs.NewBatch.
func (p *wfPlan) workflow() *jobs.Workflow {
	// Every kill charges an attempt: only the planned deaths die.
	entry := func(s wfStep) jobs.Entry { return wfChaosKind.Entry(s.payload, jobs.MaxAttempts(1000)) }
	if p.batch {
		entries := make([]jobs.Entry, len(p.steps)-1)
		for i := range entries {
			entries[i] = entry(p.steps[i])
		}
		return jobs.NewBatch(p.id, entries, entry(p.steps[len(p.steps)-1]))
	}
	w := jobs.NewWorkflow(p.id)
	for _, s := range p.steps {
		var after []string
		for _, j := range s.parents {
			after = append(after, p.steps[j].name)
		}
		opts := []jobs.StepOption{jobs.OnParentFailure(s.policy)}
		if len(after) > 0 {
			opts = append(opts, jobs.After(after...))
		}
		w.Add(s.name, entry(s), opts...)
	}
	return w
}

// discover finds the steps the handlers added (each growing step's, named
// after it with a "+") through ListWorkflow and adds them to their plans:
// such a step exists, once, iff its adder completed, with the policy and
// the parents it was given. It checks too that ListWorkflow lists every
// step of the workflow with its parents and policy.
func (b *wfChaosBed) discover(states map[int64]string) {
	t := b.t
	for pi, p := range b.plans {
		if p.batch {
			continue
		}
		listed, err := b.client.ListWorkflow(b.ctx, p.id)
		require.NoError(t, err, p.id)
		byName := map[string][]hopper.WorkflowStep{}
		for _, s := range listed {
			byName[s.Step] = append(byName[s.Step], s)
		}
		index := map[string]int{}
		for i, s := range p.steps {
			index[s.name] = i
		}
		for i := range p.steps {
			g := p.steps[i].payload
			if g.Grow == nil {
				continue
			}
			found := byName[g.Grow.Step]
			require.LessOrEqual(t, len(found), 1, "%s: step %s was added %d times", p.id, g.Grow.Step, len(found))
			if states[p.ids[i]] != "completed" {
				require.Empty(t, found, "%s: step %s added %s, yet it is %s", p.id, p.steps[i].name, g.Grow.Step, states[p.ids[i]])
				continue
			}
			require.Len(t, found, 1, "%s: step %s completed without adding %s", p.id, p.steps[i].name, g.Grow.Step)
			if _, known := b.byID[found[0].ID]; known {
				continue
			}
			parents := []int{i}
			for _, n := range g.GrowAfter {
				parents = append(parents, index[n])
			}
			slices.Sort(parents)
			p.steps = append(p.steps, wfStep{name: g.Grow.Step, parents: parents, policy: jobs.WorkflowPolicy(g.GrowPolicy), payload: *g.Grow})
			p.ids = append(p.ids, found[0].ID)
			b.byID[found[0].ID] = [2]int{pi, len(p.steps) - 1}
			b.grown++
		}
		require.Len(t, listed, len(p.steps), "%s: the steps ListWorkflow lists", p.id)
		for _, s := range listed {
			loc, ok := b.byID[s.ID]
			require.True(t, ok && loc[0] == pi, "%s: ListWorkflow lists job %d (%s), none of its steps", p.id, s.ID, s.Step)
			plan := p.steps[loc[1]]
			want := []int64{}
			for _, j := range plan.parents {
				want = append(want, p.ids[j])
			}
			slices.Sort(want)
			require.Equal(t, plan.name, s.Step, "%s: job %d's step", p.id, s.ID)
			require.Equal(t, want, s.Parents, "%s: step %s's parents", p.id, s.Step)
			require.Equal(t, plan.policy, s.Policy, "%s: step %s's policy", p.id, s.Step)
			require.EqualValues(t, states[s.ID], s.State, "%s: step %s's state", p.id, s.Step)
		}
	}
}

// wfCancel is an operator's cancel of one step, at a time into the run.
type wfCancel struct {
	plan, step int
	at         time.Duration
	done       bool
}

// wfChaosBed is the test's database, worker processes and plans.
type wfChaosBed struct {
	*processBed
	url      string
	client   *hopper.Client
	plans    []*wfPlan
	byID     map[int64][2]int // job id → plan, step
	gen      map[string]int
	enqueued int
	cancels  []*wfCancel
	// opCancelled: the steps an operator's cancel did cancel (the others
	// had finished already).
	opCancelled map[int64]bool
	// expect1: every step's state once the first phase settled, by the
	// model (model1).
	expect1 map[int64]string
	// orphans: rows of hopper_workflow_waits left for steps that are not
	// waiting, by job id.
	orphans map[int64]string
	grown   int // steps the handlers added
}

func newWfChaosBed(t *testing.T, limit time.Duration, plans []*wfPlan) *wfChaosBed {
	t.Helper()
	pb := newProcessBed(t, limit,
		"CREATE TABLE wfchaos_runs (id bigserial PRIMARY KEY, job_id bigint NOT NULL, attempt int NOT NULL, proc text NOT NULL, started_at timestamptz NOT NULL DEFAULT clock_timestamp(), ended_at timestamptz, outcome text)",
		"CREATE INDEX ON wfchaos_runs (job_id)",
		`CREATE TABLE wfchaos_ledger (id bigserial PRIMARY KEY, job_id bigint NOT NULL, workflow text NOT NULL, step text NOT NULL, run_id bigint NOT NULL,
			started_at timestamptz NOT NULL, finished_at timestamptz NOT NULL DEFAULT clock_timestamp(),
			completed bigint, dead bigint, cancelled bigint, live bigint)`,
		"CREATE TABLE wfchaos_deaths (id bigserial PRIMARY KEY, job_id bigint NOT NULL, state text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())",
		`CREATE FUNCTION wfchaos_death() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
		BEGIN
			INSERT INTO wfchaos_deaths (job_id, state) VALUES (NEW.id, NEW.state);
			RETURN NULL;
		END $$`,
		"CREATE TRIGGER wfchaos_death AFTER INSERT ON hopper_dead_jobs FOR EACH ROW EXECUTE FUNCTION wfchaos_death()",
		"CREATE TABLE wfchaos_retries (workflow text PRIMARY KEY, at timestamptz NOT NULL)",
		"CREATE TABLE wfchaos_revivals (job_id bigint NOT NULL, at timestamptz NOT NULL)")
	url := pb.db.URL
	if strings.Contains(url, "://") {
		url += "&pool_max_conns=24&application_name=" + pb.db.Schema
	} else {
		url += " pool_max_conns=24 application_name=" + pb.db.Schema
	}
	b := &wfChaosBed{processBed: pb, url: url, client: hopper.NewClient(pb.db.Pool), plans: plans,
		byID: map[int64][2]int{}, gen: map[string]int{}, opCancelled: map[int64]bool{}, orphans: map[int64]string{}}
	pb.explain = func() string {
		return fmt.Sprintf("workflows enqueued %d of %d, live jobs by state %s, waits %d, ledger %d, dead %d; not waiting: %s; workers: %s",
			b.enqueued, len(b.plans), b.liveByState(), b.count("SELECT count(*) FROM hopper_workflow_waits"),
			b.count("SELECT count(*) FROM wfchaos_ledger"), b.count("SELECT count(*) FROM hopper_dead_jobs"),
			b.textRows(`SELECT format('job %s %s %s attempt %s run_at %s lease %s until %s', id, kind, state, attempt,
				run_at - now(), lease_owner, lease_until - now()) FROM hopper_jobs WHERE state <> 'waiting' ORDER BY id LIMIT 5`),
			b.textRows(`SELECT format('%s pid %s beat %s ago', id, pid, now() - last_seen_at) FROM hopper_workers ORDER BY id`))
	}
	return b
}

// textRows joins the text rows of query, for a failure's message; it
// never fails the test itself.
func (b *wfChaosBed) textRows(query string) string {
	rows, err := b.db.Pool.Query(context.WithoutCancel(b.ctx), query)
	if err != nil {
		return err.Error()
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err.Error()
	}
	return strings.Join(lines, "; ")
}

func (b *wfChaosBed) liveByState() string {
	var s string
	err := b.db.Pool.QueryRow(b.ctx, "SELECT coalesce(string_agg(state || ' ' || n, ', ' ORDER BY state), 'none') FROM (SELECT state, count(*) AS n FROM hopper_jobs GROUP BY state) s").Scan(&s)
	if err != nil {
		return err.Error()
	}
	return s
}

func (b *wfChaosBed) start(id string) {
	b.t.Helper()
	b.spawn(id, wfChaosEnv+"="+b.url, "HOPPER_WFCHAOS_ID="+id, fmt.Sprintf("HOPPER_WFCHAOS_PROC=%s.%d", id, b.gen[id]))
}

func (b *wfChaosBed) kill(id string) {
	b.t.Helper()
	b.stop(id, syscall.SIGKILL)
	b.gen[id]++
	b.start(id)
}

// enqueue enqueues the next n workflows, each in its own transaction.
func (b *wfChaosBed) enqueue(n int) {
	b.t.Helper()
	for ; n > 0 && b.enqueued < len(b.plans); n-- {
		p := b.plans[b.enqueued]
		res, err := jobs.EnqueueWorkflow(b.ctx, b.db.Pool, p.workflow())
		require.NoError(b.t, err, p.id)
		require.Len(b.t, res.Steps, len(p.steps), p.id)
		p.ids = make([]int64, len(p.steps))
		for i, s := range p.steps {
			id, ok := res.Steps[s.name]
			require.True(b.t, ok, "%s: step %s enqueued", p.id, s.name)
			p.ids[i] = id
			b.byID[id] = [2]int{b.enqueued, i}
		}
		b.enqueued++
	}
}

// operate fires the operator's cancels that are due.
func (b *wfChaosBed) operate(since time.Duration) {
	b.t.Helper()
	for _, c := range b.cancels {
		if c.done || c.at > since || c.plan >= b.enqueued {
			continue
		}
		c.done = true
		id := b.plans[c.plan].ids[c.step]
		res, err := b.client.CancelJobs(b.ctx, id)
		require.NoError(b.t, err)
		require.Len(b.t, res, 1)
		if res[0].Err == nil {
			b.opCancelled[id] = true
		} else {
			require.ErrorIs(b.t, res[0].Err, hopper.ErrFinished, "cancel of job %d", id)
		}
	}
}

func (b *wfChaosBed) cancelsDone() bool {
	for _, c := range b.cancels {
		if !c.done {
			return false
		}
	}
	return true
}

// chaos runs until done holds, killing a random worker every 1.5-2.5s.
func (b *wfChaosBed) chaos(rng *rand.Rand, what string, limit time.Duration, names []string, kills *int, began time.Time, done func() bool) {
	b.t.Helper()
	nextKill := time.Now().Add(time.Duration(1500+rng.IntN(1000)) * time.Millisecond)
	b.waitWithin(what, limit, func() bool {
		b.enqueue(max(1, len(b.plans)/20))
		b.operate(time.Since(began))
		if done() {
			return true
		}
		if time.Now().After(nextKill) {
			b.kill(names[rng.IntN(len(names))])
			*kills++
			nextKill = time.Now().Add(time.Duration(1500+rng.IntN(1000)) * time.Millisecond)
		}
		return false
	})
}

// states reads where every job of the test is: its live state, dead or
// cancelled, completed (kept in the history), or "gone".
func (b *wfChaosBed) states() map[int64]string {
	b.t.Helper()
	out := map[int64]string{}
	for _, r := range wfRows[wfPair[string]](b, `
		SELECT id, state::text FROM hopper_jobs
		UNION ALL SELECT id, state::text FROM hopper_dead_jobs
		UNION ALL SELECT id, 'completed' FROM hopper_job_history`) {
		_, dup := out[r.ID]
		require.False(b.t, dup, "job %d is in two tables", r.ID)
		out[r.ID] = r.V
	}
	return out
}

func (b *wfChaosBed) ledgerCounts() map[int64]int {
	b.t.Helper()
	out := map[int64]int{}
	for _, r := range wfRows[wfPair[int]](b, "SELECT job_id, count(*)::int FROM wfchaos_ledger GROUP BY job_id") {
		out[r.ID] = r.V
	}
	return out
}

// wfPair is a row of a job id and a value.
type wfPair[V any] struct {
	ID int64
	V  V
}

// wfRows reads a query's rows whole (a check that fails then leaves no
// rows open).
func wfRows[T any](b *wfChaosBed, query string, args ...any) []T {
	b.t.Helper()
	rows, err := b.db.Pool.Query(b.ctx, query, args...)
	require.NoError(b.t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[T])
	require.NoError(b.t, err)
	return out
}

// model1 is what every step must be once the first phase settled, from the
// plan and the operator's cancels that took: in index order (parents come
// first), an operator-cancelled step is cancelled; a step with a parent
// still waiting waits; a step with a failed parent is cancelled (cancel) or
// waits (wait); every other step ran: dead when planned so, else
// completed.
func (b *wfChaosBed) model1(p *wfPlan) []string {
	want := make([]string, len(p.steps))
	for i, s := range p.steps {
		var waiting, failed bool
		for _, j := range s.parents {
			switch want[j] {
			case "waiting":
				waiting = true
			case "dead", "cancelled":
				failed = true
			}
		}
		switch {
		case b.opCancelled[p.ids[i]]:
			want[i] = "cancelled"
		case waiting:
			want[i] = "waiting"
		case failed && s.policy == jobs.WorkflowCancel:
			want[i] = "cancelled"
		case failed && s.policy == jobs.WorkflowWait:
			want[i] = "waiting"
		case s.payload.Die:
			want[i] = "dead"
		default:
			want[i] = "completed"
		}
	}
	return want
}

func (b *wfChaosBed) describe(p *wfPlan, i int, states map[int64]string) string {
	s := p.steps[i]
	var ps []string
	for _, j := range s.parents {
		ps = append(ps, fmt.Sprintf("%s (job %d) %s", p.steps[j].name, p.ids[j], states[p.ids[j]]))
	}
	return fmt.Sprintf("%s step %s (job %d, policy %s, die %v, operator-cancelled %v) after [%s]",
		p.id, s.name, p.ids[i], s.policy, s.payload.Die, b.opCancelled[p.ids[i]], strings.Join(ps, ", "))
}

// checkWaits: a row of hopper_workflow_waits for every waiting step,
// counting its parents still live, and no other (a row of a step that is
// not waiting is noted in orphans, reported when the test ends: see
// TestWorkflowChaos).
func (b *wfChaosBed) checkWaits(states map[int64]string) {
	t := b.t
	waits := map[int64]int{}
	for _, r := range wfRows[wfPair[int]](b, "SELECT child_id, parents_left FROM hopper_workflow_waits") {
		waits[r.ID] = r.V
	}
	for id, n := range waits {
		loc, ok := b.byID[id]
		require.True(t, ok, "hopper_workflow_waits has a row for job %d, none of the test's", id)
		if states[id] != "waiting" {
			b.orphans[id] = fmt.Sprintf("a row (%d left) for the %s %s", n, states[id], b.describe(b.plans[loc[0]], loc[1], states))
		}
	}
	for id, st := range states {
		if st != "waiting" {
			continue
		}
		loc := b.byID[id]
		p := b.plans[loc[0]]
		live := 0
		for _, j := range p.steps[loc[1]].parents {
			switch states[p.ids[j]] {
			case "completed", "dead", "cancelled", "gone":
			default:
				live++
			}
		}
		n, ok := waits[id]
		if len(p.steps[loc[1]].parents) == 1 { // its one parent's end is its turn: no count
			require.False(t, ok, "a step of one parent has a count in hopper_workflow_waits: %s", b.describe(p, loc[1], states))
			continue
		}
		require.True(t, ok, "waiting step without a count in hopper_workflow_waits: %s", b.describe(p, loc[1], states))
		require.Equal(t, live, n, "parents left of %s", b.describe(p, loc[1], states))
	}
}

// verify1 checks the first phase, once nothing is left to run: every step
// where the model puts it, with a ledger row iff completed; no step of
// policy cancel completed with a failed parent; every batch callback
// completed once, with its jobs' real outcomes as its counts.
func (b *wfChaosBed) verify1() (byState map[string]int, callbacks int) {
	t := b.t
	states := b.states()
	b.discover(states)
	ledger := b.ledgerCounts()
	b.expect1 = map[int64]string{}
	byState = map[string]int{}
	for _, p := range b.plans {
		want := b.model1(p)
		for i, id := range p.ids {
			b.expect1[id] = want[i]
			byState[want[i]]++
			require.Equal(t, want[i], states[id], "%s", b.describe(p, i, states))
			if want[i] == "completed" {
				require.Equal(t, 1, ledger[id], "ledger rows of the completed %s", b.describe(p, i, states))
			} else {
				require.Zero(t, ledger[id], "ledger rows of the %s %s", want[i], b.describe(p, i, states))
			}
			s := p.steps[i]
			allCompleted := len(s.parents) > 0
			for _, j := range s.parents {
				if states[p.ids[j]] != "completed" {
					allCompleted = false
				}
				if s.policy == jobs.WorkflowCancel && ledger[id] > 0 {
					require.NotContains(t, []string{"dead", "cancelled"}, states[p.ids[j]], "a step of policy cancel completed with a failed parent: %s", b.describe(p, i, states))
				}
			}
			if allCompleted {
				require.NotEqual(t, "waiting", states[id], "left waiting though its parents all completed: %s", b.describe(p, i, states))
			}
		}
	}
	b.checkWaits(states)

	// Batch callbacks: once each, with the counts of their jobs' outcomes.
	type cbRow struct {
		JobID                            int64
		Workflow                         string
		Completed, Dead, Cancelled, Live int64
	}
	cbs := wfRows[cbRow](b, "SELECT job_id, workflow, completed, dead, cancelled, live FROM wfchaos_ledger WHERE step = 'callback' ORDER BY job_id")
	byJob := map[int64]cbRow{}
	for _, c := range cbs {
		_, dup := byJob[c.JobID]
		require.False(t, dup, "batch %s: its callback (job %d) completed twice", c.Workflow, c.JobID)
		byJob[c.JobID] = c
	}
	for _, p := range b.plans {
		if !p.batch {
			continue
		}
		cb := p.ids[len(p.ids)-1]
		var want cbRow
		for _, id := range p.ids[:len(p.ids)-1] {
			switch states[id] {
			case "completed":
				want.Completed++
			case "dead":
				want.Dead++
			case "cancelled":
				want.Cancelled++
			default:
				t.Fatalf("batch %s: job %d is %s", p.id, id, states[id])
			}
		}
		got, ok := byJob[cb]
		if b.opCancelled[cb] {
			require.False(t, ok, "batch %s: the cancelled callback completed", p.id)
			continue
		}
		require.True(t, ok, "batch %s: its callback (job %d, %s) never completed", p.id, cb, states[cb])
		want.JobID, want.Workflow = cb, p.id
		require.Equal(t, want, got, "batch %s: the callback's counts against its jobs' outcomes", p.id)
		callbacks++
	}
	require.Len(t, byJob, callbacks, "callback rows in the ledger")
	return byState, callbacks
}

// retry retries whole every DAG that has a step left waiting, and half the
// others with a failed step: in one transaction each, which marks the
// workflow revived (its planned deaths then succeed) and notes the time and
// the ids that came back.
func (b *wfChaosBed) retry(rng *rand.Rand) (workflows, revived int) {
	t := b.t
	for _, p := range b.plans {
		if p.batch {
			continue
		}
		var waiting, failed bool
		for _, id := range p.ids {
			switch b.expect1[id] {
			case "waiting":
				waiting = true
			case "dead", "cancelled":
				failed = true
			}
		}
		p.retry = waiting || (failed && rng.IntN(2) == 0)
		if !p.retry {
			continue
		}
		tx, err := b.db.Pool.Begin(b.ctx)
		require.NoError(t, err)
		var at time.Time
		require.NoError(t, tx.QueryRow(b.ctx, "INSERT INTO wfchaos_retries (workflow, at) VALUES ($1, clock_timestamp()) RETURNING at", p.id).Scan(&at))
		ids, err := b.client.RetryWorkflowTx(b.ctx, tx, p.id)
		require.NoError(t, err, p.id)
		var want []int64
		for _, id := range p.ids {
			if st := b.expect1[id]; st == "dead" || st == "cancelled" {
				want = append(want, id)
			}
		}
		require.ElementsMatch(t, want, ids, "%s: the steps that came back", p.id)
		_, err = tx.Exec(b.ctx, "INSERT INTO wfchaos_revivals (job_id, at) SELECT unnest($1::bigint[]), $2", ids, at)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(b.ctx))
		workflows++
		revived += len(ids)
	}
	return workflows, revived
}

// verify2 checks the end: every step of a retried DAG completed (once),
// every other step as the first phase left it, no job live, no count left.
func (b *wfChaosBed) verify2() {
	t := b.t
	states := b.states()
	b.discover(states)
	ledger := b.ledgerCounts()
	for _, p := range b.plans {
		for i, id := range p.ids {
			want := b.expect1[id]
			if p.retry {
				want = "completed"
			}
			require.Equal(t, want, states[id], "after the retries: %s", b.describe(p, i, states))
			if want == "completed" {
				require.Equal(t, 1, ledger[id], "ledger rows of the completed %s", b.describe(p, i, states))
			} else {
				require.Zero(t, ledger[id], "ledger rows of the %s %s", want, b.describe(p, i, states))
			}
		}
	}
	require.Zero(t, b.count("SELECT count(*) FROM hopper_jobs"))
	b.checkWaits(states)
}

// wfEvent is one change of a job: it completed (the ledger), died or was
// cancelled (the dead table's trigger), or came back (a retry).
type wfEvent struct {
	at   time.Time
	kind string // completed, dead, cancelled, revived
}

func (e wfEvent) String() string { return e.kind + " at " + e.at.Format("15:04:05.000000") }

// verifyOrder checks every run of every step against its parents' events:
// at the run's start each parent had ended (its last event before then is
// an end, not a revival, and there is one) and, unless the step's policy is
// run, had completed. Completed steps of policy cancel or wait also come
// after their parents in the ledger's order.
func (b *wfChaosBed) verifyOrder() int {
	t := b.t
	events := map[int64][]wfEvent{}
	ledgerID := map[int64]int64{}
	type eventRow struct {
		ID       int64
		At       time.Time
		Kind     string
		LedgerID int64
	}
	for _, r := range wfRows[eventRow](b, `
		SELECT job_id, finished_at, 'completed', id FROM wfchaos_ledger
		UNION ALL SELECT job_id, at, state, 0 FROM wfchaos_deaths
		UNION ALL SELECT job_id, at, 'revived', 0 FROM wfchaos_revivals
		ORDER BY 2`) {
		events[r.ID] = append(events[r.ID], wfEvent{at: r.At, kind: r.Kind})
		if r.LedgerID != 0 {
			ledgerID[r.ID] = r.LedgerID
		}
	}
	statusAt := func(id int64, at time.Time) (string, time.Time) {
		st, when := "live", time.Time{}
		for _, e := range events[id] {
			if !e.at.Before(at) {
				break
			}
			st, when = e.kind, e.at
		}
		if st == "revived" {
			st = "live"
		}
		return st, when
	}

	type runRow struct {
		ID      int64
		Attempt int
		Proc    string
		Started time.Time
	}
	all := wfRows[runRow](b, "SELECT job_id, attempt, proc, started_at FROM wfchaos_runs ORDER BY id")
	for _, r := range all {
		id, attempt, proc, started := r.ID, r.Attempt, r.Proc, r.Started
		loc, ok := b.byID[id]
		require.True(t, ok, "a run of job %d, none of the test's", id)
		p := b.plans[loc[0]]
		s := p.steps[loc[1]]
		for _, j := range s.parents {
			pid := p.ids[j]
			st, when := statusAt(pid, started)
			since := "its enqueue"
			if !when.IsZero() {
				since = when.Format("15:04:05.000000")
			}
			okNow := st == "completed" || (s.policy == jobs.WorkflowRun && (st == "dead" || st == "cancelled"))
			require.True(t, okNow, "%s step %s (job %d, policy %s) attempt %d (%s) began at %s while its parent %s (job %d) was %s (since %s; its events: %v)",
				p.id, s.name, id, s.policy, attempt, proc, started.Format("15:04:05.000000"), p.steps[j].name, pid, st, since, events[pid])
			if s.policy != jobs.WorkflowRun && ledgerID[id] != 0 {
				require.Less(t, ledgerID[pid], ledgerID[id], "%s step %s (job %d) completed before its parent %s (job %d) in the ledger's order", p.id, s.name, id, p.steps[j].name, pid)
			}
		}
	}
	return len(all)
}

// wfChaosFaults, for checking that the test fails when the workflow SQL is
// wrong: HOPPER_WFCHAOS_FAULT names one, which rewrites one function in
// the test's own schema (the migration's text stays as it is). Every one
// but pass-no-lock fails the test at seed 42; pass-no-lock has not been
// seen to (the update of the child's count row serializes the countdown
// by itself).
var wfChaosFaults = map[string]struct{ fn, from, to string }{
	// Promote every ready step, whatever its parents' ends.
	"decide-ignores-failures": {"hopper_workflow_decide(bigint[])",
		"array_agg(v.id) FILTER (WHERE NOT v.failed OR v.policy = 'run')", "array_agg(v.id)"},
	// Count each parent's end twice.
	"pass-counts-twice": {"hopper_workflow_pass(bigint[])",
		"greatest(w.parents_left - c.n, 0)", "greatest(w.parents_left - 2 * c.n, 0)"},
	// Count down without locking the children first.
	"pass-no-lock": {"hopper_workflow_pass(bigint[])", "FOR NO KEY UPDATE OF j", ""},
	// Stop after the first level: cancelled children's children are not
	// counted down.
	"advance-no-cascade": {"hopper_workflow_advance()",
		"ended := hopper_workflow_pass(ended);", "PERFORM hopper_workflow_pass(ended); ended := NULL;"},
	// A step added to a running workflow does not lock its older parents:
	// one that ends meanwhile, unseen, is never counted down.
	"count-no-key-share": {"hopper_workflow_count(bigint[],bigint[],bigint)", "FOR KEY SHARE OF j", ""},
	// A step that ends while it waits (an operator's cancel) keeps its
	// count (as migration 14 did before b095566).
	"advance-keeps-counts": {"hopper_workflow_advance()",
		"DELETE FROM hopper_workflow_waits AS w WHERE w.child_id = ANY (ended);", ""},
	// A parent brought back does not count again for its waiting children.
	"returned-no-recount": {"hopper_workflow_returned()",
		"SET parents_left = w.parents_left + c.n", "SET parents_left = w.parents_left"},
}

func (b *wfChaosBed) injectFault(name string) {
	t := b.t
	f, ok := wfChaosFaults[name]
	require.True(t, ok, "HOPPER_WFCHAOS_FAULT=%q: no such fault", name)
	var def string
	require.NoError(t, b.db.Pool.QueryRow(b.ctx, "SELECT pg_get_functiondef($1::regprocedure)", f.fn).Scan(&def))
	require.Contains(t, def, f.from, "fault %s: the function changed", name)
	_, err := b.db.Pool.Exec(b.ctx, strings.Replace(def, f.from, f.to, 1))
	require.NoError(t, err)
	t.Logf("fault injected: %s", name)
}

// TestWorkflowChaos: random DAGs and batches under SIGKILLs, failures,
// planned deaths under every policy, operator cancels, and retries of the
// workflows left waiting. Every run begins after its parents ended (and
// completed, unless its policy is run); every step ends where its parents'
// ends and its policy put it; no count is left behind; every batch
// callback completes once, with its jobs' real outcomes as its counts.
func TestWorkflowChaos(t *testing.T) {
	testdb.Slow(t, "workflows across killed worker processes")
	// cancelWindow: the operator's cancels come within so many ms.
	dags, batches, limit, cancelWindow := 60, 8, 6*time.Minute, 6000
	if chaosFull() || os.Getenv("HOPPER_CHAOS_FULL") != "" {
		dags, batches, limit, cancelWindow = 500, 50, 30*time.Minute, 60000
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("HOPPER_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "HOPPER_SEED")
	}
	t.Logf("seed %d: repeat with HOPPER_SEED=%d go test -count=1 -run TestWorkflowChaos -v ./tests/chaos", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0xdac))
	plans := planWorkflows(rng, dags, batches)
	rng.Shuffle(len(plans), func(i, j int) { plans[i], plans[j] = plans[j], plans[i] })
	b := newWfChaosBed(t, limit, plans)
	if f := os.Getenv("HOPPER_WFCHAOS_FAULT"); f != "" {
		b.injectFault(f)
	}
	steps := 0
	for pi, p := range plans {
		steps += len(p.steps)
		// A few operator cancels, within the first seconds.
		if n := len(p.steps); rng.IntN(10) == 0 || (p.batch && rng.IntN(2) == 0) {
			b.cancels = append(b.cancels, &wfCancel{plan: pi, step: rng.IntN(n), at: time.Duration(300+rng.IntN(cancelWindow)) * time.Millisecond})
		}
	}

	began := time.Now()
	b.enqueue(len(plans) / 3) // a third before the workers start, the rest while they run
	names := []string{"w1", "w2", "w3"}
	for _, name := range names {
		b.start(name)
	}
	kills := 0
	b.chaos(rng, "every workflow ran as far as it can", limit/2, names, &kills, began, func() bool {
		return b.enqueued == len(plans) && b.cancelsDone() &&
			b.count("SELECT count(*) FROM hopper_jobs WHERE state <> 'waiting'") == 0
	})
	phase1 := time.Since(began)
	byState, callbacks := b.verify1()

	retried, revived := b.retry(rng)
	b.chaos(rng, "every retried workflow ran to its end", limit/3, names, &kills, began, func() bool {
		return b.count("SELECT count(*) FROM hopper_jobs") == 0
	})
	took := time.Since(began)
	for _, name := range names {
		cmd := b.workers[name]
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		_ = cmd.Wait() // a worker still waiting out its killed predecessor's ID exits with an error
		delete(b.workers, name)
	}
	b.verify2()
	runs := b.verifyOrder()

	t.Logf("workflow chaos: %d DAGs and %d batches (%d steps, %d more added by handlers) in %v (first phase %v): %d kills, %d runs; "+
		"first phase: %d completed, %d dead, %d cancelled (%d by the operator, of %d cancels), %d waiting; "+
		"%d callbacks with their counts; retried %d DAGs (%d steps back), all completed",
		dags, batches, steps, b.grown, took.Round(time.Millisecond), phase1.Round(time.Millisecond), kills, runs,
		byState["completed"], byState["dead"], byState["cancelled"], len(b.opCancelled), len(b.cancels), byState["waiting"],
		callbacks, retried, revived)

	// Reported last, so that every other check has had its say.
	if len(b.orphans) > 0 {
		ids := slices.Sorted(maps.Keys(b.orphans))
		var some []string
		for _, id := range ids[:min(len(ids), 5)] {
			some = append(some, b.orphans[id])
		}
		t.Errorf("hopper_workflow_waits keeps rows of %d steps that are not waiting (the operator cancelled %d steps), such as:\n%s",
			len(ids), len(b.opCancelled), strings.Join(some, "\n"))
	}
}
