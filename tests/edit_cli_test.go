package tests

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
	"github.com/hopperq/hopper/jobs"
)

// TestCLIJobsEdit: hopper jobs edit changes each field of a job that has
// not started, prints it (or its JSON), and refuses running, finished and
// unknown jobs and bad input, changing nothing.
func TestCLIJobsEdit(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx := context.Background()
	future := time.Now().Add(time.Hour)
	id := func(opts testfactory.JobOpts) string {
		return strconv.FormatInt(testfactory.Job(ctx, t, d.Pool, &opts).ID, 10)
	}
	show := func(id string) jobs.Row {
		t.Helper()
		r := runHopper(t, d.URL, "", "jobs", "show", id, "--json")
		require.Zero(t, r.code, r.stderr)
		var row jobs.Row
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &row))
		return row
	}

	scheduled := id(testfactory.JobOpts{State: testfactory.Scheduled, RunAt: &future, Payload: json.RawMessage(`{"to":"ada"}`), Attempt: 2, MaxAttempts: 5})
	r := runHopper(t, d.URL, "", "jobs", "edit", scheduled, "--run-now", "--priority", "3", "--queue", "urgent",
		"--max-attempts", "4", "--payload", `{"to":"grace"}`)
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "updated job "+scheduled+"\n")
	require.Contains(t, r.stdout, "queue urgent  state pending")
	row := show(scheduled)
	require.Equal(t, jobs.StatePending, row.State)
	require.Equal(t, 3, row.Priority)
	require.Equal(t, "urgent", row.Queue)
	require.Equal(t, 4, row.MaxAttempts)
	require.JSONEq(t, `{"to":"grace"}`, string(row.Payload))

	r = runHopper(t, d.URL, "", "jobs", "edit", scheduled, "--run-at", "2h", "--json")
	require.Zero(t, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &row))
	require.Equal(t, jobs.StateScheduled, row.State, "moved to the future")
	require.WithinDuration(t, time.Now().Add(2*time.Hour), row.RunAt, time.Minute)

	r = runHopper(t, d.URL, "", "jobs", "edit", scheduled, "--payload", `{"v":1}`, "--version", "1", "--json")
	require.Zero(t, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &row))
	require.Equal(t, 1, row.Version)

	pending := id(testfactory.JobOpts{Attempt: 3, MaxAttempts: 5, Version: 2})
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"running", []string{id(testfactory.JobOpts{State: testfactory.Running}), "--priority", "1"}, 1, "is running: only pending, scheduled and waiting jobs can be changed"},
		{"completed", []string{id(testfactory.JobOpts{State: testfactory.Completed}), "--priority", "1"}, 1, "job already finished: it is completed"},
		{"dead", []string{id(testfactory.JobOpts{State: testfactory.Dead}), "--run-now"}, 1, "job already finished: it is dead"},
		{"cancelled", []string{id(testfactory.JobOpts{State: testfactory.Cancelled}), "--queue", "q"}, 1, "job already finished: it is cancelled"},
		{"unknown id", []string{"424242", "--priority", "1"}, 1, "no job 424242"},
		{"payload not JSON", []string{pending, "--payload", `{"a":`}, 2, "--payload is not valid JSON"},
		{"payload of another JSON type", []string{pending, "--payload", `[1]`}, 1, "payload does not fit the job: the job's payload is a JSON object"},
		{"payload at a newer version", []string{pending, "--payload", `{}`, "--version", "3"}, 1, "newer than the job's, 2"},
		{"version without payload", []string{pending, "--version", "1"}, 2, "give both"},
		{"bad queue", []string{pending, "--queue", ""}, 2, `--queue: invalid queue name: queue name "" is empty`},
		{"bad priority", []string{pending, "--priority", "10"}, 2, "--priority 10 is outside 0"},
		{"attempts below those made", []string{pending, "--max-attempts", "2"}, 1, "2 is not more than the 3 attempts the job has made (give 4 or more)"},
		{"run now and run at", []string{pending, "--run-now", "--run-at", "1h"}, 2, "not both"},
		{"bad run at", []string{pending, "--run-at", "soon"}, 2, "--run-at wants a time"},
		{"nothing to change", []string{pending}, 2, "say what to change"},
		{"a filter", []string{pending, "--priority", "1", "--kind", "k"}, 2, "edit does not take --kind"},
		{"two ids", []string{pending, pending, "--priority", "1"}, 2, "edit takes one job id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runHopper(t, d.URL, "", append([]string{"jobs", "edit"}, tc.args...)...)
			requireFailure(t, r, tc.code, tc.says)
		})
	}
	row = show(pending)
	require.Equal(t, 0, row.Priority, "refused edits changed nothing")
	require.Equal(t, 5, row.MaxAttempts)
	require.Equal(t, "default", row.Queue)

	r = runHopper(t, d.URL, "", "jobs", "list", "--priority", "1")
	requireFailure(t, r, 2, "list does not take --priority")
}

