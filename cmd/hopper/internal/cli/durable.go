package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// What durable handlers recorded (worker.Step, Sleep, AwaitEvent,
// SetProgress), as hopper jobs show prints it, and the commands that end a
// durable wait: hopper jobs wake and hopper events emit.

// stepRow is one record of a durable job, as jobs show --json prints it.
type stepRow struct {
	Position int    `json:"position"`
	Kind     string `json:"kind"` // step, sleep or event
	Name     string `json:"name"`
	// State is done, waiting or timed_out, as recorded: a sleep that is
	// over stays waiting, with an until in the past.
	State string `json:"state"`
	// Result is a step's result, or the payload an event brought.
	Result json.RawMessage `json:"result,omitempty"`
	// Until is a sleep's wake time or an event wait's deadline; absent for
	// a step.
	Until     *time.Time `json:"until,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
}

// suspensionRow is the durable wait a scheduled job is in.
type suspensionRow struct {
	Wait  string    `json:"wait"`            // sleep or event
	Event string    `json:"event,omitempty"` // the event awaited
	Until time.Time `json:"until"`           // the wake time, or the wait's deadline
}

// jobReport is what jobs show --json prints: the job's row, and what its
// durable handler recorded (steps: [] for none; progress and suspension:
// null for none, where the row alone would leave progress out).
type jobReport struct {
	jobs.Row
	Steps      []stepRow      `json:"steps"`
	Progress   *jobs.Progress `json:"progress"`
	Suspension *suspensionRow `json:"suspension"`
	// Shard, with --sharded, is the schema of the shard holding the job.
	Shard string `json:"shard,omitempty"`
}

// durableView is what a durable job recorded, read for jobs show.
type durableView struct {
	steps    []hopper.JobStep
	progress *jobs.Progress
	wait     hopper.Suspension
	now      time.Time
	// hints are the commands that end the wait, one a line.
	hints []string
}

// readDurable reads the records of job r, and its wait (its progress
// came with it).
func readDurable(e *env, client jobsAPI, r jobs.Row) (*durableView, error) {
	steps, err := client.ListJobSteps(e.ctx, r.ID)
	if err != nil {
		return nil, err
	}
	d := &durableView{steps: steps, now: time.Now(), progress: r.Progress}
	d.wait = hopper.SuspensionOf(r.State, steps, d.now)
	wake := e.commandLine(fmt.Sprintf("jobs wake %d", r.ID))
	emitter := e
	if name := shardOf(client, r.ID); name != "" {
		// An event wakes the jobs of the schema it is emitted in: the
		// job's shard.
		on := *e
		on.schema, on.sharded = name, false
		emitter = &on
	}
	switch d.wait.Wait {
	case hopper.StepKindSleep:
		d.hints = []string{wake + " ends the sleep now"}
	case hopper.StepKindEvent:
		d.hints = []string{
			emitter.commandLine("events emit "+shellQuote(d.wait.Event)) + " JSON emits the event: the job runs and receives it",
			wake + " ends the wait now (its AwaitEvent returns worker.ErrEventTimeout)",
		}
	}
	return d, nil
}

// report is the JSON of jobs show.
func (d *durableView) report(r jobs.Row) jobReport {
	out := jobReport{Row: r, Steps: make([]stepRow, len(d.steps))}
	for i, s := range d.steps {
		out.Steps[i] = stepRow{Position: s.Position, Kind: string(s.Kind), Name: s.Name, State: string(s.State), Result: s.Result, CreatedAt: s.CreatedAt}
		if !s.Until.IsZero() {
			until := s.Until
			out.Steps[i].Until = &until
		}
	}
	out.Progress = d.progress
	if d.wait.Wait != "" {
		out.Suspension = &suspensionRow{Wait: string(d.wait.Wait), Event: d.wait.Event, Until: d.wait.Until}
	}
	return out
}

// waitLine says what a suspended job waits for, and until when; "" for a
// job in no durable wait.
func waitLine(s hopper.Suspension, now time.Time) string {
	switch s.Wait {
	case hopper.StepKindSleep:
		return fmt.Sprintf("sleeping until %s (%s)", stamp(s.Until), fromNow(s.Until.Sub(now)))
	case hopper.StepKindEvent:
		return fmt.Sprintf("awaiting event %q until %s (%s; then the wait times out)", s.Event, stamp(s.Until), fromNow(s.Until.Sub(now)))
	}
	return ""
}

// fromNow says how far ahead a time is: "in 42s", "in 5m03s", "in
// 3h07m", "in 6d23h".
func fromNow(d time.Duration) string {
	d = max(d, 0).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("in %ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("in %dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("in %dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("in %dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// printWait prints the job's wait and progress, under its state.
func (d *durableView) printWait(w io.Writer) {
	if line := waitLine(d.wait, d.now); line != "" {
		fmt.Fprintln(w, line)
		for _, h := range d.hints {
			fmt.Fprintf(w, "  %s\n", h)
		}
	}
	if d.progress != nil {
		fmt.Fprintf(w, "progress: %s (set %s)\n", clip(string(d.progress.Value), maxShownRecord), stamp(d.progress.UpdatedAt))
	}
}

// maxShownRecord bounds a result or a progress value on jobs show's text
// output, in characters (--json prints them whole).
const maxShownRecord = 60

// clip folds s onto one line and cuts it to n characters, an ellipsis
// saying so.
func clip(s string, n int) string {
	s = oneLine(s)
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// recordState is a record's state as the table shows it: as recorded,
// but a wait whose time has passed says so (a sleep that is over stays
// "waiting" in its record).
func recordState(s hopper.JobStep, now time.Time) string {
	if s.State != hopper.StepStateWaiting || s.Until.After(now) {
		return string(s.State)
	}
	if s.Kind == hopper.StepKindSleep {
		return "over"
	}
	return "deadline passed"
}

// printRecords prints the job's records, a line each.
func (d *durableView) printRecords(w io.Writer) {
	if len(d.steps) == 0 {
		return
	}
	fmt.Fprintln(w, "durable records:")
	_ = printTable(w, "records", "  POSITION\tKIND\tNAME\tSTATE\tUNTIL\tRESULT", d.steps, func(s hopper.JobStep) string {
		until, result := "-", "-"
		if !s.Until.IsZero() {
			until = stamp(s.Until)
		}
		if len(s.Result) > 0 {
			result = clip(shownJSON(s.Result), maxShownRecord)
		}
		return fmt.Sprintf("  %d\t%s\t%s\t%s\t%s\t%s", s.Position, s.Kind, clip(s.Name, maxShownRecord), recordState(s, d.now), until, result)
	})
}

// wakeJob is hopper jobs wake: it ends the durable wait of a job (a
// sleep is over, a wait for an event times out), which is pending at
// once.
func wakeJob(e *env, client jobsAPI, id int64) error {
	kind, err := client.WakeJob(e.ctx, id)
	if errors.Is(err, hopper.ErrNotFound) || errors.Is(err, hopper.ErrNotWaiting) {
		row, gerr := client.GetJob(e.ctx, id)
		switch {
		case errors.Is(gerr, hopper.ErrNotFound):
			return fmt.Errorf("no job %d (never enqueued, or completed without history, or purged)", id)
		case gerr != nil:
			return gerr
		case !row.State.Live():
			return fmt.Errorf("job %d is %s already: nothing to wake (only a scheduled job that sleeps or awaits an event wakes)", id, row.State)
		}
		return fmt.Errorf("job %d is %s, in no durable wait (it neither sleeps nor awaits an event): nothing woken", id, row.State)
	}
	if err != nil {
		return err
	}
	switch kind {
	case hopper.StepKindEvent:
		fmt.Fprintf(e.stdout, "job %d: woken: its wait for an event timed out (its AwaitEvent returns worker.ErrEventTimeout); it is pending, and runs at the next claim\n", id)
	default:
		fmt.Fprintf(e.stdout, "job %d: woken: its sleep is over; it is pending, and runs at the next claim\n", id)
	}
	return nil
}

func eventsCommand() *command {
	actions := []string{"emit"}
	return &command{
		name:    "events",
		actions: actions,
		args:    "emit NAME JSON",
		summary: "emit an event durable handlers await (worker.AwaitEvent): every job waiting for it runs at once and receives the payload " +
			"(JSON, null for none), and a job that awaits it later receives it too, until the workers prune it; " +
			"emitting a name again replaces its payload for the jobs that have not received it yet",
		run: func(e *env, fs *flag.FlagSet, args []string) error {
			_, rest, err := pickAction("events", args, actions...)
			if err != nil {
				return err
			}
			name, payload, err := eventArgs(rest)
			if err != nil {
				return err
			}
			client, done, err := e.connectClient()
			if err != nil {
				return err
			}
			defer done()
			return emitEvent(e, client, name, payload)
		},
	}
}

// eventArgs reads the arguments of events emit: a name, then the payload
// as JSON. The payload is required: an emit of a name already emitted
// replaces its payload, so a forgotten argument would replace a real
// payload with null; null is given as null.
func eventArgs(args []string) (string, json.RawMessage, error) {
	switch {
	case len(args) == 0 || len(args) > 2:
		return "", nil, fmt.Errorf(`%w: emit takes an event name, then its payload as JSON (quoted for the shell: '{"ok": true}')`, errUsage)
	case args[0] == "":
		return "", nil, fmt.Errorf("%w: emit takes an event name, not an empty one", errUsage)
	case len(args) == 1:
		return "", nil, fmt.Errorf("%w: emit takes the payload after the name, as JSON (null for none): "+
			"emitting %s again would replace its payload for the jobs that have not received it", errUsage, quoteName(args[0]))
	}
	var v any
	if err := json.Unmarshal([]byte(args[1]), &v); err != nil {
		return "", nil, fmt.Errorf("%w: the payload is not valid JSON (%v): give JSON, quoted for the shell ('{\"ok\": true}', '\"text\"', null)", errUsage, err)
	}
	return args[0], json.RawMessage(args[1]), nil
}

// emitEvent is hopper events emit: it emits the event and says how many
// waiting jobs it woke.
func emitEvent(e *env, client *hopper.Client, name string, payload json.RawMessage) error {
	woken, err := client.EmitEvent(e.ctx, name, payload)
	if errors.Is(err, hopper.ErrInvalidEvent) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err != nil {
		return err
	}
	if woken == 0 {
		fmt.Fprintf(e.stdout, "event %s emitted: no job was waiting for it; a job that awaits it later receives it, until the workers prune it\n", quoteName(name))
		return nil
	}
	fmt.Fprintf(e.stdout, "event %s emitted: woke %s waiting for it; each runs at once and receives the payload\n", quoteName(name), plural(int64(woken), "job"))
	return nil
}

// quoteName quotes a name for a sentence when it needs it (spaces,
// quotes, control characters).
func quoteName(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == '"' || r == '\'' || r == 0x7f }) {
		return s
	}
	return fmt.Sprintf("%q", s)
}
