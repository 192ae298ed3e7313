package tests

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

type WorkflowStepPayload struct {
	Name string `json:"name"`
}

var workflowCLIStep = jobs.MustDefine[WorkflowStepPayload]("workflow_cli_step", jobs.Defaults(jobs.Queue("flows"), jobs.MaxAttempts(1)))

// diamond enqueues the workflow id: fetch, then resize and thumb, then
// publish after both; it returns the steps' ids by name.
func (b *sequencesBed) diamond(id string) map[string]int64 {
	b.t.Helper()
	step := func(name string) jobs.Entry { return workflowCLIStep.Entry(WorkflowStepPayload{Name: name}) }
	wf := jobs.NewWorkflow(id).
		Add("fetch", step("fetch")).
		Add("resize", step("resize"), jobs.After("fetch")).
		Add("thumb", step("thumb"), jobs.After("fetch")).
		Add("publish", step("publish"), jobs.After("resize", "thumb"))
	res, err := jobs.EnqueueWorkflow(b.ctx, b.d.Pool, wf)
	require.NoError(b.t, err)
	require.Len(b.t, res.Steps, 4)
	return res.Steps
}

// TestCLIWorkflowsList: hopper workflows list shows the workflows that
// have live steps in id order (bytewise), with how many of their steps
// wait, are ready and run, and how long ago the oldest live one was
// enqueued; not those whose steps have all ended; a full page ends with
// the command that lists the next; --json prints the same with
// snake_case keys.
func TestCLIWorkflowsList(t *testing.T) {
	b := newSequencesBed(t)
	r := b.run("", "workflows", "list")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "(no workflows with live steps)\n", r.stdout)
	r = b.run("", "workflows", "list", "--json")
	require.Zero(t, r.code, r.stderr)
	require.JSONEq(t, `{"workflows":[]}`, r.stdout)

	b.diamond("wf-1")
	gone := b.diamond("wf 2") // bytewise before wf-1
	_, err := b.client.DeleteJob(b.ctx, gone["fetch"])
	require.NoError(t, err)
	ended := b.diamond("wf-3") // all its steps cancelled: not listed
	require.NoError(t, b.client.CancelJob(b.ctx, ended["fetch"]))
	require.Equal(t, jobs.StateCancelled, b.state(ended["publish"]))

	r = b.run("", "workflows", "list")
	require.Zero(t, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3, r.stdout)
	require.Regexp(t, `^ID\s+WAITING\s+READY\s+RUNNING\s+OLDEST$`, lines[0])
	age := `(\d+h)?(\d+m)?\d+s ago`
	require.Regexp(t, `^wf 2\s+1\s+2\s+0\s+`+age+`$`, lines[1])
	require.Regexp(t, `^wf-1\s+3\s+1\s+0\s+`+age+`$`, lines[2])
	require.NotContains(t, r.stdout, "wf-3")
	require.NotContains(t, r.stdout, "more:")

	// Pages: a full one says how to list the next, the last one does not.
	r = b.run("", "workflows", "list", "--limit", "1")
	require.Zero(t, r.code, r.stderr)
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3, r.stdout)
	require.Regexp(t, `^wf 2\s`, lines[1])
	require.Equal(t, "more: hopper workflows list --after 'wf 2' --limit 1", lines[2])
	r = b.run("", "workflows", "list", "--after", "wf 2", "--limit", "1")
	require.Zero(t, r.code, r.stderr)
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2, r.stdout)
	require.Regexp(t, `^wf-1\s`, lines[1])
	r = b.run("", "workflows", "list", "--after", "wf-1")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "(no workflows with live steps)\n", r.stdout)

	r = b.run("", "workflows", "list", "--json", "--limit", "1")
	require.Zero(t, r.code, r.stderr)
	seen := requireSnakeCase(t, "workflows list", r.stdout)
	for _, k := range []string{".workflows", ".next", ".workflows[].id", ".workflows[].waiting", ".workflows[].ready",
		".workflows[].running", ".workflows[].oldest_at", ".workflows[].age_seconds"} {
		require.True(t, seen[k], "no %s in %v", k, seen)
	}
	var page struct {
		Workflows []struct {
			ID         string    `json:"id"`
			Waiting    int64     `json:"waiting"`
			Ready      int64     `json:"ready"`
			Running    int64     `json:"running"`
			OldestAt   time.Time `json:"oldest_at"`
			AgeSeconds float64   `json:"age_seconds"`
		} `json:"workflows"`
		Next string `json:"next"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Len(t, page.Workflows, 1)
	require.Equal(t, "wf 2", page.Next)
	w := page.Workflows[0]
	require.Equal(t, "wf 2", w.ID)
	require.Equal(t, [3]int64{1, 2, 0}, [3]int64{w.Waiting, w.Ready, w.Running})
	require.WithinDuration(t, time.Now(), w.OldestAt, time.Minute)
	require.GreaterOrEqual(t, w.AgeSeconds, 0.0)
	require.Less(t, w.AgeSeconds, 60.0)
	r = b.run("", "workflows", "list", "--json", "--after", "wf 2")
	require.Zero(t, r.code, r.stderr)
	page.Workflows, page.Next = nil, ""
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Len(t, page.Workflows, 1)
	require.Empty(t, page.Next, "the last page")
	require.Equal(t, "wf-1", page.Workflows[0].ID)
	require.Equal(t, [3]int64{3, 1, 0}, [3]int64{page.Workflows[0].Waiting, page.Workflows[0].Ready, page.Workflows[0].Running})

	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"workflows", "list", "--limit", "0"}, "--limit 0 is outside 1 to 1000"},
		{[]string{"workflows", "list", "--limit", "1001"}, "--limit 1001 is outside 1 to 1000"},
		{[]string{"workflows", "list", "wf-1"}, "list takes no argument"},
		{[]string{"workflows", "list", "--yes"}, "--yes is for cancel, not list"},
		{[]string{"workflows", "show", "wf-1", "--after", "a"}, "--after is for list, not show"},
		{[]string{"workflows", "cancel", "wf-1", "--limit", "3"}, "--limit is for list, not cancel"},
	} {
		requireFailure(t, b.run("", tc.args...), 2, tc.says)
	}

	// On a schema without the workflows migration, the one line that says
	// what to run.
	old := testdb.NewAtVersion(t, 13)
	r = runHopper(t, old.URL, "", "workflows", "list")
	requireFailure(t, r, 1, "hopper workflows: schema not migrated: schema "+old.Schema+" is at version 13 without migration")
	require.Contains(t, r.stderr, "14 (workflows)")
	require.Contains(t, r.stderr, "run hopper migrate up")
	require.Empty(t, r.stdout)
}

// TestCLIWorkflowsShow: hopper workflows show prints a workflow's steps in
// id order (id, step, kind, queue, state, parents by step name, reason),
// with how many are in each state and the commands that act on it; a
// parent no longer known is "job ID"; --json prints the same with
// snake_case keys; an unknown id is a clear error.
func TestCLIWorkflowsShow(t *testing.T) {
	b := newSequencesBed(t)
	ids := b.diamond("wf-1")

	r := b.run("", "workflows", "show", "wf-1")
	require.Zero(t, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 7, r.stdout)
	require.Equal(t, "workflow wf-1: 4 steps (1 pending, 3 waiting)", lines[0])
	require.Regexp(t, `^ID\s+STEP\s+KIND\s+QUEUE\s+STATE\s+PARENTS\s+REASON$`, lines[1])
	require.Regexp(t, `^`+itoa(ids["fetch"])+`\s+fetch\s+workflow_cli_step\s+flows\s+pending\s+-$`, lines[2])
	require.Regexp(t, `^`+itoa(ids["resize"])+`\s+resize\s+workflow_cli_step\s+flows\s+waiting\s+fetch$`, lines[3])
	require.Regexp(t, `^`+itoa(ids["thumb"])+`\s+thumb\s+workflow_cli_step\s+flows\s+waiting\s+fetch$`, lines[4])
	require.Regexp(t, `^`+itoa(ids["publish"])+`\s+publish\s+workflow_cli_step\s+flows\s+waiting\s+resize, thumb$`, lines[5])
	require.Equal(t, "  hopper workflows cancel wf-1 cancels the 4 live steps", lines[6])

	// The root cancelled: its children are cancelled in turn, each with
	// the parent that ended as its reason.
	require.NoError(t, b.client.CancelJob(b.ctx, ids["fetch"]))
	r = b.run("", "workflows", "show", "wf-1")
	require.Zero(t, r.code, r.stderr)
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 7, r.stdout)
	require.Equal(t, "workflow wf-1: 4 steps (4 cancelled)", lines[0])
	require.Regexp(t, `^`+itoa(ids["resize"])+`\s+resize\s+workflow_cli_step\s+flows\s+cancelled\s+fetch\s+parent `+itoa(ids["fetch"])+` ended cancelled$`, lines[3])
	require.Regexp(t, `^`+itoa(ids["publish"])+`\s+publish\s+.*\s+cancelled\s+resize, thumb\s+parent `+itoa(ids["resize"])+` ended cancelled$`, lines[5])
	require.Equal(t, "  hopper workflows retry wf-1 brings the 4 dead or cancelled steps back", lines[6])

	// A parent that completed and left no history is "job ID".
	gone := b.diamond("wf 2")
	_, err := b.client.DeleteJob(b.ctx, gone["fetch"])
	require.NoError(t, err)
	r = b.run("", "workflows", "show", "wf 2")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "workflow wf 2: 3 steps (2 pending, 1 waiting)\n")
	require.Regexp(t, `(?m)^`+itoa(gone["resize"])+`\s+resize\s+workflow_cli_step\s+flows\s+pending\s+job `+itoa(gone["fetch"])+`$`, r.stdout)
	require.Contains(t, r.stdout, "  hopper workflows cancel 'wf 2' cancels the 3 live steps\n")

	r = b.run("", "workflows", "show", "wf-1", "--json")
	require.Zero(t, r.code, r.stderr)
	seen := requireSnakeCase(t, "workflows show", r.stdout)
	for _, k := range []string{".id", ".steps", ".steps[].id", ".steps[].step", ".steps[].kind", ".steps[].queue", ".steps[].state",
		".steps[].policy", ".steps[].parents", ".steps[].parent_steps", ".steps[].attempt", ".steps[].max_attempts",
		".steps[].run_at", ".steps[].created_at", ".steps[].finished_at", ".steps[].reason"} {
		require.True(t, seen[k], "no %s in %v", k, seen)
	}
	var show struct {
		ID    string `json:"id"`
		Steps []struct {
			ID          int64      `json:"id"`
			Step        string     `json:"step"`
			State       jobs.State `json:"state"`
			Policy      string     `json:"policy"`
			Parents     []int64    `json:"parents"`
			ParentSteps []string   `json:"parent_steps"`
			FinishedAt  *time.Time `json:"finished_at"`
			Reason      string     `json:"reason"`
		} `json:"steps"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &show))
	require.Equal(t, "wf-1", show.ID)
	require.Len(t, show.Steps, 4)
	require.Equal(t, "fetch", show.Steps[0].Step)
	require.Equal(t, []int64{}, show.Steps[0].Parents)
	require.Equal(t, []string{}, show.Steps[0].ParentSteps)
	require.Equal(t, "cancel", show.Steps[0].Policy)
	require.NotNil(t, show.Steps[0].FinishedAt)
	require.Equal(t, []int64{ids["resize"], ids["thumb"]}, show.Steps[3].Parents)
	require.Equal(t, []string{"resize", "thumb"}, show.Steps[3].ParentSteps)
	require.Equal(t, jobs.StateCancelled, show.Steps[3].State)

	r = b.run("", "workflows", "show", "wf 2", "--json")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, `"parents":[`+itoa(gone["fetch"])+`],"parent_steps":[""]`, "a parent no longer known")
	require.NotContains(t, r.stdout, "finished_at", "live steps have not finished")

	requireFailure(t, b.run("", "workflows", "show", "nobody"), 1,
		"hopper workflows: no workflow nobody (never enqueued, or its steps completed and left the history, or were purged)")
	requireFailure(t, b.run("", "workflows", "show", "nobody", "--json"), 1, "no workflow nobody")
	requireFailure(t, b.run("", "workflows", "show"), 2, "show takes one workflow id")
	requireFailure(t, b.run("", "workflows", "show", ""), 2, "show takes one workflow id, not an empty one")
	requireFailure(t, b.run("", "workflows", "show", "a", "b"), 2, "show takes one workflow id")
	requireFailure(t, b.run("", "workflows", "show", "wf-1", "--yes"), 2, "--yes is for cancel, not show")
}

