package chaos

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// The poison suite's verdict. Every job must end exactly once, where its
// plan and the faults explain; every outcome a worker reported must be
// what the tables show; no claim may stay running past its bound, no
// stuck handler keep its slot, no pause let a claim through; the healthy
// schedules must fire every slot, once. It reads the ledger (poison_runs,
// poison_ledger, poison_outcomes, poison_claims, poison_fires) and
// Hopper's tables, never the logs.

// The rules, as the failures name them.
const (
	ruleEnded     = "every job ends exactly once (gone, kept in the history, or dead)"
	ruleExplained = "every job ends as its plan and the faults explain"
	ruleHealthy   = "healthy jobs (sentinels, probes) complete"
	ruleAttempts  = "attempts are bounded by max attempts, one run per claim"
	ruleLedger    = "a completion committed with AckTx is the job's completion"
	ruleCancel    = "a job an operator cancelled ends cancelled"
	ruleResult    = "a storable result is kept as returned"
	ruleReported  = "one outcome reported per run"
	ruleOutcome   = "every outcome reported matches the tables"
	ruleRunning   = "no claim stays running past its timeout + AbandonAfter + a lease"
	ruleSlot      = "a stuck handler's slot comes back (abandoned, cancelled or lost)"
	rulePause     = "no claim takes a job of a paused queue"
	ruleSchedule  = "healthy schedules fire every slot once; no schedule fires a slot twice"
)

// violations collects what broke each rule.
type violations map[string][]string

func (v violations) add(rule, format string, args ...any) {
	v[rule] = append(v[rule], fmt.Sprintf(format, args...))
}

// fate is everything the tables say of one job.
type fate struct {
	id          int64
	origin      string
	queue       string
	maxAttempts int
	plan        Plan
	live        string // its state while live, "" once ended
	dead        *deadRow
	hist        *histRow
	runs        map[int][]poisonRun // by attempt
	ledger      []int               // attempts whose AckTx committed
	outcomes    map[int][]reported  // by attempt
	cancelled   bool                // an operator's cancel took effect
}

type deadRow struct {
	state, reason        string
	attempt, maxAttempts int
	errors               []jobs.AttemptError
}

type histRow struct {
	attempt, maxAttempts int
	errors               []jobs.AttemptError
	result               []byte
}

type poisonRun struct{ worker, step, endedBy, cause, ack, opCancel string }

type reported struct{ worker, outcome string }

func (f *fate) String() string { return fmt.Sprintf("job %d (%s, %s)", f.id, f.origin, f.queue) }

// done: completed (deleted, or kept in the history).
func (f *fate) done() bool { return f.live == "" && f.dead == nil }

// end says where the job ended, for messages.
func (f *fate) end() string {
	switch {
	case f.live != "":
		return "still " + f.live
	case f.dead != nil:
		return fmt.Sprintf("%s at attempt %d/%d (%q)", f.dead.state, f.dead.attempt, f.dead.maxAttempts, clip(f.dead.reason))
	case f.hist != nil:
		return fmt.Sprintf("completed by attempt %d (kept)", f.hist.attempt)
	}
	return fmt.Sprintf("completed by attempt %d", f.last())
}

// last is the latest attempt anything shows.
func (f *fate) last() int {
	n := 0
	for a := range f.runs {
		n = max(n, a)
	}
	if f.dead != nil {
		n = max(n, f.dead.attempt)
	}
	if f.hist != nil {
		n = max(n, f.hist.attempt)
	}
	return n
}

// decider is the attempt that ended the job: the one its final row
// names, else (completed, not kept) the last that ran; only the last claim
// can end a job, the fence sees to that.
func (f *fate) decider() int {
	switch {
	case f.dead != nil:
		return f.dead.attempt
	case f.hist != nil:
		return f.hist.attempt
	}
	return f.last()
}

// entryAt is the error history's entry for attempt a, other than a
// sweep's: a result of a handler's that the worker recorded.
func (f *fate) entryAt(a int) *jobs.AttemptError {
	var errs []jobs.AttemptError
	switch {
	case f.dead != nil:
		errs = f.dead.errors
	case f.hist != nil:
		errs = f.hist.errors
	}
	for i := range errs {
		if errs[i].Attempt == a && errs[i].Error != "lease expired" {
			return &errs[i]
		}
	}
	return nil
}

