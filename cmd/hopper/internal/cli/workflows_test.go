package cli

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// TestWorkflowSentences: the ids a cancel or a retry names, the first ten
// of them; the states of a workflow's steps, in jobs.States' order; a
// step's parents by name, "job ID" for one no longer known.
func TestWorkflowSentences(t *testing.T) {
	require.Equal(t, "job 7", jobIDs([]int64{7}))
	require.Equal(t, "jobs 7 and 8", jobIDs([]int64{7, 8}))
	require.Equal(t, "jobs 1, 2 and 3", jobIDs([]int64{1, 2, 3}))
	many := make([]int64, 25)
	for i := range many {
		many[i] = int64(i + 1)
	}
	require.Equal(t, "jobs 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 15 more", jobIDs(many))
	require.Equal(t, "jobs 1, 2, 3, 4, 5, 6, 7, 8, 9 and 10", jobIDs(many[:10]))

	steps := []hopper.WorkflowStep{
		{ID: 1, Step: "a", State: jobs.StateCompleted},
		{ID: 2, Step: "b\tc", State: jobs.StateWaiting, Parents: []int64{1}},
		{ID: 3, Step: "d", State: jobs.StatePending, Parents: []int64{1, 2, 99}},
		{ID: 4, Step: "e", State: jobs.StateWaiting},
	}
	require.Equal(t, "1 pending, 2 waiting, 1 completed", stateCounts(steps))
	require.Equal(t, []string{"a", "b c", "job 99"}, parentNames(steps[2], stepNames(steps)))
	require.Empty(t, parentNames(steps[0], stepNames(steps)))
	require.Equal(t, "live step", liveSteps(1))
	require.Equal(t, "3 live steps", liveSteps(3))
	require.Equal(t, "dead or cancelled step", deadOrCancelled(1))
	require.Equal(t, "2 dead or cancelled steps", deadOrCancelled(2))
}

// TestWorkflowReportFieldNames: every field workflows show --json and
// workflows list --json print has a snake_case name.
func TestWorkflowReportFieldNames(t *testing.T) {
	snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	for _, typ := range []reflect.Type{reflect.TypeFor[workflowReport](), reflect.TypeFor[workflowStepRow](),
		reflect.TypeFor[workflowsPage](), reflect.TypeFor[workflowRow]()} {
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			require.Regexp(t, snake, name, "%s.%s", typ, typ.Field(i).Name)
		}
	}
}
