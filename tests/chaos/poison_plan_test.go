package chaos

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// The poison suite's plans: what each job's handler does on each attempt,
// drawn from the run's seed, and the arbitrary values (texts, panic values,
// results) it throws at the runtime. A plan is the job's payload, so a
// worker process needs nothing but the job to know what to do; the values
// themselves are made in the worker from a per-step seed, since a payload
// (jsonb) cannot carry NUL or invalid UTF-8.

// What a step does.
const (
	doOK        = "ok"        // return nil
	doError     = "error"     // return an error whose text is poison
	doPanic     = "panic"     // panic with a poison value
	doResult    = "result"    // return a poison result (HandleWithResult)
	doLate      = "late"      // ignore ctx, sleep past the timeout, then Then
	doStuck     = "stuck"     // ignore ctx until the slot is given back, then Then
	doAckTx     = "acktx"     // AckTx with a ledger row, commit, then Then
	doRollback  = "rollback"  // AckTx with a ledger row, roll back, then Then
	doSnooze    = "snooze"    // Snooze
	doCancel    = "cancel"    // Cancel, with a poison reason
	doPermanent = "permanent" // Permanent, with a poison error
)

// What a step returns after its action (late, stuck, acktx, rollback).
const (
	thenNil   = "nil"
	thenError = "error"
	thenPanic = "panic"
)

// The queues: kept keeps completed jobs in the history (and with them the
// handlers' results); plain does not; stuck runs one job at a time per
// worker, so that a stuck handler's slot can be seen to come back; ticks
// runs the schedules' jobs.
const (
	queueKept  = "kept"
	queuePlain = "plain"
	queueStuck = "stuck"
	queueTicks = "ticks"
)

// Where a job came from: the seed's poison, the test's healthy sentinels
// (one per queue and round), or the probes a stuck handler enqueues to
// find out whether its slot came back.
const (
	originPoison   = "poison"
	originSentinel = "sentinel"
	originProbe    = "probe"
)

// Timing of the worker processes; the verdict's bounds are made of these.
const (
	poisonLease        = 1500 * time.Millisecond
	poisonHeartbeat    = 500 * time.Millisecond
	poisonSweep        = 300 * time.Millisecond
	poisonAbandonAfter = 500 * time.Millisecond
	shortTimeout       = 300 * time.Millisecond // late and stuck steps: abandoned soon
	longTimeout        = 3 * time.Second        // stuck steps lost or cancelled well before their hard deadline
	defaultTimeout     = 2 * time.Second        // every other step; lingering fits in it
	// stuckCap bounds how long a stuck handler waits for its slot to come
	// back: far beyond any timeout + AbandonAfter + heartbeat, so reaching
	// it means the slot was never given back, not a slow machine.
	stuckCap = 20 * time.Second
)

// Plan is a job's payload: its steps, one per attempt (the last one
// repeats).
type Plan struct {
	Origin string `json:"origin"`
	Steps  []Step `json:"steps"`
}

// Step is what one attempt does.
type Step struct {
	Do   string `json:"do"`
	Then string `json:"then,omitempty"`
	// Variant picks the poison value; Seed makes its random parts.
	Variant int    `json:"variant"`
	Seed    uint64 `json:"seed"`
	// LingerMs: after its action the handler waits this long for its
	// context (an operator's cancel, usually), before it returns Then.
	LingerMs int `json:"linger_ms,omitempty"`
	// CancelAfter: after its action the handler cancels its own job, as an
	// operator would (hopper.Client, another connection), and returns Then
	// at once: the cancel lands at the worst moment, while the worker
	// records the result.
	CancelAfter bool `json:"cancel_after,omitempty"`
	// SleepMs: how long a late step sleeps, ignoring its context.
	SleepMs   int `json:"sleep_ms,omitempty"`
	SnoozeMs  int `json:"snooze_ms,omitempty"`
	TimeoutMs int `json:"timeout_ms"`
}

// step is what attempt (1-based) does.
func (p Plan) step(attempt int) Step {
	return p.Steps[min(max(attempt, 1), len(p.Steps))-1]
}

// healthyPlan is a job that succeeds on every attempt.
func healthyPlan(origin string) Plan {
	return Plan{Origin: origin, Steps: []Step{{Do: doOK, TimeoutMs: int(defaultTimeout / time.Millisecond)}}}
}

// weighted is the draw of a step's action.
var weighted = []struct {
	do     string
	weight int
}{
	{doOK, 14}, {doError, 12}, {doPanic, 12}, {doResult, 12}, {doLate, 5}, {doStuck, 3},
	{doAckTx, 12}, {doRollback, 12}, {doSnooze, 6}, {doCancel, 6}, {doPermanent, 6},
}

