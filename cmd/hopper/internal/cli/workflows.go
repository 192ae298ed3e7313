package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// workflowStepRow is one step of a workflow, as workflows show --json
// prints it.
type workflowStepRow struct {
	ID    int64      `json:"id"`
	Step  string     `json:"step"`
	Kind  string     `json:"kind"`
	Queue string     `json:"queue"`
	State jobs.State `json:"state"`
	// Policy is what the step does when a parent fails: cancel, run or
	// wait.
	Policy jobs.WorkflowPolicy `json:"policy"`
	// Parents are the ids of the steps it runs after, in id order, and
	// ParentSteps their step names, in the same order ("" for a parent no
	// longer known: it completed and left the history).
	Parents     []int64   `json:"parents"`
	ParentSteps []string  `json:"parent_steps"`
	Attempt     int       `json:"attempt"`
	MaxAttempts int       `json:"max_attempts"`
	RunAt       time.Time `json:"run_at"`
	CreatedAt   time.Time `json:"created_at"`
	// FinishedAt is when it completed, died or was cancelled; absent while
	// it is live.
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	Reason     string     `json:"reason,omitempty"`
}

// workflowReport is what workflows show --json prints.
type workflowReport struct {
	ID    string            `json:"id"`
	Steps []workflowStepRow `json:"steps"`
}

// The page sizes of hopper workflows list: hopper.WorkflowPage's.
const (
	defaultWorkflowsLimit = 100
	maxWorkflowsLimit     = 1000
)

// workflowRow is a workflow with live steps, as workflows list --json
// prints it: how many of its steps wait for their parents, are ready
// (pending or scheduled) and run, and when its oldest live step was
// enqueued, with how long ago in seconds.
type workflowRow struct {
	ID         string    `json:"id"`
	Waiting    int64     `json:"waiting"`
	Ready      int64     `json:"ready"`
	Running    int64     `json:"running"`
	OldestAt   time.Time `json:"oldest_at"`
	AgeSeconds float64   `json:"age_seconds"`
}

// workflowsPage is what workflows list --json prints: the workflows with
// live steps, and the id to pass as --after for the next page ("" on the
// last).
type workflowsPage struct {
	Workflows []workflowRow `json:"workflows"`
	Next      string        `json:"next,omitempty"`
}

func workflowsCommand() *command {
	var asJSON, yes bool
	var after string
	var limit int
	actions := []string{"list", "show", "cancel", "retry"}
	return &command{
		name:    "workflows",
		actions: actions,
		args:    "list [--after ID] [--limit N] [--json] | show ID [--json] | cancel ID [--yes] | retry ID",
		summary: "workflows of steps that run after one another: list those with live steps, show one's steps, their states and parents; " +
			"cancel its live steps (asks first unless --yes); retry brings its dead and cancelled steps back",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&after, "after", "", "list: the page after this workflow id (printed at the end of a full page)")
			fs.IntVar(&limit, "limit", defaultWorkflowsLimit, fmt.Sprintf("list: at most this many, in id order (1 to %d)", maxWorkflowsLimit))
			fs.BoolVar(&asJSON, "json", false, "list, show: print JSON")
			fs.BoolVar(&yes, "yes", false, "cancel: do not ask for confirmation")
		},
		run: func(e *env, fs *flag.FlagSet, args []string) error {
			action, rest, err := pickAction("workflows", args, actions...)
			if err != nil {
				return err
			}
			switch {
			case action == "list" && len(rest) > 0:
				return fmt.Errorf("%w: list takes no argument (hopper workflows show ID shows one)", errUsage)
			case action == "list" && (limit < 1 || limit > maxWorkflowsLimit):
				return fmt.Errorf("%w: --limit %d is outside 1 to %d", errUsage, limit, maxWorkflowsLimit)
			case action != "list" && len(rest) != 1:
				return fmt.Errorf("%w: %s takes one workflow id (hopper workflows list shows those with live steps)", errUsage, action)
			case action != "list" && rest[0] == "":
				return fmt.Errorf("%w: %s takes one workflow id, not an empty one", errUsage, action)
			}
			if err := actionFlags(fs, action, map[string][]string{
				"list": {"after", "limit", "json"}, "show": {"json"}, "cancel": {"yes"}, "retry": {},
			}); err != nil {
				return err
			}
			client, done, err := e.connectClient()
			if err != nil {
				return err
			}
			defer done()
			switch action {
			case "list":
				return listWorkflows(e, client, after, limit, asJSON)
			case "show":
				return showWorkflow(e, client, rest[0], asJSON)
			case "cancel":
				return cancelWorkflow(e, client, rest[0], yes)
			}
			return retryWorkflow(e, client, rest[0])
		},
	}
}

