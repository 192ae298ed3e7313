package chaos

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// The poison suite's worker process: the test binary run again with
// poisonEnv set. Its handlers do what each job's plan says, and write the
// ledger the verdict reads: every run as it starts and as it ends
// (poison_runs, committed at once), every AckTx'd completion in the
// acknowledging transaction (poison_ledger), and every outcome the worker
// reports through its OnOutcome hook (poison_outcomes).

const poisonEnv = "HOPPER_POISON_WORKER_URL"

var (
	poisonJob  = jobs.MustDefine[Plan]("poison.job")
	poisonTick = jobs.MustDefine[Tick]("poison.tick")
)

// Tick is the payload of the schedules' jobs.
type Tick struct {
	Schedule string    `json:"schedule"`
	Slot     time.Time `json:"slot"`
	Pad      string    `json:"pad,omitempty"`
}

// The schedules every poison worker defines. The healthy ones must fire
// every slot whatever the others do; the poison ones' payload functions
// fail: on some slots (poison-slots, which then moves on to the next slot),
// from some slot on for good (the poison-catchup ones catch up every missed
// slot, the failing one first, so they never get past it), or on every
// other call (poison-flaky).
var healthySchedules = []struct {
	name, expr string
	every      time.Duration
}{
	{"healthy-1s", "@every 1s", time.Second},
	{"healthy-2s", "*/2 * * * * *", 2 * time.Second},
}

var poisonScheduleNames = []string{"poison-slots", "poison-catchup-1", "poison-catchup-2", "poison-catchup-3", "poison-flaky"}

// badSlot says whether, and how, a poison schedule's payload function
// fails for slot: it panics, returns a payload with NUL (jsonb refuses
// it) or one over the size limit; 0 when it does not fail.
func badSlot(seed uint64, schedule string, slot time.Time) int {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%d", seed, schedule, slot.Unix())
	if n := h.Sum64() % 8; n < 3 {
		return int(n) + 1
	}
	return 0
}

// failSlot makes the failure badSlot chose.
func failSlot(how int, t Tick) Tick {
	switch how {
	case 1:
		panic(poisonPanic(Step{Variant: int(t.Slot.Unix()), Seed: uint64(t.Slot.UnixNano())}))
	case 2:
		t.Pad = "NUL " + nul()
	case 3:
		t.Pad = strings.Repeat("x", jobs.DefaultMaxPayloadBytes)
	}
	return t
}