// runOn says how the run of attempt a on worker went, for messages.
func (f *fate) runOn(a int, worker string) string {
	for _, r := range f.runs[a] {
		if r.worker == worker {
			return fmt.Sprintf(" [the run %s, context %q, AckTx %q, operator's cancel %q]", r.endedBy, r.cause, clip(r.ack), r.opCancel)
		}
	}
	return ""
}

func (f *fate) ran(a int, worker string) bool {
	return slices.ContainsFunc(f.runs[a], func(r poisonRun) bool { return r.worker == worker })
}

// ackFailed reports whether a run of attempt a called AckTx and AckTx
// itself failed (its statement outlived the job's timeout while a frozen
// worker held a lock, say): the handler returned that error, so the step,
// whatever it asked for, failed.
func (f *fate) ackFailed(a int) bool {
	return slices.ContainsFunc(f.runs[a], func(r poisonRun) bool { return strings.HasPrefix(r.ack, "failed: ") })
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// verdict judges the run and reports its figures.
func (b *poisonBed) verdict() {
	b.t.Helper()
	fates := b.fates()
	v := violations{}
	for _, f := range fates {
		judgeJob(f, b.wedged, v)
	}
	b.judgeRest(v)
	b.figures(fates)
	rules := []string{ruleEnded, ruleExplained, ruleHealthy, ruleAttempts, ruleLedger, ruleCancel, ruleResult,
		ruleReported, ruleOutcome, ruleRunning, ruleSlot, rulePause, ruleSchedule}
	for _, rule := range rules {
		assert.Zero(b.t, len(v[rule]), "%s: broken %d times:\n%s", rule, len(v[rule]), v.examples(rule))
	}
}

// examples shows one example of each way a rule was broken (the messages
// with their numbers taken out), with how often.
func (v violations) examples(rule string) string {
	digits := regexp.MustCompile(`[0-9]+`)
	count, first := map[string]int{}, map[string]string{}
	for _, m := range v[rule] {
		key := digits.ReplaceAllString(m, "#")
		if count[key]++; count[key] == 1 {
			first[key] = m
		}
	}
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return count[keys[i]] > count[keys[j]] || count[keys[i]] == count[keys[j]] && keys[i] < keys[j]
	})
	var out strings.Builder
	for i, k := range keys {
		if i == 12 {
			fmt.Fprintf(&out, "  … and %d more ways\n", len(keys)-i)
			break
		}
		fmt.Fprintf(&out, "  %d× like: %s\n", count[k], first[k])
	}
	return out.String()
}

// judgeJob applies the rules to one job. In a wedged run the workers
// were stopped before every job ended, so results left unrecorded are
// no surprise.
func judgeJob(f *fate, wedged bool, v violations) {
	kept := f.queue == queueKept
	decider := f.decider()
	switch {
	case f.live != "":
		v.add(ruleEnded, "%s is %s", f, f.end())
	case f.dead != nil && f.hist != nil:
		v.add(ruleEnded, "%s is both dead (attempt %d) and kept as completed (attempt %d)", f, f.dead.attempt, f.hist.attempt)
	case f.done() && kept && f.hist == nil:
		v.add(ruleEnded, "%s completed in a queue that keeps history, but is not in it", f)
	case !kept && f.hist != nil:
		v.add(ruleEnded, "%s is kept in the history, though its queue keeps none", f)
	}
	if f.origin != originPoison && !f.done() {
		v.add(ruleHealthy, "%s ended %s", f, f.end())
	}

	// Attempts: one run per claim, no more claims than attempts.
	maxNow := 0
	switch {
	case f.dead != nil:
		maxNow = f.dead.maxAttempts
	case f.hist != nil:
		maxNow = f.hist.maxAttempts
	}
	for a, runs := range f.runs {
		if len(runs) > 1 {
			v.add(ruleAttempts, "%s: the claim of attempt %d ran %d times", f, a, len(runs))
		}
		if maxNow > 0 && a > maxNow {
			v.add(ruleAttempts, "%s ran attempt %d of %d", f, a, maxNow)
		}
	}

	// The ledger: an AckTx that committed completed the job, by its claim.
	if len(f.ledger) > 1 {
		v.add(ruleLedger, "%s: AckTx committed %d times (attempts %v)", f, len(f.ledger), f.ledger)
	}
	for _, a := range f.ledger {
		if !f.done() || a != decider {
			v.add(ruleLedger, "%s: AckTx committed at attempt %d, but the job ended %s", f, a, f.end())
		}
	}
	if f.cancelled && (f.dead == nil || f.dead.state != "cancelled") {
		v.add(ruleCancel, "%s was cancelled by an operator, but ended %s", f, f.end())
	}

	if f.live == "" {
		judgeEnd(f, kept, decider, v)
	}
	judgeOutcomes(f, kept, decider, wedged, v)
}