// drawPlan draws a poison job: its queue, its max attempts and its steps.
// allowed, when not empty, restricts the actions drawn (to reproduce a
// failure with fewer moving parts).
func drawPlan(r *rand.Rand, allowed map[string]bool) (plan Plan, queue string, maxAttempts int) {
	total := 0
	for _, w := range weighted {
		if len(allowed) == 0 || allowed[w.do] {
			total += w.weight
		}
	}
	maxAttempts = 1 + r.IntN(4)
	plan.Origin = originPoison
	stuck := false
	// Two steps more than attempts: snoozes and lost claims use attempts
	// up without charging them.
	for range maxAttempts + 2 {
		n := r.IntN(total)
		var do string
		for _, w := range weighted {
			if len(allowed) > 0 && !allowed[w.do] {
				continue
			}
			if n < w.weight {
				do = w.do
				break
			}
			n -= w.weight
		}
		s := Step{Do: do, Variant: r.IntN(1 << 16), Seed: r.Uint64(), TimeoutMs: int(defaultTimeout / time.Millisecond)}
		switch do {
		case doLate:
			s.TimeoutMs = int(shortTimeout / time.Millisecond)
			s.SleepMs = s.TimeoutMs + r.IntN(int(2*poisonAbandonAfter/time.Millisecond)) // abandoned, or not, by a hair
		case doStuck:
			stuck = true
			s.TimeoutMs = int(shortTimeout / time.Millisecond) // abandoned
			if r.IntN(2) == 0 {
				s.TimeoutMs = int(longTimeout / time.Millisecond) // lost or cancelled long before its hard deadline
			}
		case doSnooze:
			s.SnoozeMs = 20 + r.IntN(300)
		}
		switch do {
		case doLate, doStuck, doAckTx, doRollback:
			s.Then = []string{thenNil, thenError, thenPanic}[r.IntN(3)]
		}
		switch do {
		case doOK, doAckTx, doRollback:
			switch r.IntN(6) {
			case 0, 1:
				s.LingerMs = 300 + r.IntN(1200) // an invitation to cancel it
			case 2:
				s.CancelAfter = true
			}
		}
		plan.Steps = append(plan.Steps, s)
	}
	if last := &plan.Steps[len(plan.Steps)-1]; last.Do == doSnooze {
		// The last step repeats, and a snooze is not charged: the job
		// would snooze for ever.
		*last = Step{Do: doOK, Seed: last.Seed, TimeoutMs: last.TimeoutMs}
	}
	switch {
	case stuck:
		queue = queueStuck
	case r.IntN(2) == 0:
		queue = queueKept
	default:
		queue = queuePlain
	}
	return plan, queue, maxAttempts
}

// What the worker should make of an attempt whose result it recorded
// (the claim not lost, cancelled or abandoned first).
type class string

const (
	classDone      class = "done"      // the job completes
	classFail      class = "fail"      // failed: retried, or dead out of attempts
	classEither    class = "either"    // done or failed: a poison result made storable, or refused as unstorable
	classSnooze    class = "snooze"    // snoozed
	classCancel    class = "cancel"    // cancelled by its handler
	classPermanent class = "permanent" // dead at once
)

// classOf says what a step's recorded result must be, in a queue that
// keeps results (kept) or not.
func classOf(s Step, kept bool) class {
	then := func() class {
		if s.Then == thenNil {
			return classDone
		}
		return classFail
	}
	switch s.Do {
	case doOK:
		return classDone
	case doError, doPanic:
		return classFail
	case doResult:
		if !kept {
			return classDone // the result is dropped
		}
		return resultClass(s.Variant)
	case doLate, doStuck, doRollback:
		return then()
	case doAckTx:
		return classDone // the ledger row committed with the ack
	case doSnooze:
		return classSnooze
	case doCancel:
		return classCancel
	case doPermanent:
		return classPermanent
	}
	panic("unknown step " + s.Do)
}

// poisonTexts are the texts of errors, panics and cancel reasons: NUL,
// invalid UTF-8, very long, empty, control characters, format verbs.
var poisonTexts = []func(r *rand.Rand) string{
	func(*rand.Rand) string { return "NUL \x00 in the middle" },
	func(*rand.Rand) string { return "\x00" },
	func(*rand.Rand) string { return "invalid UTF-8: \xff\xfe\xc3\x28 end" },
	func(*rand.Rand) string { return "a surrogate half \xed\xa0\x80, CESU-8" },
	func(*rand.Rand) string { return "a rune cut at the end " + strings.Repeat("é", 40_000) + "\xe2\x82" },
	func(*rand.Rand) string { return strings.Repeat("very long ", 30_000) + "\x00 and a NUL at the end" },
	func(*rand.Rand) string { return "" },
	func(r *rand.Rand) string {
		b := make([]byte, 1+r.IntN(4096))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return string(b)
	},
	func(*rand.Rand) string {
		return `{"json": "\u0000"} %s %d %!v(MISSING) %n \\ '; DROP TABLE hopper_jobs; --`
	},
	func(*rand.Rand) string { return "control \x01\x02\x1b[31mred\x7f\r\n" },
}