// listWorkflows prints a page of the workflows that have live steps, and
// the command that prints the next one when there is one.
func listWorkflows(e *env, client *hopper.Client, after string, limit int, asJSON bool) error {
	list, err := client.ListWorkflows(e.ctx, hopper.WorkflowPage{After: after, Limit: limit})
	if err != nil {
		return err
	}
	now := time.Now()
	next := ""
	if len(list) == limit {
		// A full page: whether another follows is one id away.
		last := list[len(list)-1].ID
		more, err := client.ListWorkflows(e.ctx, hopper.WorkflowPage{After: last, Limit: 1})
		if err != nil {
			return err
		}
		if len(more) > 0 {
			next = last
		}
	}
	if asJSON {
		page := workflowsPage{Workflows: make([]workflowRow, len(list)), Next: next}
		for i, w := range list {
			page.Workflows[i] = workflowRow{ID: w.ID, Waiting: w.Waiting, Ready: w.Ready, Running: w.Running,
				OldestAt: w.Oldest, AgeSeconds: max(now.Sub(w.Oldest), 0).Seconds()}
		}
		return json.NewEncoder(e.stdout).Encode(page)
	}
	err = printTable(e.stdout, "workflows with live steps", "ID\tWAITING\tREADY\tRUNNING\tOLDEST", list, func(w hopper.WorkflowSummary) string {
		return fmt.Sprintf("%s\t%d\t%d\t%d\t%s", oneLine(w.ID), w.Waiting, w.Ready, w.Running, ago(now.Sub(w.Oldest)))
	})
	if err != nil {
		return err
	}
	if next != "" {
		again := "workflows list --after " + shellQuote(next)
		if limit != defaultWorkflowsLimit {
			again += " --limit " + strconv.Itoa(limit)
		}
		fmt.Fprintf(e.stdout, "more: %s\n", e.commandLine(again))
	}
	return nil
}

// noWorkflow is the one line for a workflow id no step has.
func noWorkflow(id string) error {
	return fmt.Errorf("no workflow %s (never enqueued, or its steps completed and left the history, or were purged)", id)
}

// listWorkflow reads a workflow's steps; an unknown id is noWorkflow.
func listWorkflow(e *env, client *hopper.Client, id string) ([]hopper.WorkflowStep, error) {
	steps, err := client.ListWorkflow(e.ctx, id)
	if errors.Is(err, hopper.ErrNotFound) {
		return nil, noWorkflow(id)
	}
	return steps, err
}

// stepNames maps the steps' ids to their names.
func stepNames(steps []hopper.WorkflowStep) map[int64]string {
	names := make(map[int64]string, len(steps))
	for _, s := range steps {
		names[s.ID] = s.Step
	}
	return names
}

// parentNames names a step's parents, in its parents' order: a parent no
// longer known (completed, and gone from the history) is "job ID".
func parentNames(s hopper.WorkflowStep, names map[int64]string) []string {
	out := make([]string, len(s.Parents))
	for i, p := range s.Parents {
		if n, ok := names[p]; ok {
			out[i] = oneLine(n)
		} else {
			out[i] = "job " + strconv.FormatInt(p, 10)
		}
	}
	return out
}

// stateCounts says how many steps are in each state, in jobs.States'
// order: "2 completed, 1 running, 3 waiting".
func stateCounts(steps []hopper.WorkflowStep) string {
	n := map[jobs.State]int{}
	for _, s := range steps {
		n[s.State]++
	}
	var parts []string
	for _, st := range jobs.States() {
		if n[st] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[st], st))
		}
	}
	return strings.Join(parts, ", ")
}