// TestCLIWorkflowsCancel: hopper workflows cancel cancels a workflow's
// live steps after a question (skipped by --yes); no answer, or another
// than y, cancels nothing; a workflow with no live step, or none, is a
// clear error, asked nothing.
func TestCLIWorkflowsCancel(t *testing.T) {
	b := newSequencesBed(t)
	ids := b.diamond("wf-1")
	question := "Cancel the 4 live steps of workflow wf-1 (1 pending, 3 waiting)? A running step's worker is told to stop; " +
		"they end cancelled, and hopper workflows retry brings them back. [y/N] "

	r := b.run("", "workflows", "cancel", "wf-1")
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, question+"\n", r.stdout)
	require.Equal(t, "hopper workflows: not confirmed: no answer on stdin; nothing cancelled (pass --yes to skip the question)\n", r.stderr)
	r = b.run("n\n", "workflows", "cancel", "wf-1")
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, question, r.stdout)
	require.Equal(t, "hopper workflows: not confirmed; nothing cancelled (pass --yes to skip the question)\n", r.stderr)
	require.Equal(t, jobs.StatePending, b.state(ids["fetch"]), "refused: nothing cancelled")
	require.Equal(t, jobs.StateWaiting, b.state(ids["publish"]))

	r = b.run("y\n", "workflows", "cancel", "wf-1")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, question+"workflow wf-1: 4 steps cancelled (jobs "+itoa(ids["fetch"])+", "+itoa(ids["resize"])+", "+
		itoa(ids["thumb"])+" and "+itoa(ids["publish"])+")\n", r.stdout)
	for _, name := range []string{"fetch", "resize", "thumb", "publish"} {
		require.Equal(t, jobs.StateCancelled, b.state(ids[name]), name)
	}

	r = b.run("", "workflows", "cancel", "wf-1", "--yes")
	requireFailure(t, r, 1, "hopper workflows: workflow wf-1 has no live step: nothing cancelled (its 4 steps ended; hopper workflows show wf-1 shows them)")
	require.Empty(t, r.stdout, "nothing asked")
	r = b.run("", "workflows", "cancel", "nobody", "--yes")
	requireFailure(t, r, 1, "hopper workflows: no workflow nobody")
	require.Empty(t, r.stdout)

	// Part of a workflow ended: the rest is cancelled, without asking.
	other := b.diamond("wf 2")
	_, err := b.client.DeleteJob(b.ctx, other["fetch"])
	require.NoError(t, err)
	r = b.run("", "workflows", "cancel", "--yes", "wf 2")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "workflow wf 2: 3 steps cancelled (jobs "+itoa(other["resize"])+", "+itoa(other["thumb"])+" and "+itoa(other["publish"])+")\n", r.stdout)

	requireFailure(t, b.run("", "workflows", "cancel"), 2, "cancel takes one workflow id")
	// list and show both take --json: the line names both, in one order.
	requireFailure(t, b.run("", "workflows", "cancel", "wf-1", "--json"), 2, "--json is for list and show, not cancel")
}