// judgeEnd: the job's end is what the step of its deciding attempt asks
// for, or what an operator or a sweep did.
func judgeEnd(f *fate, kept bool, decider int, v violations) {
	s := f.plan.step(decider)
	c := classOf(s, kept)
	acked := slices.Contains(f.ledger, decider)
	switch {
	case f.done():
		switch {
		case len(f.runs[decider]) == 0:
			v.add(ruleExplained, "%s completed by attempt %d, which never ran", f, decider)
		case c != classDone && c != classEither && !acked:
			v.add(ruleExplained, "%s completed by attempt %d, whose step %s should end %s", f, decider, stepName(s), c)
		case f.hist != nil && s.Do == doResult && c == classDone && !acked:
			judgeResult(f, s, v)
		}
	case f.dead.state == "cancelled":
		// An operator's cancel explains it; otherwise its handler's, which
		// left an entry for the attempt.
		if !f.cancelled && (c != classCancel || f.entryAt(decider) == nil) {
			v.add(ruleExplained, "%s cancelled at attempt %d, whose step %s should end %s, and no operator cancelled it", f, decider, stepName(s), c)
		}
	case f.dead.reason == "out of attempts":
		e := f.entryAt(decider)
		switch {
		case decider < f.dead.maxAttempts:
			v.add(ruleAttempts, "%s dead out of attempts at attempt %d of %d", f, decider, f.dead.maxAttempts)
		case e == nil:
			v.add(ruleExplained, "%s dead out of attempts, with no failure recorded for attempt %d", f, decider)
		case c != classFail && c != classEither && !f.ackFailed(decider):
			v.add(ruleExplained, "%s dead out of attempts, but the step of attempt %d, %s, should end %s", f, decider, s.Do, c)
		}
	case f.dead.reason == "lease expired on last attempt":
		if decider < f.dead.maxAttempts {
			v.add(ruleAttempts, "%s swept dead at attempt %d of %d", f, decider, f.dead.maxAttempts)
		}
		for _, o := range f.outcomes[decider] {
			if recorded(o.outcome) {
				v.add(ruleExplained, "%s swept dead at attempt %d, whose result %s had been recorded", f, decider, o.outcome)
			}
		}
	case strings.HasPrefix(f.dead.reason, "permanent failure"):
		if c != classPermanent {
			v.add(ruleExplained, "%s dead as a permanent failure, but the step of attempt %d, %s, should end %s", f, decider, s.Do, c)
		}
	default:
		v.add(ruleExplained, "%s dead for an unexpected reason: %s", f, f.end())
	}
}

// recorded says whether an outcome is a result the database took.
func recorded(o string) bool {
	switch worker.Outcome(o) {
	case worker.OutcomeDone, worker.OutcomeFailed, worker.OutcomeDead, worker.OutcomeCancelled, worker.OutcomeSnoozed:
		return true
	}
	return false
}

// judgeResult: a storable result is kept as the handler returned it.
func judgeResult(f *fate, s Step, v violations) {
	want, err := json.Marshal(poisonResult(s))
	if err != nil {
		v.add(ruleResult, "%s: the expected result does not marshal: %v", f, err)
		return
	}
	var w, got any
	_ = json.Unmarshal(want, &w)
	if f.hist.result != nil {
		if err := json.Unmarshal(f.hist.result, &got); err != nil {
			v.add(ruleResult, "%s: the kept result does not parse: %v", f, err)
			return
		}
	}
	if !reflect.DeepEqual(w, got) {
		v.add(ruleResult, "%s: kept %s, returned %s", f, clip(string(f.hist.result)), clip(string(want)))
	}
}