// showWorkflow prints a workflow's steps in id order (parents before
// their children): a table, or JSON.
func showWorkflow(e *env, client *hopper.Client, id string, asJSON bool) error {
	steps, err := listWorkflow(e, client, id)
	if err != nil {
		return err
	}
	names := stepNames(steps)
	if asJSON {
		r := workflowReport{ID: id, Steps: make([]workflowStepRow, len(steps))}
		for i, s := range steps {
			row := workflowStepRow{ID: s.ID, Step: s.Step, Kind: s.Kind, Queue: s.Queue, State: s.State, Policy: s.Policy,
				Parents: s.Parents, ParentSteps: make([]string, len(s.Parents)), Attempt: s.Attempt, MaxAttempts: s.MaxAttempts,
				RunAt: s.RunAt, CreatedAt: s.CreatedAt, Reason: s.Reason}
			for j, p := range s.Parents {
				row.ParentSteps[j] = names[p]
			}
			if !s.FinishedAt.IsZero() {
				at := s.FinishedAt
				row.FinishedAt = &at
			}
			r.Steps[i] = row
		}
		return json.NewEncoder(e.stdout).Encode(r)
	}
	fmt.Fprintf(e.stdout, "workflow %s: %s (%s)\n", id, plural(int64(len(steps)), "step"), stateCounts(steps))
	err = printTable(e.stdout, "steps", "ID\tSTEP\tKIND\tQUEUE\tSTATE\tPARENTS\tREASON", steps, func(s hopper.WorkflowStep) string {
		parents := strings.Join(parentNames(s, names), ", ")
		if parents == "" {
			parents = "-"
		}
		line := fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s", s.ID, oneLine(s.Step), s.Kind, s.Queue, s.State, parents)
		if s.Reason != "" { // no padding after the last cell
			line += "\t" + oneLine(s.Reason)
		}
		return line
	})
	if err != nil {
		return err
	}
	live, failed := 0, 0
	for _, s := range steps {
		switch {
		case s.State.Live():
			live++
		case s.State == jobs.StateDead || s.State == jobs.StateCancelled:
			failed++
		}
	}
	if failed > 0 {
		fmt.Fprintf(e.stdout, "  %s brings the %s back\n", e.commandLine("workflows retry "+shellQuote(id)), deadOrCancelled(failed))
	}
	if live > 0 {
		fmt.Fprintf(e.stdout, "  %s cancels the %s\n", e.commandLine("workflows cancel "+shellQuote(id)), liveSteps(live))
	}
	return nil
}

// liveSteps says "live step" or "3 live steps".
func liveSteps(n int) string {
	if n == 1 {
		return "live step"
	}
	return strconv.Itoa(n) + " live steps"
}

// deadOrCancelled says "dead or cancelled step" or "3 dead or cancelled
// steps".
func deadOrCancelled(n int) string {
	if n == 1 {
		return "dead or cancelled step"
	}
	return strconv.Itoa(n) + " dead or cancelled steps"
}

// jobIDs lists ids for a sentence, the first ten of them: "jobs 4, 5 and
// 6", "job 4", "jobs 1, 2, … and 90 more".
func jobIDs(ids []int64) string {
	const shown = 10
	if len(ids) == 1 {
		return "job " + strconv.FormatInt(ids[0], 10)
	}
	var parts []string
	for i, id := range ids {
		if i == shown {
			break
		}
		parts = append(parts, strconv.FormatInt(id, 10))
	}
	if len(ids) > shown {
		return "jobs " + strings.Join(parts, ", ") + fmt.Sprintf(" and %d more", len(ids)-shown)
	}
	return "jobs " + strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

// cancelWorkflow cancels a workflow's live steps, asking first unless
// yes; a workflow with none is a clear error, asked nothing.
func cancelWorkflow(e *env, client *hopper.Client, id string, yes bool) error {
	steps, err := listWorkflow(e, client, id)
	if err != nil {
		return err
	}
	var live []hopper.WorkflowStep
	for _, s := range steps {
		if s.State.Live() {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		return fmt.Errorf("workflow %s has no live step: nothing cancelled (its %s ended; hopper workflows show %s shows them)",
			id, plural(int64(len(steps)), "step"), shellQuote(id))
	}
	if !yes {
		question := fmt.Sprintf("Cancel the %s of workflow %s (%s)? A running step's worker is told to stop; "+
			"they end cancelled, and hopper workflows retry brings them back. [y/N] ", liveSteps(len(live)), id, stateCounts(live))
		if err := confirm(e, question, "cancelled", false); err != nil {
			return err
		}
	}
	ids, err := client.CancelWorkflow(e.ctx, id)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return fmt.Errorf("workflow %s has no live step left (they ended meanwhile): nothing cancelled (hopper workflows show %s shows it)",
			id, shellQuote(id))
	}
	fmt.Fprintf(e.stdout, "workflow %s: %s cancelled (%s)\n", id, plural(int64(len(ids)), "step"), jobIDs(ids))
	return nil
}

// retryWorkflow brings a workflow's dead and cancelled steps back; a
// workflow with none is a clear error.
func retryWorkflow(e *env, client *hopper.Client, id string) error {
	ids, err := client.RetryWorkflow(e.ctx, id)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		if _, err := listWorkflow(e, client, id); err != nil {
			return err
		}
		return fmt.Errorf("workflow %s has no dead or cancelled step: nothing retried (hopper workflows show %s shows it)", id, shellQuote(id))
	}
	fmt.Fprintf(e.stdout, "workflow %s: %s back (%s); each runs once its parents have succeeded\n",
		id, plural(int64(len(ids)), "step"), jobIDs(ids))
	return nil
}