func runPoisonWorker() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	plainTexts = os.Getenv("HOPPER_POISON_TEXT") == "plain"
	seed, _ := strconv.ParseUint(os.Getenv("HOPPER_POISON_SEED"), 10, 64)
	id := os.Getenv("HOPPER_POISON_ID")
	pool, err := pgxpool.New(ctx, os.Getenv(poisonEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer pool.Close()
	logger := quietLog
	if os.Getenv("HOPPER_POISON_VERBOSE") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	outcomes := newOutcomeWriter(pool, id)
	w, err := worker.New(pool, worker.Config{
		ID:                 id,
		Queues:             map[string]int{queueKept: 4, queuePlain: 4, queueStuck: 1, queueTicks: 2},
		KeepHistoryByQueue: map[string]time.Duration{queueKept: time.Hour},
		LeaseDuration:      poisonLease,
		ExtendInterval:     poisonHeartbeat,
		PollInterval:       100 * time.Millisecond,
		PollOnly:           os.Getenv("HOPPER_POISON_POLL_ONLY") != "",
		SweepInterval:      poisonSweep,
		ShutdownTimeout:    500 * time.Millisecond,
		Timeout:            defaultTimeout,
		AbandonAfter:       poisonAbandonAfter,
		RetryBackoff:       worker.Backoff{Base: 10 * time.Millisecond, Max: 200 * time.Millisecond},
		OnOutcome:          []worker.OutcomeHook{outcomes.hook},
		Logger:             logger,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	h := &poisonHandler{pool: pool, id: id}
	err = worker.HandleWithResult(w, poisonJob, h.run, worker.TimeoutBy(func(j *jobs.Job[Plan]) time.Duration {
		return time.Duration(j.Payload.step(j.Attempt).TimeoutMs) * time.Millisecond
	}))
	if err == nil {
		err = worker.Handle(w, poisonTick, h.tick)
	}
	ticks := worker.EnqueueOptions(jobs.Queue(queueTicks))
	for _, s := range healthySchedules {
		if err == nil {
			name := s.name
			err = worker.Schedule(w, name, poisonTick, s.expr, func(slot time.Time) Tick { return Tick{Schedule: name, Slot: slot} },
				worker.OnMissed(worker.CatchUp(1000)), ticks)
		}
	}
	for _, name := range poisonScheduleNames {
		if err != nil {
			break
		}
		policy := worker.FireOnce()
		if strings.HasPrefix(name, "poison-catchup") {
			policy = worker.CatchUp(1000)
		}
		err = worker.Schedule(w, name, poisonTick, "@every 1s", func(slot time.Time) Tick {
			t := Tick{Schedule: name, Slot: slot}
			if name == "poison-flaky" {
				if rand.IntN(2) == 0 {
					return failSlot(1+rand.IntN(3), t)
				}
				return t
			}
			return failSlot(badSlot(seed, name, slot), t)
		}, worker.OnMissed(policy), ticks)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	err = w.Run(ctx)
	outcomes.close()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	return 0
}

// poisonHandler runs the jobs' plans in one worker process.
type poisonHandler struct {
	pool *pgxpool.Pool
	id   string
}

// ledgerCtx is for the ledger's own statements: a run is recorded whatever
// became of its claim, so they do not use the handler's context.
func ledgerCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Minute)
}

func (h *poisonHandler) exec(sql string, args ...any) {
	ctx, cancel := ledgerCtx()
	defer cancel()
	if _, err := h.pool.Exec(ctx, sql, args...); err != nil {
		fmt.Fprintf(os.Stderr, "poison worker %s: ledger: %v\n", h.id, err)
	}
}

// begin records a run as it starts and returns its sequence number.
func (h *poisonHandler) begin(id int64, attempt int, queue, kind string, s Step) (int64, error) {
	ctx, cancel := ledgerCtx()
	defer cancel()
	var seq int64
	err := h.pool.QueryRow(ctx, `INSERT INTO poison_runs (job_id, attempt, worker, queue, kind, step, then_, timeout_ms)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING seq`, id, attempt, h.id, queue, kind, s.Do, s.Then, s.TimeoutMs).Scan(&seq)
	return seq, err
}

// end records how the run ended, and the cause of its context's end.
func (h *poisonHandler) end(ctx context.Context, seq int64, how string) {
	cause := ""
	if c := context.Cause(ctx); c != nil {
		cause = c.Error()
	}
	h.exec("UPDATE poison_runs SET ended_at = clock_timestamp(), ended_by = $2, cause = $3 WHERE seq = $1", seq, how, cause)
}

func (h *poisonHandler) phase(seq int64, phase string) {
	h.exec("UPDATE poison_runs SET phase = $2 WHERE seq = $1", seq, phase)
}

func (h *poisonHandler) tick(ctx context.Context, job *jobs.Job[Tick]) error {
	seq, err := h.begin(job.ID, job.Attempt, job.Queue, job.Kind, Step{Do: doOK})
	if err != nil {
		return err
	}
	h.end(ctx, seq, "returned")
	return nil
}

// run does what the job's plan says for this attempt.
func (h *poisonHandler) run(ctx context.Context, job *jobs.Job[Plan]) (result any, err error) {
	s := job.Payload.step(job.Attempt)
	seq, err := h.begin(job.ID, job.Attempt, job.Queue, job.Kind, s)
	if err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			h.end(ctx, seq, "panicked")
			panic(r) // on to the worker, which is what this test is about
		}
		h.end(ctx, seq, "returned")
	}()
	then := func() (any, error) {
		switch s.Then {
		case thenError:
			return nil, poisonError(s)
		case thenPanic:
			panic(poisonPanic(s))
		}
		return nil, nil
	}
	switch s.Do {
	case doOK:
		h.linger(ctx, seq, s)
		h.cancelAfter(job.ID, seq, s)
		return nil, nil
	case doError:
		return nil, poisonError(s)
	case doPanic:
		panic(poisonPanic(s))
	case doResult:
		return poisonResult(s), nil
	case doLate:
		time.Sleep(time.Duration(s.SleepMs) * time.Millisecond) // deaf to ctx
		return then()
	case doStuck:
		h.stuck(job, seq)
		return then()
	case doAckTx, doRollback:
		if err := h.ackTx(ctx, job, seq, s.Do == doAckTx); err != nil {
			return nil, err
		}
		h.linger(ctx, seq, s)
		h.cancelAfter(job.ID, seq, s)
		return then()
	case doSnooze:
		return nil, worker.Snooze(time.Duration(s.SnoozeMs) * time.Millisecond)
	case doCancel:
		return nil, worker.Cancel(poisonError(s))
	case doPermanent:
		return nil, worker.Permanent(poisonError(s))
	}
	return nil, fmt.Errorf("unknown step %q", s.Do)
}

// linger waits for the step's linger time or its context, whichever ends
// first: the test cancels lingering jobs.
func (h *poisonHandler) linger(ctx context.Context, seq int64, s Step) {
	if s.LingerMs == 0 {
		return
	}
	h.phase(seq, "linger")
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(s.LingerMs) * time.Millisecond):
	}
}

// cancelAfter cancels the job as an operator would, when the step says so,
// and records whether the cancel took effect.
func (h *poisonHandler) cancelAfter(id, seq int64, s Step) {
	if !s.CancelAfter {
		return
	}
	ctx, cancel := ledgerCtx()
	defer cancel()
	res, err := hopper.NewClient(h.pool).CancelJobs(ctx, id)
	what := "cancelled"
	switch {
	case err != nil:
		what = "failed: " + err.Error()
	case res[0].Err != nil && res[0].Was == "":
		what = "found it gone"
	case res[0].Err != nil:
		what = "found it " + string(res[0].Was)
	}
	h.exec("UPDATE poison_runs SET op_cancel = $2 WHERE seq = $1", seq, what)
}