// judgeOutcomes: one outcome per run, each matching the tables.
func judgeOutcomes(f *fate, kept bool, decider int, wedged bool, v violations) {
	for a, runs := range f.runs {
		for _, r := range runs {
			n := 0
			for _, o := range f.outcomes[a] {
				if o.worker == r.worker {
					n++
				}
			}
			if n != 1 {
				v.add(ruleReported, "%s: the run of attempt %d on %s (step %s, %s, context %q) was reported %d times",
					f, a, r.worker, r.step, r.endedBy, r.cause, n)
			}
		}
	}
	last := f.last()
	for a, outs := range f.outcomes {
		s := f.plan.step(a)
		c := classOf(s, kept)
		acked := slices.Contains(f.ledger, a)
		for _, o := range outs {
			if !f.ran(a, o.worker) {
				v.add(ruleReported, "%s: %s reported for attempt %d on %s, which never ran there", f, o.outcome, a, o.worker)
			}
			e := f.entryAt(a)
			mine := e != nil && e.Owner == o.worker
			bad := func(format string, args ...any) {
				v.add(ruleOutcome, "%s: attempt %d (step %s) reported %s on %s, but %s%s", f, a, stepName(s), o.outcome, o.worker,
					fmt.Sprintf(format, args...), f.runOn(a, o.worker))
			}
			switch worker.Outcome(o.outcome) {
			case worker.OutcomeDone:
				switch {
				case !f.done():
					bad("the job ended %s", f.end())
				case a != decider:
					bad("the job was %s", f.end())
				case c != classDone && c != classEither && !acked:
					bad("the step should end %s", c)
				}
			case worker.OutcomeFailed:
				switch {
				// An AckTx step ends done because its ack commits; one whose
				// AckTx did not (its timeout came first, on a busy machine)
				// returned that error, and failed.
				case c != classFail && c != classEither && !(s.Do == doAckTx && !acked) && !f.ackFailed(a):
					bad("the step should end %s", c)
				case last <= a && !f.cancelled:
					bad("it never ran again: %s", f.end())
				case (f.dead != nil || f.hist != nil) && !mine:
					bad("its history has no entry of this worker's for the attempt")
				}
			case worker.OutcomeDead:
				switch {
				case f.dead == nil || f.dead.state != "dead" || f.dead.attempt != a:
					bad("the job ended %s", f.end())
				case !mine:
					bad("its history has no entry of this worker's for the attempt")
				case strings.HasPrefix(f.dead.reason, "permanent failure") != (c == classPermanent):
					bad("it died %q", clip(f.dead.reason))
				}
			case worker.OutcomeCancelled:
				switch {
				case f.dead == nil || f.dead.state != "cancelled" || f.dead.attempt != a:
					bad("the job ended %s", f.end())
				case c != classCancel && !f.cancelled:
					bad("neither the step nor an operator cancelled it")
				}
			case worker.OutcomeSnoozed:
				switch {
				case s.Do != doSnooze:
					bad("the step does not snooze")
				case last <= a && !f.cancelled:
					bad("it never ran again: %s", f.end())
				}
			case worker.OutcomeRefused, worker.OutcomeAbandoned:
				switch {
				case acked:
					bad("its AckTx committed: the job was completed by this claim")
				case f.hist != nil && f.hist.attempt == a:
					bad("the history holds the job, completed by this claim")
				case f.done() && f.hist == nil && a == decider:
					bad("the job was completed by this claim, the last")
				case mine && f.dead != nil && f.dead.attempt == a:
					bad("its result took effect: %s", f.end())
				}
			case worker.OutcomeUnconfirmed:
				// The reply was lost (a frozen worker may see that): anything goes.
			default:
				if !wedged {
					bad("no worker is shut down before every job ended")
				}
			}
		}
	}
}

func stepName(s Step) string {
	name := s.Do
	if s.Then != "" {
		name += "/" + s.Then
	}
	switch {
	case s.LingerMs > 0:
		name += ", lingering"
	case s.CancelAfter:
		name += ", then an operator's cancel"
	}
	return name
}

