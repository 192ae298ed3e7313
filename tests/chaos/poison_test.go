package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// TestPoison throws poison at the runtime (issue 30): three worker
// processes run jobs whose handlers, drawn from one seed, succeed, fail
// with texts of arbitrary bytes, panic with arbitrary values, return
// results that PostgreSQL cannot store, ignore their context past their
// timeout, acknowledge in their own transactions and then fail, snooze and
// cancel themselves; an operator cancels jobs, pauses queues and freezes
// worker processes at random moments; schedules fire beside schedules whose
// payload functions fail. The verdict comes from the ledger the handlers
// write and from the queue's tables, never from logs (poison_verdict_test.go).
//
// The seed fixes the jobs' plans and the faults' choices, not the timing:
// a failure prints the seed, and the same seed throws the same poison.
//
//	HOPPER_POISON_SEED=n        the seed (default: the time)
//	HOPPER_POISON_DURATION=10m  how long the faults go on (default 15s)
//	HOPPER_POISON=full          10 minutes (make chaos, make chaos-poison)
//	HOPPER_POISON_STEPS=ok,panic   draw only these steps
//	HOPPER_POISON_TEXT=plain    every text and result storable: the runtime's faults without the storage's
//	HOPPER_POISON_VERBOSE=1     the workers' warnings on stderr
func TestPoison(t *testing.T) {
	testdb.Slow(t, "the poison suite: worker processes under a seeded plan")
	seed := poisonSeed(t)
	duration := poisonDuration()
	t.Logf("poison: seed %d, faults for %v", seed, duration)
	t.Cleanup(func() {
		if t.Failed() {
			env := ""
			for _, name := range []string{"HOPPER_POISON_DURATION", "HOPPER_POISON", "HOPPER_POISON_STEPS", "HOPPER_POISON_TEXT"} {
				if v := os.Getenv(name); v != "" {
					env += name + "=" + v + " "
				}
			}
			t.Logf("reproduce with: HOPPER_POISON_SEED=%d %sgo test -race -count=1 -run TestPoison ./tests/chaos", seed, env)
		}
	})
	b := newPoisonBed(t, seed, duration)
	for _, id := range b.ids {
		b.start(id)
	}

	began := time.Now()
	for round := 0; time.Since(began) < duration && !b.wedged; round++ {
		b.round(round)
	}
	b.settle()
	b.verdict()
}

func poisonSeed(t *testing.T) uint64 {
	if s := os.Getenv("HOPPER_POISON_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "HOPPER_POISON_SEED")
		return seed
	}
	return uint64(time.Now().UnixNano())
}

func poisonDuration() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("HOPPER_POISON_DURATION")); err == nil && d > 0 {
		return d
	}
	if os.Getenv("HOPPER_POISON") == "full" {
		return 10 * time.Minute
	}
	return 15 * time.Second
}

// poisonBed is the run: its schema and ledger, its worker processes, its
// random source, and what its faults did.
type poisonBed struct {
	*processBed
	client  *hopper.Client
	r       *rand.Rand
	seed    uint64
	url     string
	ids     []string
	allowed map[string]bool

	cancels []cancelRecord
	pauses  []pauseRecord
	freezes []string
	overdue map[string]string     // claim → how long it ran
	wedged  bool                  // a wait failed: later waits look once, and the verdict says what the tables show
	exits   map[string]chan error // what each worker process's Wait returned, once it exits
}

type cancelRecord struct {
	id        int64
	cancelled bool   // the cancel took effect
	was       string // the job's state when the cancel found it
	target    string // why it was picked: linger, stuck, live
}

// pauseRecord is a pause as the database saw it: from a moment after its
// commit to a moment before the resume began.
type pauseRecord struct {
	queue    string
	from, to time.Time
}