// TestCLIWorkflowsRetry: hopper workflows retry brings a workflow's dead
// and cancelled steps back: the root runs, its children wait for it; a
// workflow with nothing to retry, or none, is a clear error.
func TestCLIWorkflowsRetry(t *testing.T) {
	b := newSequencesBed(t)
	ids := b.diamond("wf-1")

	r := b.run("", "workflows", "retry", "wf-1")
	requireFailure(t, r, 1, "hopper workflows: workflow wf-1 has no dead or cancelled step: nothing retried (hopper workflows show wf-1 shows it)")
	require.Empty(t, r.stdout)

	require.NoError(t, b.client.CancelJob(b.ctx, ids["fetch"]))
	require.Equal(t, jobs.StateCancelled, b.state(ids["publish"]))
	r = b.run("", "workflows", "retry", "wf-1")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "workflow wf-1: 4 steps back (jobs "+itoa(ids["fetch"])+", "+itoa(ids["resize"])+", "+itoa(ids["thumb"])+" and "+
		itoa(ids["publish"])+"); each runs once its parents have succeeded\n", r.stdout)
	require.Equal(t, jobs.StatePending, b.state(ids["fetch"]))
	require.Equal(t, jobs.StateWaiting, b.state(ids["resize"]))
	require.Equal(t, jobs.StateWaiting, b.state(ids["publish"]))
	requireFailure(t, b.run("", "workflows", "retry", "wf-1"), 1, "workflow wf-1 has no dead or cancelled step: nothing retried")

	// One step back: "job ID".
	require.NoError(t, b.client.CancelJob(b.ctx, ids["publish"]))
	r = b.run("", "workflows", "retry", "wf-1")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "workflow wf-1: 1 step back (job "+itoa(ids["publish"])+"); each runs once its parents have succeeded\n", r.stdout)
	require.Equal(t, jobs.StateWaiting, b.state(ids["publish"]))

	requireFailure(t, b.run("", "workflows", "retry", "nobody"), 1, "hopper workflows: no workflow nobody (never enqueued")
	requireFailure(t, b.run("", "workflows", "retry"), 2, "retry takes one workflow id")
	requireFailure(t, b.run("", "workflows", "retry", "wf-1", "--yes"), 2, "--yes is for cancel, not retry")
	requireFailure(t, b.run("", "workflows", "rety", "wf-1"), 2, `unknown workflows action "rety"`)
}

// TestCLIWorkflowsHelp: hopper help lists the command with its actions,
// and its --help its flags.
func TestCLIWorkflowsHelp(t *testing.T) {
	t.Parallel()
	r := runHopper(t, "", "", "help")
	require.Zero(t, r.code)
	require.Regexp(t, `(?m)^  workflows +list\|show\|cancel\|retry +`, r.stdout)
	r = runHopper(t, "", "", "workflows", "--help")
	require.Zero(t, r.code)
	require.Contains(t, r.stdout, "Usage: hopper workflows list [--after ID] [--limit N] [--json] | show ID [--json] | cancel ID [--yes] | retry ID")
	for _, f := range []string{"--after", "--limit", "--json", "--yes", "--database-url", "--schema"} {
		require.Contains(t, r.stdout, "  "+f+" ")
	}
	requireFailure(t, runHopper(t, "", "", "workflows"), 2, "say list, show, cancel or retry")
}