// judgeRest: claims running too long, stuck slots, pauses, schedules.
func (b *poisonBed) judgeRest(v violations) {
	b.t.Helper()
	for claim, running := range b.overdue {
		v.add(ruleRunning, "%s was running after %s", claim, running)
	}
	rows, err := b.db.Pool.Query(b.ctx, `SELECT job_id, attempt, worker, timeout_ms, coalesce(cause, '') FROM poison_runs WHERE phase = 'cap'`)
	require.NoError(b.t, err)
	for rows.Next() {
		var id int64
		var attempt, timeout int
		var w, cause string
		require.NoError(b.t, rows.Scan(&id, &attempt, &w, &timeout, &cause))
		v.add(ruleSlot, "job %d attempt %d on %s (timeout %dms, context ended by %q): no other run took its slot in %v", id, attempt, w, timeout, cause, stuckCap)
	}
	require.NoError(b.t, rows.Err())
	rows.Close()

	for _, p := range b.pauses {
		if p.to.IsZero() {
			continue
		}
		if n := b.count("SELECT count(*) FROM poison_claims WHERE queue = $1 AND claimed_at > $2 AND claimed_at < $3", p.queue, p.from, p.to); n > 0 {
			v.add(rulePause, "%d claims of queue %s while it was paused (%s to %s)", n, p.queue, p.from.Format("15:04:05.000"), p.to.Format("15:04:05.000"))
		}
	}

	for _, name := range append(healthyNames(), poisonScheduleNames...) {
		if n := b.count("SELECT count(*) FROM (SELECT slot FROM poison_fires WHERE schedule = $1 GROUP BY slot HAVING count(*) > 1) AS d", name); n > 0 {
			v.add(ruleSchedule, "%s fired %d slots twice", name, n)
		}
	}
	for _, s := range healthySchedules {
		slots := b.times("SELECT DISTINCT slot FROM poison_fires WHERE schedule = $1 ORDER BY slot", s.name)
		if len(slots) == 0 {
			v.add(ruleSchedule, "%s never fired", s.name)
		}
		for i := 1; i < len(slots); i++ {
			if d := slots[i].Sub(slots[i-1]); d != s.every {
				v.add(ruleSchedule, "%s skipped from %s to %s", s.name, slots[i-1].Format("15:04:05"), slots[i].Format("15:04:05"))
			}
		}
	}
	if n := b.count("SELECT count(*) FROM hopper_dead_jobs WHERE kind = 'poison.tick'"); n > 0 {
		v.add(ruleSchedule, "%d of the schedules' jobs are dead", n)
	}
}

func (b *poisonBed) times(query string, args ...any) []time.Time {
	b.t.Helper()
	rows, err := b.db.Pool.Query(b.ctx, query, args...)
	require.NoError(b.t, err)
	defer rows.Close()
	var out []time.Time
	for rows.Next() {
		var t time.Time
		require.NoError(b.t, rows.Scan(&t))
		out = append(out, t)
	}
	require.NoError(b.t, rows.Err())
	return out
}

// fates reads what the tables say of every job the run enqueued.
func (b *poisonBed) fates() map[int64]*fate {
	b.t.Helper()
	fates := map[int64]*fate{}
	scan := func(query string, dest func() []any, apply func(f *fate)) {
		rows, err := b.db.Pool.Query(b.ctx, query)
		require.NoError(b.t, err)
		defer rows.Close()
		for rows.Next() {
			var id int64
			d := dest()
			require.NoError(b.t, rows.Scan(append([]any{&id}, d...)...))
			f := fates[id]
			if f == nil {
				f = &fate{id: id, runs: map[int][]poisonRun{}, outcomes: map[int][]reported{}}
				fates[id] = f
			}
			apply(f)
		}
		require.NoError(b.t, rows.Err())
	}
	var origin, queue, state, reason, w, step, endedBy, cause, ack, opCancel, outcome string
	var attempt, maxAttempts int
	var plan Plan
	var errs, result []byte
	scan("SELECT id, origin, queue, max_attempts, plan FROM poison_jobs",
		func() []any { return []any{&origin, &queue, &maxAttempts, &plan} },
		func(f *fate) { f.origin, f.queue, f.maxAttempts, f.plan = origin, queue, maxAttempts, plan })
	scan("SELECT id, state FROM hopper_jobs WHERE kind = 'poison.job'",
		func() []any { return []any{&state} },
		func(f *fate) { f.live = state })
	scan("SELECT id, state, reason, attempt, max_attempts, errors FROM hopper_dead_jobs WHERE kind = 'poison.job'",
		func() []any { return []any{&state, &reason, &attempt, &maxAttempts, &errs} },
		func(f *fate) {
			f.dead = &deadRow{state: state, reason: reason, attempt: attempt, maxAttempts: maxAttempts}
			f.dead.errors, _ = jobs.ParseErrors(errs)
		})
	scan("SELECT id, attempt, max_attempts, errors, result FROM hopper_job_history WHERE kind = 'poison.job'",
		func() []any { return []any{&attempt, &maxAttempts, &errs, &result} },
		func(f *fate) {
			f.hist = &histRow{attempt: attempt, maxAttempts: maxAttempts, result: slices.Clone(result)}
			f.hist.errors, _ = jobs.ParseErrors(errs)
		})
	scan(`SELECT job_id, attempt, worker, step, coalesce(ended_by, ''), coalesce(cause, ''), coalesce(ack, ''), coalesce(op_cancel, '')
		FROM poison_runs WHERE kind = 'poison.job'`,
		func() []any { return []any{&attempt, &w, &step, &endedBy, &cause, &ack, &opCancel} },
		func(f *fate) {
			f.runs[attempt] = append(f.runs[attempt], poisonRun{worker: w, step: step, endedBy: endedBy, cause: cause, ack: ack, opCancel: opCancel})
			if opCancel == "cancelled" {
				f.cancelled = true // by its handler, as an operator would
			}
		})
	scan("SELECT job_id, attempt FROM poison_ledger",
		func() []any { return []any{&attempt} },
		func(f *fate) { f.ledger = append(f.ledger, attempt) })
	scan("SELECT job_id, attempt, worker, outcome FROM poison_outcomes WHERE kind = 'poison.job'",
		func() []any { return []any{&attempt, &w, &outcome} },
		func(f *fate) {
			f.outcomes[attempt] = append(f.outcomes[attempt], reported{worker: w, outcome: outcome})
		})
	for _, c := range b.cancels {
		if c.cancelled {
			fates[c.id].cancelled = true
		}
	}
	for id, f := range fates {
		require.NotEmpty(b.t, f.plan.Steps, "job %d is not the run's", id)
	}
	return fates
}

