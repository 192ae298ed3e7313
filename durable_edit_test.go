package hopper_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

var durableEdit = jobs.MustDefine[Email]("durable_edit")

// TestDurableJobKeepsItsPayload: a job whose durable handler recorded a
// step and sleeps keeps the payload its records were made for. Every way
// of giving it another one is refused or goes around it: ReplaceWaiting
// and Debounce treat it as running (with live keys only it gives up its
// key and the new payload is a new job; where finished jobs hold the key
// it is kept); UpdateJob with a typed or a raw payload, and the SQL
// statement itself, refuse with ErrHasRecords ('durable'); its run time
// may still change, and its next run replays the step for its own
// payload. Before, the replace gave it the new payload (same id), and its
// next run replayed the step recorded for the old one.
func TestDurableJobKeepsItsPayload(t *testing.T) {
	b := setup(t)
	var mu sync.Mutex
	greeted := map[int64][]string{} // per job: "payload/step" per run
	handler := func(ctx context.Context, j *jobs.Job[Email]) error {
		step, err := worker.Step(ctx, j, "greet", func(context.Context) (string, error) { return "hello " + j.Payload.To, nil })
		if err != nil {
			return err
		}
		mu.Lock()
		greeted[j.ID] = append(greeted[j.ID], j.Payload.To+"/"+step)
		mu.Unlock()
		return worker.Sleep(ctx, j, "nap", time.Hour)
	}
	runs := func(id int64) []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), greeted[id]...)
	}
	live := b.enqueue(t, durableEdit, "ann", jobs.UniqueKey("live"))
	kept := b.enqueue(t, durableEdit, "bob", jobs.UniqueKey("kept"), jobs.UniqueStates(jobs.StateCompleted))
	debounced := b.enqueue(t, durableEdit, "cat", jobs.UniqueKey("debounced"))
	asleep := func() bool {
		for _, id := range []int64{live, kept, debounced} {
			if len(runs(id)) == 0 || b.state(t, id) != jobs.StateScheduled {
				return false
			}
		}
		return true
	}
	register := func(w *worker.Worker) { require.NoError(t, worker.Handle(w, durableEdit, handler)) }
	b.runUntil(t, worker.Config{}, register, "the jobs asleep after their step", asleep)

	// Replace, live keys only: the sleeper gives up its key; the new
	// payload is a new job.
	res, err := durableEdit.Enqueue(b.Ctx, b.Pool, Email{To: "zed"}, jobs.UniqueKey("live"), jobs.ReplaceWaiting())
	require.NoError(t, err)
	require.Equal(t, jobs.EnqueueInserted, res.Outcome())
	require.NotEqual(t, live, res.ID)
	// Replace where finished jobs hold the key: kept.
	res, err = durableEdit.Enqueue(b.Ctx, b.Pool, Email{To: "zed"}, jobs.UniqueKey("kept"),
		jobs.UniqueStates(jobs.StateCompleted), jobs.ReplaceWaiting())
	require.NoError(t, err)
	require.Equal(t, jobs.EnqueueKept, res.Outcome())
	require.Equal(t, kept, res.ID)
	// Debounce: as the replace, with live keys only.
	res, err = durableEdit.Enqueue(b.Ctx, b.Pool, Email{To: "zed"}, jobs.UniqueKey("debounced"), jobs.Debounce(time.Hour))
	require.NoError(t, err)
	require.Equal(t, jobs.EnqueueInserted, res.Outcome())
	// Edits of the payload.
	_, err = b.client.UpdateJob(b.Ctx, kept, hopper.JobUpdate{Payload: hopper.PayloadOf(durableEdit, Email{To: "zed"})})
	require.ErrorIs(t, err, hopper.ErrHasRecords)
	_, err = b.client.UpdateJob(b.Ctx, kept, hopper.JobUpdate{Payload: hopper.RawPayload(json.RawMessage(`{"to": "zed"}`), 0)})
	require.ErrorIs(t, err, hopper.ErrHasRecords)
	_, err = b.client.UpdateJob(b.Ctx, kept, hopper.JobUpdate{Payload: hopper.PayloadOf(email, Email{To: "zed"})})
	require.ErrorIs(t, err, hopper.ErrHasRecords, "another kind's payload: refused, the kind kept")
	r, err := db.New(b.Pool).UpdateJob(b.Ctx, db.UpdateJobParams{ID: kept, Payload: json.RawMessage(`{"to": "zed"}`)})
	require.NoError(t, err)
	require.Equal(t, "durable", r.Refused, "the statement itself refuses")
	for _, id := range []int64{live, kept, debounced} {
		row, err := b.client.GetJob(b.Ctx, id)
		require.NoError(t, err)
		require.JSONEq(t, `{"to": "`+map[int64]string{live: "ann", kept: "bob", debounced: "cat"}[id]+`"}`, string(row.Payload))
		require.Equal(t, durableEdit.Name(), row.Kind)
	}
	// The run time may change: run now, and the replay greets its own
	// payload again.
	_, err = b.client.UpdateJob(b.Ctx, kept, hopper.JobUpdate{RunNow: true})
	require.NoError(t, err)
	b.runUntil(t, worker.Config{}, register, "the kept job ran again", func() bool { return len(runs(kept)) == 2 })
	require.Equal(t, []string{"bob/hello bob", "bob/hello bob"}, runs(kept))
}