// TestCLIJobsDelete: hopper jobs delete asks first (no answer, or no, is
// a refusal that deletes nothing), deletes with y or --yes, prints the job
// it deleted, and refuses running, finished and unknown jobs.
func TestCLIJobsDelete(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx := context.Background()
	id := func(opts testfactory.JobOpts) string {
		return strconv.FormatInt(testfactory.Job(ctx, t, d.Pool, &opts).ID, 10)
	}
	live := func(id string) bool {
		r := runHopper(t, d.URL, "", "jobs", "show", id)
		return r.code == 0
	}

	job := id(testfactory.JobOpts{Kind: "mail", Queue: "email", Payload: json.RawMessage(`{"to":"ada"}`)})
	r := runHopper(t, d.URL, "", "jobs", "delete", job)
	requireFailure(t, r, 1, "not confirmed: no answer on stdin; nothing deleted (pass --yes to skip the question)")
	require.Contains(t, r.stdout, "Delete job "+job+" (pending, kind mail, queue email) for good, without a trace? [y/N]")
	r = runHopper(t, d.URL, "n\n", "jobs", "delete", job)
	requireFailure(t, r, 1, "not confirmed")
	require.True(t, live(job), "not deleted")

	r = runHopper(t, d.URL, "y\n", "jobs", "delete", job)
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, `deleted job `+job+` (it was pending; payload {"to": "ada"})`)
	require.False(t, live(job))

	future := time.Now().Add(time.Hour)
	job = id(testfactory.JobOpts{State: testfactory.Scheduled, RunAt: &future})
	r = runHopper(t, d.URL, "", "jobs", "delete", job, "--yes", "--json")
	require.Zero(t, r.code, r.stderr)
	var row jobs.Row
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &row))
	require.Equal(t, jobs.StateScheduled, row.State)
	require.False(t, live(job))

	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"running", []string{id(testfactory.JobOpts{State: testfactory.Running})}, 1, "is running: only pending, scheduled and waiting jobs can be changed"},
		{"running, --yes", []string{id(testfactory.JobOpts{State: testfactory.Running}), "--yes"}, 1, "is running"},
		{"completed", []string{id(testfactory.JobOpts{State: testfactory.Completed}), "--yes"}, 1, "job already finished: it is completed"},
		{"dead", []string{id(testfactory.JobOpts{State: testfactory.Dead})}, 1, "job already finished: it is dead"},
		{"cancelled", []string{id(testfactory.JobOpts{State: testfactory.Cancelled}), "--yes"}, 1, "job already finished: it is cancelled"},
		{"unknown id", []string{"424242", "--yes"}, 1, "no job 424242"},
		{"no id", []string{"--yes"}, 2, "delete takes one job id"},
		{"an edit flag", []string{"1", "--priority", "1"}, 2, "delete does not take --priority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runHopper(t, d.URL, "", append([]string{"jobs", "delete"}, tc.args...)...)
			requireFailure(t, r, tc.code, tc.says)
		})
	}
}

// TestCLIAttemptsLeaveOutUncharged: a job given back once at a worker's
// shutdown, before it ran (attempt 1 of 26 in the table, its metadata
// counting the claim given back), shows 0 of 25 attempts, as they count
// against its limit, in jobs list and jobs show.
func TestCLIAttemptsLeaveOutUncharged(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	job := testfactory.Job(context.Background(), t, d.Pool, &testfactory.JobOpts{Kind: "mail", Attempt: 1, MaxAttempts: 26,
		Meta: json.RawMessage(`{"hopper.uncharged": "1"}`)})
	id := strconv.FormatInt(job.ID, 10)
	r := runHopper(t, d.URL, "", "jobs", "show", id)
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "attempts 0/25 (and 1 given back uncharged)")
	r = runHopper(t, d.URL, "", "jobs", "list")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?m)^`+id+`\s+pending\s+default\s+mail\s+0/25\s`, r.stdout)
}
