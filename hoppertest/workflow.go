package hoppertest

import (
	"context"
	"slices"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// RequireWorkflow fails the test unless dbtx shows a workflow of that id
// with at least the named steps (none named: any step), and returns its
// steps in id order (parents before children), as hopper.Client's
// ListWorkflow reads them. Given the transaction a request ran in, it sees
// what that transaction enqueued before it commits.
func RequireWorkflow(t TB, dbtx jobs.DBTX, id string, steps ...string) []hopper.WorkflowStep {
	t.Helper()
	found, err := hopper.NewClient(dbtx).ListWorkflow(context.Background(), id)
	if err != nil {
		t.Fatalf("hoppertest: workflow %q: %v", id, err)
		return nil
	}
	for _, name := range steps {
		if !slices.ContainsFunc(found, func(s hopper.WorkflowStep) bool { return s.Step == name }) {
			t.Fatalf("hoppertest: workflow %q has no step %q", id, name)
			return nil
		}
	}
	return found
}

// RunWorkflow runs a workflow's steps without a worker, through the
// database's own rules: it takes the workflow's ready step with the lowest
// id (pending or scheduled, whatever its run_at), calls handle with it,
// and ends it: deleted when handle returns nil (its children count it as
// succeeded, as an acknowledgement would), cancelled otherwise (its
// children apply their policies). It goes on until no step is ready, and
// returns the names of the steps it ran, in order. Decode a step's payload
// with its kind's Decode.
func RunWorkflow(t TB, dbtx jobs.DBTX, id string, handle func(context.Context, jobs.Row) error) []string {
	t.Helper()
	ctx := context.Background()
	client := hopper.NewClient(dbtx)
	var ran []string
	for {
		steps, err := client.ListWorkflow(ctx, id)
		if err != nil {
			t.Fatalf("hoppertest: workflow %q: %v", id, err)
			return nil
		}
		next := slices.IndexFunc(steps, func(s hopper.WorkflowStep) bool {
			return s.State == jobs.StatePending || s.State == jobs.StateScheduled
		})
		if next < 0 {
			return ran
		}
		row, err := client.GetJob(ctx, steps[next].ID)
		if err != nil {
			t.Fatalf("hoppertest: workflow %q: %v", id, err)
			return nil
		}
		ran = append(ran, steps[next].Step)
		if handle(ctx, row) == nil {
			_, err = client.DeleteJob(ctx, row.ID)
		} else {
			err = client.CancelJob(ctx, row.ID)
		}
		if err != nil {
			t.Fatalf("hoppertest: workflow %q, step %q: %v", id, steps[next].Step, err)
			return nil
		}
	}
}