// figures logs what the run did: jobs, steps, faults, ends and outcomes.
func (b *poisonBed) figures(fates map[int64]*fate) {
	b.t.Helper()
	origins, queues, steps, ends, outcomes, cancels := map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	runs := 0
	for _, f := range fates {
		origins[f.origin]++
		if f.origin != originPoison {
			continue
		}
		queues[f.queue]++
		for _, rs := range f.runs {
			for _, r := range rs {
				runs++
				steps[r.step]++
			}
		}
		for _, os := range f.outcomes {
			for _, o := range os {
				outcomes[o.outcome]++
			}
		}
		switch {
		case f.live != "":
			ends["live"]++
		case f.dead != nil && f.dead.state == "cancelled" && f.cancelled:
			ends["cancelled by an operator"]++
		case f.dead != nil && f.dead.state == "cancelled":
			ends["cancelled by its handler"]++
		case f.dead != nil && strings.HasPrefix(f.dead.reason, "permanent failure"):
			ends["dead: permanent"]++
		case f.dead != nil:
			ends["dead: "+f.dead.reason]++
		case f.hist != nil:
			ends["completed, kept"]++
		default:
			ends["completed"]++
		}
	}
	for _, c := range b.cancels {
		if c.cancelled {
			cancels[c.target+" (cancelled "+c.was+")"]++
		} else {
			cancels[c.target+" (finished already)"]++
		}
	}
	for _, what := range b.strings("SELECT op_cancel FROM poison_runs WHERE op_cancel IS NOT NULL") {
		cancels["as the handler returns ("+what+")"]++
	}
	fires := map[string]int{}
	for _, name := range append(healthyNames(), poisonScheduleNames...) {
		fires[name] = int(b.count("SELECT count(DISTINCT slot) FROM poison_fires WHERE schedule = $1", name))
	}
	b.t.Logf("poison: jobs %s; poison by queue: %s", counts(origins), counts(queues))
	b.t.Logf("poison: %d runs of poison jobs by step: %s", runs, counts(steps))
	b.t.Logf("poison: ends: %s", counts(ends))
	b.t.Logf("poison: outcomes reported: %s", counts(outcomes))
	b.t.Logf("poison: faults: cancels: %s; %d pauses, %d freezes (%s)", counts(cancels), len(b.pauses), len(b.freezes), strings.Join(b.freezes, " "))
	b.t.Logf("poison: slots fired: %s; stuck handlers: %s", counts(fires),
		fmt.Sprint(b.strings("SELECT phase || ' ' || count(*) FROM poison_runs WHERE step = 'stuck' GROUP BY phase ORDER BY 1")))
}