func newPoisonBed(t *testing.T, seed uint64, duration time.Duration) *poisonBed {
	t.Helper()
	pb := newProcessBed(t, duration+10*time.Minute,
		`CREATE TABLE poison_jobs (id bigint PRIMARY KEY, origin text NOT NULL, queue text NOT NULL, max_attempts int NOT NULL,
			plan jsonb NOT NULL, round int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`,
		// Every handler run, as it starts (committed at once) and as it ends.
		`CREATE TABLE poison_runs (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, job_id bigint NOT NULL, attempt int NOT NULL,
			worker text NOT NULL, queue text NOT NULL, kind text NOT NULL, step text NOT NULL, then_ text NOT NULL, timeout_ms int NOT NULL,
			phase text NOT NULL DEFAULT 'running', ack text, op_cancel text, ended_by text, cause text,
			at timestamptz NOT NULL DEFAULT clock_timestamp(), ended_at timestamptz)`,
		"CREATE INDEX ON poison_runs (worker, queue, seq)",
		// Every AckTx'd completion, in the acknowledging transaction.
		"CREATE TABLE poison_ledger (job_id bigint NOT NULL, attempt int NOT NULL, worker text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())",
		// Every outcome the workers reported (OnOutcome).
		`CREATE TABLE poison_outcomes (job_id bigint NOT NULL, attempt int NOT NULL, worker text NOT NULL, kind text NOT NULL,
			outcome text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`,
		// Every claim, with the start of its statement (now()): a claim that
		// began after a pause committed saw the pause.
		"CREATE TABLE poison_claims (job_id bigint NOT NULL, attempt int NOT NULL, queue text NOT NULL, claimed_at timestamptz NOT NULL)",
		"CREATE INDEX ON poison_claims (job_id, attempt)",
		`CREATE FUNCTION poison_claimed() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN INSERT INTO poison_claims VALUES (NEW.id, NEW.attempt, NEW.queue, now()); RETURN NULL; END $$`,
		`CREATE TRIGGER poison_claimed AFTER UPDATE OF state ON hopper_jobs FOR EACH ROW
		 WHEN (OLD.state <> 'running' AND NEW.state = 'running') EXECUTE FUNCTION poison_claimed()`,
		// Every job a schedule enqueues, logged in the enqueueing transaction
		// (see schedules_test.go): a slot fired twice shows, a fire rolled
		// back leaves nothing.
		"CREATE TABLE poison_fires (schedule text NOT NULL, slot timestamptz NOT NULL, tx bigint NOT NULL DEFAULT txid_current(), at timestamptz NOT NULL DEFAULT clock_timestamp())",
		`CREATE FUNCTION poison_fired() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN
		     INSERT INTO poison_fires (schedule, slot)
		     VALUES (split_part(substr(NEW.unique_key, 10), '@', 1), split_part(NEW.unique_key, '@', 2)::timestamptz);
		     RETURN NEW;
		 END $$`,
		`CREATE TRIGGER poison_fired BEFORE INSERT ON hopper_jobs FOR EACH ROW
		 WHEN (NEW.unique_key LIKE 'schedule:%') EXECUTE FUNCTION poison_fired()`)
	url := pb.db.URL
	if strings.Contains(url, "://") {
		url += "&pool_max_conns=24&application_name=" + pb.db.Schema
	} else {
		url += " pool_max_conns=24 application_name=" + pb.db.Schema
	}
	b := &poisonBed{
		processBed: pb,
		client:     hopper.NewClient(pb.db.Pool),
		r:          rand.New(rand.NewPCG(seed, seed>>32^0x9e3779b97f4a7c15)),
		seed:       seed,
		url:        url,
		ids:        []string{"p1", "p2", "p3"},
		overdue:    map[string]string{},
		exits:      map[string]chan error{},
	}
	// Before the process bed's own cleanup (cleanups run last first): the
	// workers are waited for here, so kill and reap them here.
	t.Cleanup(func() {
		for id, exited := range b.exits {
			if cmd := b.workers[id]; cmd != nil {
				_ = cmd.Process.Kill()
				<-exited
				delete(b.workers, id)
			}
		}
	})
	plainTexts = os.Getenv("HOPPER_POISON_TEXT") == "plain"
	if s := os.Getenv("HOPPER_POISON_STEPS"); s != "" {
		b.allowed = map[string]bool{}
		for _, do := range strings.Split(s, ",") {
			b.allowed[strings.TrimSpace(do)] = true
		}
	}
	pb.explain = func() string {
		return fmt.Sprintf("live jobs %d (running %d), handlers running %d, outcomes %d, runs %d",
			b.count("SELECT count(*) FROM hopper_jobs WHERE kind = 'poison.job'"),
			b.count("SELECT count(*) FROM hopper_jobs WHERE kind = 'poison.job' AND state = 'running'"),
			b.count("SELECT count(*) FROM poison_runs WHERE ended_at IS NULL"),
			b.count("SELECT count(*) FROM poison_outcomes"), b.count("SELECT count(*) FROM poison_runs"))
	}
	return b
}

