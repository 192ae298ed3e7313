package testfactory_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
	"github.com/hopperq/hopper/jobs"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func TestJob(t *testing.T) {
	b := testdb.Setup(t)
	hourAgo := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	inAnHour := time.Now().Add(time.Hour).Truncate(time.Microsecond)

	for _, tt := range []struct {
		name  string
		opts  *testfactory.JobOpts
		check func(t *testing.T, j db.HopperAllJob)
	}{
		{"nil opts: a pending job due now", nil, func(t *testing.T, j db.HopperAllJob) {
			require.Equal(t, "pending", j.State)
			require.Equal(t, "default", j.Queue)
			require.Equal(t, "k", j.Kind)
			require.EqualValues(t, 1, j.Version)
			require.EqualValues(t, 0, j.Attempt)
			require.EqualValues(t, 25, j.MaxAttempts)
			require.JSONEq(t, `{}`, string(j.Payload))
			require.JSONEq(t, `[]`, string(j.Errors))
			require.Nil(t, j.LeaseOwner)
			require.Nil(t, j.Meta)
			require.WithinDuration(t, time.Now(), j.RunAt, time.Minute)
		}},
		{"scheduled in an hour", &testfactory.JobOpts{State: testfactory.Scheduled, RunAt: &inAnHour}, func(t *testing.T, j db.HopperAllJob) {
			require.Equal(t, "scheduled", j.State)
			require.True(t, j.RunAt.Equal(inAnHour))
		}},
		{"running with a default lease", &testfactory.JobOpts{State: testfactory.Running}, func(t *testing.T, j db.HopperAllJob) {
			require.Equal(t, "running", j.State)
			require.EqualValues(t, 1, j.Attempt, "a running job has been claimed once")
			require.Equal(t, "testfactory", *j.LeaseOwner)
			require.True(t, j.LeaseUntil.After(time.Now()))
		}},
		{"running with an expired lease on its third attempt", &testfactory.JobOpts{
			State: testfactory.Running, Attempt: 3, LeaseOwner: "w1", LeaseUntil: &hourAgo,
		}, func(t *testing.T, j db.HopperAllJob) {
			require.EqualValues(t, 3, j.Attempt)
			require.Equal(t, "w1", *j.LeaseOwner)
			require.True(t, j.LeaseUntil.Equal(hourAgo))
		}},
		{"every field of a live job", &testfactory.JobOpts{
			Queue: "mail", Kind: "email", Version: 2, Priority: 7, Payload: json.RawMessage(`{"to":"a"}`),
			Meta: json.RawMessage(`{"trace":"x"}`), MaxAttempts: 4, CreatedAt: &hourAgo, RunAt: &hourAgo,
			UniqueKey: "u1", ConcurrencyKey: "c1", Errors: json.RawMessage(`[{"attempt":1,"error":"boom"}]`),
		}, func(t *testing.T, j db.HopperAllJob) {
			require.Equal(t, "mail", j.Queue)
			require.Equal(t, "email", j.Kind)
			require.EqualValues(t, 2, j.Version)
			require.EqualValues(t, 7, j.Priority)
			require.JSONEq(t, `{"to":"a"}`, string(j.Payload))
			require.JSONEq(t, `{"trace":"x"}`, string(j.Meta))
			require.EqualValues(t, 4, j.MaxAttempts)
			require.True(t, j.CreatedAt.Equal(hourAgo))
			require.True(t, j.RunAt.Equal(hourAgo))
			require.Equal(t, "u1", *j.UniqueKey)
			require.Equal(t, "c1", *j.ConcurrencyKey)
			require.JSONEq(t, `[{"attempt":1,"error":"boom"}]`, string(j.Errors))
		}},
		{"dead", &testfactory.JobOpts{State: testfactory.Dead, Attempt: 25, Reason: "max attempts"}, func(t *testing.T, j db.HopperAllJob) {
			require.Equal(t, "dead", j.State)
			require.EqualValues(t, 25, j.Attempt)
			require.Equal(t, "max attempts", *j.Reason)
			require.NotNil(t, j.FinishedAt)
		}},
		{"cancelled before any attempt", &testfactory.JobOpts{State: testfactory.Cancelled}, func(t *testing.T, j db.HopperAllJob) {
			require.Equal(t, "cancelled", j.State)
			require.EqualValues(t, 0, j.Attempt)
			require.Equal(t, "testfactory", *j.Reason)
		}},
		{"completed an hour ago, with a result", &testfactory.JobOpts{
			State: testfactory.Completed, FinishedAt: &hourAgo, Result: json.RawMessage(`{"ok":true}`),
		}, func(t *testing.T, j db.HopperAllJob) {
			require.Equal(t, "completed", j.State)
			require.EqualValues(t, 1, j.Attempt)
			require.True(t, j.FinishedAt.Equal(hourAgo))
			require.JSONEq(t, `{"ok":true}`, string(j.Result))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			j := testfactory.Job(b.Ctx, t, b.Pool, tt.opts)
			require.NotZero(t, j.ID)
			tt.check(t, j)
		})
	}
}

// The ids of jobs in every table come from one sequence: never the same
// twice, as the worker's moves between tables keep them.
func TestJobIDsAreDistinctAcrossTables(t *testing.T) {
	b := testdb.Setup(t)
	seen := map[int64]bool{}
	for _, s := range []string{testfactory.Pending, testfactory.Dead, testfactory.Completed, testfactory.Running, testfactory.Cancelled} {
		j := testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{State: s})
		require.False(t, seen[j.ID], "id %d twice", j.ID)
		seen[j.ID] = true
	}
	live, dead := b.Totals(t)
	require.EqualValues(t, 2, live)
	require.EqualValues(t, 1, dead)
}

// Step and Progress write what a durable handler records: the client
// reads them back, and the job's end removes them.
func TestStepAndProgress(t *testing.T) {
	b := testdb.Setup(t)
	until := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	j := testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{State: testfactory.Scheduled, RunAt: &until})
	testfactory.Step(b.Ctx, t, b.Pool, j.ID, &testfactory.StepOpts{Result: json.RawMessage(`{"a": 1}`)})
	testfactory.Step(b.Ctx, t, b.Pool, j.ID, &testfactory.StepOpts{Position: 1, Name: "nap", Kind: "sleep", State: "waiting", Until: &until})
	testfactory.Progress(b.Ctx, t, b.Pool, j.ID, json.RawMessage(`{"done": 1}`))
	client := hopper.NewClient(b.Pool)
	steps, err := client.ListJobSteps(b.Ctx, j.ID)
	require.NoError(t, err)
	require.Len(t, steps, 2)
	require.Equal(t, "step", steps[0].Name)
	require.JSONEq(t, `{"a": 1}`, string(steps[0].Result))
	require.Equal(t, hopper.Suspension{Wait: "sleep", Until: until}, hopper.SuspensionOf(jobs.StateScheduled, steps, time.Now()))
	p, err := client.GetJobProgress(b.Ctx, j.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"done": 1}`, string(p.Value))

	_, err = client.DeleteJob(b.Ctx, j.ID)
	require.NoError(t, err)
	steps, err = client.ListJobSteps(b.Ctx, j.ID)
	require.NoError(t, err)
	require.Empty(t, steps, "the job's end removed its records")
	_, err = client.GetJobProgress(b.Ctx, j.ID)
	require.ErrorIs(t, err, hopper.ErrNotFound, "and its progress")
}
