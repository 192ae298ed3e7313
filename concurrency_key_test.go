package hopper_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// TestConcurrencyKeyTravels: a job's concurrency key is kept when it is
// cancelled, and restored when it is retried, so a retried job is still
// under its key's limit; every enqueue path stores it.
func TestConcurrencyKeyTravels(t *testing.T) {
	b := setup(t)
	id := b.enqueue(t, report, "a@example.com", jobs.ConcurrencyKey("tenant:7"))
	row, err := b.client.GetJob(b.Ctx, id)
	require.NoError(t, err)
	require.Equal(t, "tenant:7", row.ConcurrencyKey)

	_, err = b.client.CancelJobs(b.Ctx, id)
	require.NoError(t, err)
	row, err = b.client.GetJob(b.Ctx, id)
	require.NoError(t, err)
	require.Equal(t, jobs.StateCancelled, row.State)
	require.Equal(t, "tenant:7", row.ConcurrencyKey)

	_, err = b.client.RetryDeadJobs(b.Ctx, hopper.DeadFilter{IDs: []int64{id}, States: []jobs.State{jobs.StateCancelled}})
	require.NoError(t, err)
	row, err = b.client.GetJob(b.Ctx, id)
	require.NoError(t, err)
	require.Equal(t, jobs.StatePending, row.State)
	require.Equal(t, "tenant:7", row.ConcurrencyKey)

	// Every batch path: COPY now, COPY later, and the unique-key insert.
	res, err := jobs.EnqueueBatch(b.Ctx, b.Pool, []jobs.Entry{
		report.Entry(Email{To: "b"}, jobs.ConcurrencyKey("k1")),
		report.Entry(Email{To: "c"}, jobs.ConcurrencyKey("k2"), jobs.Delay(time.Hour)),
		report.Entry(Email{To: "d"}),
	})
	require.NoError(t, err)
	unique, err := jobs.EnqueueBatch(b.Ctx, b.Pool, []jobs.Entry{
		report.Entry(Email{To: "e"}, jobs.ConcurrencyKey("k3"), jobs.UniqueKey("u1")),
		report.Entry(Email{To: "f"}, jobs.UniqueKey("u2")),
	})
	require.NoError(t, err)
	for i, want := range map[int64]string{
		res.Results[0].ID: "k1", res.Results[1].ID: "k2", res.Results[2].ID: "",
		unique.Results[0].ID: "k3", unique.Results[1].ID: "",
	} {
		row, err := b.client.GetJob(b.Ctx, i)
		require.NoError(t, err)
		require.Equal(t, want, row.ConcurrencyKey, "job %d", i)
	}
}