// start starts worker id. The last one runs without LISTEN (PollOnly, as
// behind PgBouncer): it hears of an operator's cancel at its next
// heartbeat, not at once, so cancels land while it records results.
func (b *poisonBed) start(id string) {
	b.t.Helper()
	env := []string{poisonEnv + "=" + b.url, "HOPPER_POISON_ID=" + id, "HOPPER_POISON_SEED=" + strconv.FormatUint(b.seed, 10)}
	if id == b.ids[len(b.ids)-1] {
		env = append(env, "HOPPER_POISON_POLL_ONLY=1")
	}
	b.spawn(id, env...)
	cmd, exited := b.workers[id], make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	b.exits[id] = exited
}

// checkWorkers: every worker process still runs. Poison that kills a
// worker is the runtime's failure, and ends the run.
func (b *poisonBed) checkWorkers() {
	b.t.Helper()
	for _, id := range b.ids {
		if b.workers[id] == nil {
			continue
		}
		select {
		case err := <-b.exits[id]:
			b.t.Errorf("worker %s exited mid-run (%v): poison must not kill a worker", id, err)
			delete(b.workers, id)
			b.wedged = true
		default:
		}
	}
}

// now is the database's clock.
func (b *poisonBed) now() time.Time {
	b.t.Helper()
	var now time.Time
	require.NoError(b.t, b.db.Pool.QueryRow(b.ctx, "SELECT clock_timestamp()").Scan(&now))
	return now
}