// ackTx writes a ledger row and acknowledges the job in one transaction,
// then commits it or rolls it back. What AckTx and the commit said goes to
// the run's row.
func (h *poisonHandler) ackTx(ctx context.Context, job *jobs.Job[Plan], seq int64, commit bool) error {
	outcome := "committed"
	err := func() error {
		tx, err := h.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.Background()) //nolint:errcheck // a no-op after Commit
		if _, err := tx.Exec(ctx, "INSERT INTO poison_ledger (job_id, attempt, worker) VALUES ($1, $2, $3)", job.ID, job.Attempt, h.id); err != nil {
			return err
		}
		if err := worker.AckTx(ctx, tx, job); err != nil {
			return err
		}
		if !commit {
			outcome = "rolled back"
			return tx.Rollback(ctx)
		}
		return tx.Commit(ctx)
	}()
	if err != nil {
		outcome = "failed: " + err.Error()
	}
	h.exec("UPDATE poison_runs SET ack = $2 WHERE seq = $1", seq, outcome)
	return err
}

// stuck ignores its context until it sees that its slot came back: a run
// of the stuck queue (one slot per worker) started on this worker after
// this one. While it waits it keeps a probe (a healthy job) waiting in the
// queue, so that a free slot has something to run. It gives up at
// stuckCap, which the verdict counts as a slot never given back. The
// run's phase says which: freed or cap.
func (h *poisonHandler) stuck(job *jobs.Job[Plan], seq int64) {
	h.phase(seq, "stuck")
	h.phase(seq, h.waitForSlot(job, seq))
}

func (h *poisonHandler) waitForSlot(job *jobs.Job[Plan], seq int64) string {
	began := time.Now()
	for time.Since(began) < stuckCap {
		var freed bool
		var waiting int64
		ctx, cancel := ledgerCtx()
		err := h.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM poison_runs WHERE worker = $1 AND queue = $2 AND seq > $3),
			(SELECT count(*) FROM hopper_jobs WHERE queue = $2 AND state = 'pending')`, h.id, job.Queue, seq).Scan(&freed, &waiting)
		if err == nil && freed {
			cancel()
			return "freed"
		}
		if err == nil && waiting == 0 {
			_, err = enqueuePlanned(ctx, h.pool, healthyPlan(originProbe), job.Queue, 5, -1)
		}
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "poison worker %s: stuck job %d: %v\n", h.id, job.ID, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "cap"
}

// enqueuePlanned enqueues a job of plan and records it in poison_jobs, in
// one transaction.
func enqueuePlanned(ctx context.Context, pool *pgxpool.Pool, plan Plan, queue string, maxAttempts, round int) (id int64, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err := poisonJob.Enqueue(ctx, tx, plan, jobs.Queue(queue), jobs.MaxAttempts(maxAttempts))
		if err != nil {
			return err
		}
		id = res.ID
		_, err = tx.Exec(ctx, "INSERT INTO poison_jobs (id, origin, queue, max_attempts, plan, round) VALUES ($1, $2, $3, $4, $5, $6)",
			res.ID, plan.Origin, queue, maxAttempts, plan, round)
		return err
	})
	return id, err
}

// outcomeWriter is the OnOutcome hook: it hands each outcome to a
// goroutine that writes them in batches, so the hook stays quick.
type outcomeWriter struct {
	pool   *pgxpool.Pool
	worker string
	rows   chan []any
	done   chan struct{}
}

func newOutcomeWriter(pool *pgxpool.Pool, id string) *outcomeWriter {
	o := &outcomeWriter{pool: pool, worker: id, rows: make(chan []any, 100_000), done: make(chan struct{})}
	go o.loop()
	return o
}

func (o *outcomeWriter) hook(job *jobs.Row, out worker.Outcome, _ error) {
	o.rows <- []any{job.ID, job.Attempt, o.worker, job.Kind, string(out)}
}

func (o *outcomeWriter) loop() {
	defer close(o.done)
	for {
		row, ok := <-o.rows
		if !ok {
			return
		}
		batch := [][]any{row}
	more:
		for len(batch) < 1000 {
			select {
			case row, ok := <-o.rows:
				if !ok {
					break more
				}
				batch = append(batch, row)
			default:
				break more
			}
		}
		for try := 0; ; try++ {
			ctx, cancel := ledgerCtx()
			_, err := o.pool.CopyFrom(ctx, pgx.Identifier{"poison_outcomes"}, []string{"job_id", "attempt", "worker", "kind", "outcome"}, pgx.CopyFromRows(batch))
			cancel()
			if err == nil {
				break
			}
			fmt.Fprintf(os.Stderr, "poison worker %s: outcomes: %v\n", o.worker, err)
			if try == 20 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// close writes what is left; the worker has returned, so no hook runs.
func (o *outcomeWriter) close() {
	close(o.rows)
	<-o.done
}