// plainTexts, when the run asks for them (HOPPER_POISON_TEXT=plain), keep
// every behaviour but make every text storable: it tells the runtime's
// faults from the storage of poison.
var plainTexts = false

// nul is a NUL, or nothing in plain mode.
func nul() string {
	if plainTexts {
		return ""
	}
	return "\x00"
}

// poisonText is the text of variant v.
func poisonText(r *rand.Rand, v int) string {
	if plainTexts {
		return "a plain text"
	}
	return poisonTexts[v%len(poisonTexts)](r)
}

// poisonErr is an error type of the handler's own.
type poisonErr struct{ text string }

func (e *poisonErr) Error() string { return e.text }

// nilDeref is an error whose Error method fails on a nil receiver.
type nilDeref struct{ text string }

func (e *nilDeref) Error() string { return e.text }

// boomStringer panics when printed.
type boomStringer struct{ text string }

func (b boomStringer) String() string { panic(b.text) }

// poisonError is the error a step returns.
func poisonError(s Step) error {
	r := rand.New(rand.NewPCG(s.Seed, 1))
	text := poisonText(r, s.Variant)
	switch (s.Variant / len(poisonTexts)) % 4 {
	case 0:
		return &poisonErr{text}
	case 1:
		return &wrapped{"wrapped: ", &poisonErr{text}}
	case 2:
		var e *nilDeref
		return e // panics when read: the worker must not
	default:
		return &poisonErr{text + strings.Repeat(nul(), r.IntN(3))}
	}
}

type wrapped struct {
	prefix string
	err    error
}

func (w *wrapped) Error() string { return w.prefix + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }

// poisonPanic is the value a step panics with.
func poisonPanic(s Step) any {
	r := rand.New(rand.NewPCG(s.Seed, 2))
	text := poisonText(r, s.Variant)
	switch (s.Variant / len(poisonTexts)) % 9 {
	case 0:
		return text
	case 1:
		return struct {
			Msg   string
			Bytes []byte
			N     float64
		}{text, []byte(text), math.NaN()}
	case 2:
		var err error
		return err // panic(nil): a *runtime.PanicNilError
	case 3:
		return &poisonErr{text}
	case 4:
		var e *nilDeref
		return e // an error whose Error method dereferences nil
	case 5:
		return []any{text, nil, map[string]any{"key" + nul(): text}}
	case 6:
		return boomStringer{text}
	case 7:
		return r.Int64()
	default:
		return []byte(text)
	}
}

// Result variants, and what the worker should make of them where results
// are kept.
var poisonResults = []struct {
	name  string
	class class
	make  func(r *rand.Rand) any
}{
	{"clean", classDone, func(*rand.Rand) any {
		return map[string]any{"n": 7, "s": "plain", "list": []any{1, "two", nil, true}}
	}},
	{"nil", classDone, func(*rand.Rand) any { return nil }},
	{"invalid UTF-8", classDone, func(*rand.Rand) any { return "bad \xff\xfe bytes" }}, // marshalled as U+FFFD
	{"numbers", classDone, func(*rand.Rand) any {
		return []any{1e308, math.Copysign(0, -1), math.MaxInt64, 5e-324}
	}},
	{"NUL string", classEither, func(r *rand.Rand) any { return "a NUL \x00 " + poisonText(r, 0) }},
	{"NUL key", classEither, func(*rand.Rand) any { return map[string]any{"key\x00": []any{"\x00"}} }},
	{"raw NUL", classEither, func(*rand.Rand) any { return json.RawMessage(`{"x": "\u0000"}`) }},
	{"deep", classEither, func(*rand.Rand) any {
		var v any = "bottom"
		for range 5000 {
			v = []any{v}
		}
		return v
	}},
	{"NaN", classFail, func(*rand.Rand) any { return math.NaN() }},                     // does not marshal
	{"huge", classFail, func(*rand.Rand) any { return strings.Repeat("x", 1<<20+10) }}, // over 1 MiB
}

func resultClass(variant int) class {
	if plainTexts {
		return classDone // poisonResult returns the clean one
	}
	return poisonResults[variant%len(poisonResults)].class
}

// poisonResult is the result a step returns.
func poisonResult(s Step) any {
	r := rand.New(rand.NewPCG(s.Seed, 3))
	if plainTexts {
		return poisonResults[0].make(r)
	}
	return poisonResults[s.Variant%len(poisonResults)].make(r)
}