// wait polls cond until it holds. After testdb.WaitLimit the run is stuck:
// the failure is recorded, later waits look once, and the verdict still
// says what the tables show.
func (b *poisonBed) wait(what string, cond func() bool) bool {
	b.t.Helper()
	limit := testdb.WaitLimit
	if b.wedged {
		limit = 0
	}
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			if b.wedged {
				b.t.Errorf("and, not waited for since the run is wedged: %s (%s)", what, b.explain())
			} else {
				b.t.Errorf("waited %v for: %s (%s)", limit, what, b.explain())
			}
			b.wedged = true
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// moment sleeps up to max: the faults come at random moments.
func (b *poisonBed) moment(max time.Duration) {
	time.Sleep(time.Duration(b.r.Int64N(int64(max))))
}

// round enqueues poison and a healthy sentinel per queue, throws faults at
// random moments, and waits until the sentinels are done and the healthy
// schedules have fired a slot of the round: healthy work goes on
// throughout the run.
func (b *poisonBed) round(round int) {
	b.t.Helper()
	began := b.now()
	for range 20 + b.r.IntN(20) {
		plan, queue, maxAttempts := drawPlan(b.r, b.allowed)
		_, err := enqueuePlanned(b.ctx, b.db.Pool, plan, queue, maxAttempts, round)
		require.NoError(b.t, err)
	}
	var sentinels []int64
	for _, q := range []string{queueKept, queuePlain, queueStuck} {
		id, err := enqueuePlanned(b.ctx, b.db.Pool, healthyPlan(originSentinel), q, 5, round)
		require.NoError(b.t, err)
		sentinels = append(sentinels, id)
	}
	b.moment(700 * time.Millisecond)
	if b.r.IntN(3) > 0 {
		b.cancelSome()
	}
	paused := ""
	if b.r.IntN(4) == 0 {
		paused = b.pause()
	}
	if b.r.IntN(4) == 0 {
		b.freeze()
	}
	b.moment(700 * time.Millisecond)
	if b.r.IntN(2) == 0 {
		b.cancelSome()
	}
	if paused != "" {
		b.moment(500 * time.Millisecond)
		b.resume(paused)
	}
	b.wait(fmt.Sprintf("round %d's healthy sentinels done", round), func() bool {
		return b.count("SELECT count(*) FROM hopper_jobs WHERE id = ANY($1)", sentinels) == 0
	})
	for _, s := range healthySchedules {
		b.wait(fmt.Sprintf("%s fires a slot during round %d", s.name, round), func() bool {
			return b.count("SELECT count(*) FROM poison_fires WHERE schedule = $1 AND slot > $2", s.name, began) > 0
		})
	}
	b.checkOverdue()
	b.checkWorkers()
}

// cancelSome cancels one to three poison jobs, as an operator would
// (hopper.Client, which `hopper cancel` uses): handlers lingering for a
// cancel, stuck handlers, and any live job.
func (b *poisonBed) cancelSome() {
	b.t.Helper()
	targets := map[string][]int64{
		"linger": b.ints(`SELECT r.job_id FROM poison_runs AS r JOIN poison_jobs AS p ON p.id = r.job_id AND p.origin = 'poison'
			WHERE r.ended_at IS NULL AND r.phase = 'linger' ORDER BY r.job_id`),
		"stuck": b.ints(`SELECT r.job_id FROM poison_runs AS r JOIN poison_jobs AS p ON p.id = r.job_id AND p.origin = 'poison'
			WHERE r.ended_at IS NULL AND r.phase = 'stuck' ORDER BY r.job_id`),
		"live": b.ints(`SELECT j.id FROM hopper_jobs AS j JOIN poison_jobs AS p ON p.id = j.id AND p.origin = 'poison' ORDER BY j.id`),
	}
	why := map[int64]string{}
	for range 1 + b.r.IntN(3) {
		kind := []string{"linger", "stuck", "live"}[b.r.IntN(3)]
		if ids := targets[kind]; len(ids) > 0 {
			why[ids[b.r.IntN(len(ids))]] = kind
		}
	}
	if len(why) == 0 {
		return
	}
	ids := make([]int64, 0, len(why))
	for id := range why {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	res, err := b.client.CancelJobs(b.ctx, ids...)
	require.NoError(b.t, err)
	for _, r := range res {
		b.cancels = append(b.cancels, cancelRecord{id: r.ID, cancelled: r.Err == nil, was: string(r.Was), target: why[r.ID]})
	}
}

// pause pauses a random queue and returns it.
func (b *poisonBed) pause() string {
	b.t.Helper()
	q := []string{queueKept, queuePlain, queueStuck}[b.r.IntN(3)]
	_, err := b.client.PauseQueue(b.ctx, q)
	require.NoError(b.t, err)
	b.pauses = append(b.pauses, pauseRecord{queue: q, from: b.now()})
	return q
}

func (b *poisonBed) resume(q string) {
	b.t.Helper()
	b.pauses[len(b.pauses)-1].to = b.now()
	_, err := b.client.ResumeQueue(b.ctx, q)
	require.NoError(b.t, err)
}

// freeze stops a worker process (SIGSTOP: a long GC pause, a VM frozen)
// until the others have swept its leases, then lets it go on: its handlers
// have lost their jobs. It picks, when there is one, a worker running a
// stuck handler with a long timeout, whose claim is lost long before its
// hard deadline.
func (b *poisonBed) freeze() {
	b.t.Helper()
	victims := b.strings(`SELECT worker FROM poison_runs WHERE ended_at IS NULL AND phase = 'stuck' AND timeout_ms = $1 ORDER BY seq`,
		int(longTimeout/time.Millisecond))
	if len(victims) == 0 {
		victims = b.ids
	}
	victim := victims[b.r.IntN(len(victims))]
	cmd := b.workers[victim]
	if cmd == nil || cmd.Process.Signal(syscall.SIGSTOP) != nil {
		return // it exited: checkWorkers says so
	}
	b.freezes = append(b.freezes, victim)
	// Until its leases are swept; at most a few leases (a frozen worker may
	// hold a row lock that keeps the sweep off one of them).
	frozen := time.Now()
	for b.count("SELECT count(*) FROM hopper_jobs WHERE state = 'running' AND lease_owner = $1", victim) > 0 &&
		time.Since(frozen) < 3*poisonLease {
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(b.t, cmd.Process.Signal(syscall.SIGCONT))
}

// overdueAfter is how long a claim may stay running: the longest timeout,
// AbandonAfter, a heartbeat to notice, a lease to expire and two sweeps to
// find it, and 10s for a loaded machine. A job held past it is a job the
// runtime keeps extending (a handler never abandoned, a result never
// recorded), not a slow one.
const overdueAfter = longTimeout + poisonAbandonAfter + poisonHeartbeat + poisonLease + 2*poisonSweep + 10*time.Second

// checkOverdue records every claim running longer than overdueAfter.
func (b *poisonBed) checkOverdue() {
	b.t.Helper()
	rows, err := b.db.Pool.Query(b.ctx, `SELECT j.id, j.attempt, j.lease_owner, clock_timestamp() - c.claimed_at
		FROM hopper_jobs AS j JOIN poison_claims AS c ON c.job_id = j.id AND c.attempt = j.attempt
		WHERE j.state = 'running' AND clock_timestamp() - c.claimed_at > $1`, overdueAfter)
	require.NoError(b.t, err)
	defer rows.Close()
	for rows.Next() {
		var id int64
		var attempt int
		var owner string
		var running time.Duration
		require.NoError(b.t, rows.Scan(&id, &attempt, &owner, &running))
		b.overdue[fmt.Sprintf("job %d attempt %d on %s", id, attempt, owner)] = running.Round(time.Second).String()
	}
	require.NoError(b.t, rows.Err())
}

// settle ends the run: every job ended and every handler returned, the
// healthy schedules still firing, every tick they fired done; then the
// workers stop (SIGTERM), which writes the last outcomes.
func (b *poisonBed) settle() {
	b.t.Helper()
	b.wait("every job ended and every handler returned", func() bool {
		return b.count("SELECT count(*) FROM hopper_jobs WHERE kind = 'poison.job'") == 0 &&
			b.count("SELECT count(*) FROM poison_runs WHERE ended_at IS NULL AND kind = 'poison.job'") == 0
	})
	b.checkOverdue()
	end := b.now()
	for _, s := range healthySchedules {
		b.wait(s.name+" fires a slot after the run", func() bool {
			return b.count("SELECT count(*) FROM poison_fires WHERE schedule = $1 AND slot > $2", s.name, end) > 0
		})
	}
	b.wait("every tick fired during the run done", func() bool {
		return b.count("SELECT count(*) FROM hopper_jobs WHERE kind = 'poison.tick' AND split_part(substr(unique_key, 10), '@', 1) = ANY($1) AND created_at <= $2",
			healthyNames(), end) == 0
	})
	b.checkWorkers()
	for _, id := range b.ids {
		cmd := b.workers[id]
		if cmd == nil {
			continue
		}
		require.NoError(b.t, cmd.Process.Signal(syscall.SIGTERM))
		if err := <-b.exits[id]; err != nil {
			b.t.Errorf("worker %s on SIGTERM: %v", id, err) // exits 0 once Run returns
		}
		delete(b.workers, id)
	}
}

func healthyNames() []string {
	names := make([]string, len(healthySchedules))
	for i, s := range healthySchedules {
		names[i] = s.name
	}
	return names
}

func (b *poisonBed) ints(query string, args ...any) []int64 {
	b.t.Helper()
	rows, err := b.db.Pool.Query(b.ctx, query, args...)
	require.NoError(b.t, err)
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var n int64
		require.NoError(b.t, rows.Scan(&n))
		out = append(out, n)
	}
	require.NoError(b.t, rows.Err())
	return out
}

func (b *poisonBed) strings(query string, args ...any) []string {
	b.t.Helper()
	rows, err := b.db.Pool.Query(b.ctx, query, args...)
	require.NoError(b.t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(b.t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(b.t, rows.Err())
	return out
}

// counts renders a count per name, largest first.
func counts(m map[string]int) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		return m[names[i]] > m[names[j]] || m[names[i]] == m[names[j]] && names[i] < names[j]
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %d", n, m[n])
	}
	return strings.Join(parts, ", ")
}
