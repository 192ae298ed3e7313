package hopper_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// emailV2 is the email kind as a later build defines it: payload version
// 2, upgraded from 1.
var emailV2 = jobs.MustDefine[Email]("email", jobs.Version(2),
	jobs.Upgrade(1, func(raw json.RawMessage) (json.RawMessage, error) { return raw, nil }))

var tinyEmail = jobs.MustDefine[Email]("email", jobs.MaxPayloadBytes(10))

func ptr[T any](v T) *T { return &v }

// TestUpdateJob changes each field of pending and scheduled jobs, and
// checks the job as stored and the wake-ups its queue's workers get.
func TestUpdateJob(t *testing.T) {
	future := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	past := time.Now().Add(-time.Hour)
	for _, tc := range []struct {
		name   string
		job    testfactory.JobOpts
		update hopper.JobUpdate
		check  func(t *testing.T, before, after jobs.Row)
		// wake is the queue woken with the job's place ("": none)
		wake string
	}{{
		name:   "typed payload at the kind's version",
		job:    testfactory.JobOpts{Kind: "email", Payload: json.RawMessage(`{"to":"a@example.com"}`)},
		update: hopper.JobUpdate{Payload: hopper.PayloadOf(emailV2, Email{To: "b@example.com"})},
		check: func(t *testing.T, before, after jobs.Row) {
			require.JSONEq(t, `{"to":"b@example.com"}`, string(after.Payload))
			require.Equal(t, 2, after.Version)
			require.Equal(t, before.RunAt, after.RunAt)
			require.Equal(t, jobs.StatePending, after.State)
		},
	}, {
		name:   "raw payload keeps the job's version",
		job:    testfactory.JobOpts{Version: 3, Payload: json.RawMessage(`{"n":1}`)},
		update: hopper.JobUpdate{Payload: hopper.RawPayload(json.RawMessage(`{"n": 2}`), 0)},
		check: func(t *testing.T, _, after jobs.Row) {
			require.JSONEq(t, `{"n":2}`, string(after.Payload))
			require.Equal(t, 3, after.Version)
		},
	}, {
		name:   "raw payload at an older version",
		job:    testfactory.JobOpts{Version: 3},
		update: hopper.JobUpdate{Payload: hopper.RawPayload(json.RawMessage(`{"old":true}`), 1)},
		check: func(t *testing.T, _, after jobs.Row) {
			require.JSONEq(t, `{"old":true}`, string(after.Payload))
			require.Equal(t, 1, after.Version)
		},
	}, {
		name:   "run now makes a scheduled job pending",
		job:    testfactory.JobOpts{State: testfactory.Scheduled, RunAt: &future},
		update: hopper.JobUpdate{RunNow: true},
		check: func(t *testing.T, _, after jobs.Row) {
			require.Equal(t, jobs.StatePending, after.State)
			require.WithinDuration(t, time.Now(), after.RunAt, time.Minute)
		},
		wake: "default",
	}, {
		name:   "run now keeps a ready job's place",
		job:    testfactory.JobOpts{RunAt: &past},
		update: hopper.JobUpdate{RunNow: true},
		check: func(t *testing.T, before, after jobs.Row) {
			require.Equal(t, jobs.StatePending, after.State)
			require.Equal(t, before.RunAt, after.RunAt)
		},
	}, {
		name:   "a past time is now",
		job:    testfactory.JobOpts{State: testfactory.Scheduled, RunAt: &future},
		update: hopper.JobUpdate{RunAt: &past},
		check: func(t *testing.T, _, after jobs.Row) {
			require.Equal(t, jobs.StatePending, after.State)
			require.WithinDuration(t, time.Now(), after.RunAt, time.Minute)
		},
		wake: "default",
	}, {
		name:   "a time far back is now, not the far future pgx would overflow it into",
		job:    testfactory.JobOpts{State: testfactory.Scheduled, RunAt: &future},
		update: hopper.JobUpdate{RunAt: ptr(time.Date(-300000, 1, 1, 0, 0, 0, 0, time.UTC))},
		check: func(t *testing.T, _, after jobs.Row) {
			require.Equal(t, jobs.StatePending, after.State)
			require.WithinDuration(t, time.Now(), after.RunAt, time.Minute)
		},
		wake: "default",
	}, {
		name:   "a future time makes a pending job scheduled",
		job:    testfactory.JobOpts{},
		update: hopper.JobUpdate{RunAt: &future},
		check: func(t *testing.T, _, after jobs.Row) {
			require.Equal(t, jobs.StateScheduled, after.State)
			require.Equal(t, future, after.RunAt.UTC())
		},
	}, {
		name:   "a scheduled job moves to another future time",
		job:    testfactory.JobOpts{State: testfactory.Scheduled, RunAt: ptr(future.Add(time.Hour))},
		update: hopper.JobUpdate{RunAt: &future},
		check: func(t *testing.T, _, after jobs.Row) {
			require.Equal(t, jobs.StateScheduled, after.State)
			require.Equal(t, future, after.RunAt.UTC())
		},
	}, {
		name:   "priority",
		job:    testfactory.JobOpts{Priority: 5},
		update: hopper.JobUpdate{Priority: ptr(1)},
		check:  func(t *testing.T, _, after jobs.Row) { require.Equal(t, 1, after.Priority) },
		wake:   "default",
	}, {
		name:   "priority of a scheduled job wakes no one",
		job:    testfactory.JobOpts{State: testfactory.Scheduled, RunAt: &future},
		update: hopper.JobUpdate{Priority: ptr(9)},
		check: func(t *testing.T, _, after jobs.Row) {
			require.Equal(t, 9, after.Priority)
			require.Equal(t, jobs.StateScheduled, after.State)
		},
	}, {
		name:   "queue, keeping the keys",
		job:    testfactory.JobOpts{Queue: "slow", UniqueKey: "u1", ConcurrencyKey: "acme"},
		update: hopper.JobUpdate{Queue: ptr("fast")},
		check: func(t *testing.T, _, after jobs.Row) {
			require.Equal(t, "fast", after.Queue)
			require.Equal(t, "u1", after.UniqueKey)
			require.Equal(t, "acme", after.ConcurrencyKey)
		},
		wake: "fast",
	}, {
		name:   "max attempts",
		job:    testfactory.JobOpts{Attempt: 3, MaxAttempts: 5},
		update: hopper.JobUpdate{MaxAttempts: ptr(4)},
		check: func(t *testing.T, _, after jobs.Row) {
			require.Equal(t, 4, after.MaxAttempts)
			require.Equal(t, 3, after.Attempt)
		},
	}, {
		name: "everything at once",
		job:  testfactory.JobOpts{Kind: "email", State: testfactory.Scheduled, RunAt: &future},
		update: hopper.JobUpdate{Payload: hopper.PayloadOf(email, Email{To: "c@example.com"}), RunNow: true,
			Priority: ptr(2), Queue: ptr("mail"), MaxAttempts: ptr(3)},
		check: func(t *testing.T, _, after jobs.Row) {
			require.JSONEq(t, `{"to":"c@example.com"}`, string(after.Payload))
			require.Equal(t, jobs.StatePending, after.State)
			require.Equal(t, 2, after.Priority)
			require.Equal(t, "mail", after.Queue)
			require.Equal(t, 3, after.MaxAttempts)
		},
		wake: "mail",
	}, {
		name:   "nothing",
		job:    testfactory.JobOpts{},
		update: hopper.JobUpdate{},
		check:  func(t *testing.T, before, after jobs.Row) { require.Equal(t, before, after) },
	}} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			listener := b.Listen(t)
			before := b.row(t, testfactory.Job(b.Ctx, t, b.Pool, &tc.job))
			b.WakeUps(t, listener) // the insert's
			got, err := b.client.UpdateJob(b.Ctx, before.ID, tc.update)
			require.NoError(t, err)
			after, err := b.client.GetJob(b.Ctx, before.ID)
			require.NoError(t, err)
			require.Equal(t, after, got, "UpdateJob returns the job as stored")
			tc.check(t, before, after)
			wakes := b.WakeUps(t, listener)
			if tc.wake == "" {
				require.Empty(t, wakes)
				return
			}
			require.Equal(t, []testdb.WakeUp{{Schema: b.Schema, Queue: tc.wake, Priority: int16(after.Priority), RunAt: after.RunAt.UTC(), ID: after.ID}}, wakes)
		})
	}
}

// TestUpdateJobRefused: every job that cannot be edited, and every change
// that cannot be made, fails with its sentinel and leaves the job as it
// was.
func TestUpdateJobRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		job    *testfactory.JobOpts // nil: no such job
		update hopper.JobUpdate
		want   error
		says   string
	}{
		{"running", &testfactory.JobOpts{State: testfactory.Running}, hopper.JobUpdate{Priority: ptr(1)}, hopper.ErrRunning, "claimed"},
		{"completed", &testfactory.JobOpts{State: testfactory.Completed}, hopper.JobUpdate{Priority: ptr(1)}, hopper.ErrFinished, "it is completed"},
		{"dead", &testfactory.JobOpts{State: testfactory.Dead}, hopper.JobUpdate{RunNow: true}, hopper.ErrFinished, "it is dead"},
		{"cancelled", &testfactory.JobOpts{State: testfactory.Cancelled}, hopper.JobUpdate{Queue: ptr("q")}, hopper.ErrFinished, "it is cancelled"},
		{"unknown id", nil, hopper.JobUpdate{Priority: ptr(1)}, hopper.ErrNotFound, "not found"},
		{"payload of another kind", &testfactory.JobOpts{Kind: "report"},
			hopper.JobUpdate{Payload: hopper.PayloadOf(email, Email{To: "x"})}, hopper.ErrPayloadMismatch, `for kind "email", the job is of kind "report"`},
		{"payload over the kind's limit", &testfactory.JobOpts{Kind: "email"},
			hopper.JobUpdate{Payload: hopper.PayloadOf(tinyEmail, Email{To: "far too long"})}, jobs.ErrPayloadTooLarge, "payload of email"},
		{"raw payload not JSON", &testfactory.JobOpts{}, hopper.JobUpdate{Payload: hopper.RawPayload(json.RawMessage(`{"a":`), 0)}, jobs.ErrMarshal, "not valid JSON"},
		{"raw payload of another JSON type", &testfactory.JobOpts{}, hopper.JobUpdate{Payload: hopper.RawPayload(json.RawMessage(`[1]`), 0)}, hopper.ErrPayloadMismatch, "a JSON object"},
		{"raw payload too large", &testfactory.JobOpts{},
			hopper.JobUpdate{Payload: hopper.RawPayload(json.RawMessage(`"`+strings.Repeat("x", jobs.DefaultMaxPayloadBytes)+`"`), 0)}, jobs.ErrPayloadTooLarge, "over the limit"},
		{"raw payload in the clear over an encrypted one", &testfactory.JobOpts{Payload: json.RawMessage(`{"hopper.encrypted": {"v": 1, "key": "k1", "nonce": "AAAA", "data": "AAAA"}}`)},
			hopper.JobUpdate{Payload: hopper.RawPayload(json.RawMessage(`{"to": "x"}`), 0)}, hopper.ErrPayloadMismatch, "the job's payload is encrypted"},
		{"raw payload at a newer version", &testfactory.JobOpts{Version: 2}, hopper.JobUpdate{Payload: hopper.RawPayload(json.RawMessage(`{}`), 3)}, hopper.ErrPayloadMismatch, "newer than the job's, 2"},
		{"raw payload at a negative version", &testfactory.JobOpts{}, hopper.JobUpdate{Payload: hopper.RawPayload(json.RawMessage(`{}`), -1)}, hopper.ErrPayloadMismatch, "version -1"},
		{"bad queue", &testfactory.JobOpts{}, hopper.JobUpdate{Queue: ptr("")}, jobs.ErrInvalidQueue, "is empty"},
		{"long queue", &testfactory.JobOpts{}, hopper.JobUpdate{Queue: ptr(strings.Repeat("q", 129))}, jobs.ErrInvalidQueue, "over the limit"},
		{"bad priority", &testfactory.JobOpts{}, hopper.JobUpdate{Priority: ptr(10)}, jobs.ErrInvalidPriority, "outside 0"},
		{"max attempts below 1", &testfactory.JobOpts{}, hopper.JobUpdate{MaxAttempts: ptr(0)}, jobs.ErrInvalidMaxAttempts, "must be 1 or more"},
		{"max attempts below the attempts made", &testfactory.JobOpts{Attempt: 3, MaxAttempts: 5}, hopper.JobUpdate{MaxAttempts: ptr(2)}, jobs.ErrInvalidMaxAttempts, "the 3 attempts the job has made (give 4 or more)"},
		{"max attempts equal to the attempts made", &testfactory.JobOpts{Attempt: 3, MaxAttempts: 5}, hopper.JobUpdate{MaxAttempts: ptr(3)}, jobs.ErrInvalidMaxAttempts, "give 4 or more"},
		{"run now and run at", &testfactory.JobOpts{}, hopper.JobUpdate{RunNow: true, RunAt: ptr(time.Now())}, jobs.ErrInvalidRunAt, "both set"},
		{"run at in the year 9999", &testfactory.JobOpts{}, hopper.JobUpdate{RunAt: ptr(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC))}, jobs.ErrInvalidRunAt, "run_at is in the year 9999 or later"},
		{"run at past what pgx encodes", &testfactory.JobOpts{}, hopper.JobUpdate{RunAt: ptr(time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC))}, jobs.ErrInvalidRunAt, "year 9999"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			id := int64(424242)
			var before jobs.Row
			if tc.job != nil {
				before = b.row(t, testfactory.Job(b.Ctx, t, b.Pool, tc.job))
				id = before.ID
			}
			_, err := b.client.UpdateJob(b.Ctx, id, tc.update)
			require.ErrorIs(t, err, tc.want)
			require.ErrorContains(t, err, fmt.Sprintf("update job %d: ", id))
			require.ErrorContains(t, err, tc.says)
			if tc.job != nil {
				after, err := b.client.GetJob(b.Ctx, id)
				require.NoError(t, err)
				require.Equal(t, before, after, "a refused update changes nothing")
			}
		})
	}
}

// TestDeleteJob deletes pending and scheduled jobs and nothing else.
func TestDeleteJob(t *testing.T) {
	b := setup(t)
	future := time.Now().Add(time.Hour)
	for _, opts := range []testfactory.JobOpts{
		{Payload: json.RawMessage(`{"n":1}`), UniqueKey: "once"},
		{State: testfactory.Scheduled, RunAt: &future},
	} {
		job := b.row(t, testfactory.Job(b.Ctx, t, b.Pool, &opts))
		gone, err := b.client.DeleteJob(b.Ctx, job.ID)
		require.NoError(t, err)
		require.Equal(t, job, gone, "DeleteJob returns the job as it was")
		_, err = b.client.GetJob(b.Ctx, job.ID)
		require.ErrorIs(t, err, hopper.ErrNotFound, "deleted without a trace")
		_, err = b.client.DeleteJob(b.Ctx, job.ID)
		require.ErrorIs(t, err, hopper.ErrNotFound)
	}
	// The unique key is free again.
	res, err := jobs.EnqueueRaw(b.Ctx, b.Pool, "k", 1, json.RawMessage(`{}`), jobs.UniqueKey("once"))
	require.NoError(t, err)
	require.False(t, res.Duplicate)

	for state, want := range map[string]error{
		testfactory.Running:   hopper.ErrRunning,
		testfactory.Completed: hopper.ErrFinished,
		testfactory.Dead:      hopper.ErrFinished,
		testfactory.Cancelled: hopper.ErrFinished,
	} {
		job := testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{State: state})
		_, err := b.client.DeleteJob(b.Ctx, job.ID)
		require.ErrorIs(t, err, want, state)
		require.ErrorContains(t, err, fmt.Sprintf("delete job %d: ", job.ID))
		require.Equal(t, jobs.State(state), b.state(t, job.ID), "left as it was")
	}
	_, err = b.client.DeleteJob(b.Ctx, 0)
	require.ErrorIs(t, err, hopper.ErrNotFound)
}

// TestUpdateJobTx: the update commits or rolls back with the caller's
// transaction, and holds the job away from workers until then.
func TestUpdateJobTx(t *testing.T) {
	b := setup(t)
	job := testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{})

	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.Ctx)
	row, err := b.client.UpdateJobTx(b.Ctx, tx, job.ID, hopper.JobUpdate{Priority: ptr(7)})
	require.NoError(t, err)
	require.Equal(t, 7, row.Priority)
	// A claim meanwhile skips the locked job.
	claimed, err := b.Queries.Dequeue(b.Ctx, db.DequeueParams{
		Queue: "default", AfterPriority: -1, Kinds: []string{"k"}, MaxVersions: []int32{1},
		MaxJobs: 10, Owner: "w", LeaseMs: 30000,
	})
	require.NoError(t, err)
	require.Empty(t, claimed)
	require.NoError(t, tx.Rollback(b.Ctx))
	got, err := b.client.GetJob(b.Ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, int(job.Priority), got.Priority, "rolled back")

	tx, err = b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	_, err = b.client.DeleteJobTx(b.Ctx, tx, job.ID)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.Ctx))
	_, err = b.client.GetJob(b.Ctx, job.ID)
	require.ErrorIs(t, err, hopper.ErrNotFound)

	// A refused edit of a running job does not lock it: its worker's
	// acknowledgement never waits for the caller's transaction.
	running := testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{State: testfactory.Running})
	tx, err = b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.Ctx)
	_, err = b.client.UpdateJobTx(b.Ctx, tx, running.ID, hopper.JobUpdate{Priority: ptr(1)})
	require.ErrorIs(t, err, hopper.ErrRunning)
	_, err = b.client.DeleteJobTx(b.Ctx, tx, running.ID)
	require.ErrorIs(t, err, hopper.ErrRunning)
	_, err = b.Pool.Exec(b.Ctx, "SELECT id FROM hopper_jobs WHERE id = $1 FOR UPDATE NOWAIT", running.ID)
	require.NoError(t, err, "the running job is not locked")
}

// TestEditsWaitForAClaim: an edit or a delete that finds its job locked
// by a claim under way waits for it; the claim committed, it sees the job
// running and refuses it, changing nothing; the claim rolled back, it
// changes the job.
func TestEditsWaitForAClaim(t *testing.T) {
	b := setup(t)
	for _, commit := range []bool{true, false} {
		for _, op := range []string{"update", "delete"} {
			queue := fmt.Sprintf("%s-%v", op, commit)
			job := testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{Queue: queue})
			tx, err := b.Pool.Begin(b.Ctx)
			require.NoError(t, err)
			var claimer int32
			require.NoError(t, tx.QueryRow(b.Ctx, "SELECT pg_backend_pid()").Scan(&claimer))
			claimed, err := db.New(tx).Dequeue(b.Ctx, db.DequeueParams{
				Queue: queue, AfterPriority: -1, Kinds: []string{"k"}, MaxVersions: []int32{1},
				MaxJobs: 1, Owner: "w", LeaseMs: 30000,
			})
			require.NoError(t, err)
			require.Len(t, claimed, 1)

			errc := make(chan error, 1)
			go func() {
				var err error
				if op == "update" {
					_, err = b.client.UpdateJob(b.Ctx, job.ID, hopper.JobUpdate{Priority: ptr(4)})
				} else {
					_, err = b.client.DeleteJob(b.Ctx, job.ID)
				}
				errc <- err
			}()
			testdb.WaitFor(t, "the "+op+" waiting on the claim's lock", func() bool {
				var n int
				require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT count(*) FROM pg_stat_activity WHERE $1::integer = ANY (pg_blocking_pids(pid))", claimer).Scan(&n))
				return n > 0
			})
			if commit {
				require.NoError(t, tx.Commit(b.Ctx))
				require.ErrorIs(t, <-errc, hopper.ErrRunning, "%s after a claim", op)
				row, err := b.client.GetJob(b.Ctx, job.ID)
				require.NoError(t, err)
				require.Equal(t, jobs.StateRunning, row.State)
				require.Equal(t, int(job.Priority), row.Priority, "unchanged")
				continue
			}
			require.NoError(t, tx.Rollback(b.Ctx))
			require.NoError(t, <-errc, "%s after a claim rolled back", op)
			row, err := b.client.GetJob(b.Ctx, job.ID)
			if op == "delete" {
				require.ErrorIs(t, err, hopper.ErrNotFound)
				continue
			}
			require.NoError(t, err)
			require.Equal(t, jobs.StatePending, row.State)
			require.Equal(t, 4, row.Priority)
		}
	}
}

// TestUpdateJobRacesClaims: 20 goroutines edit jobs while a worker claims
// and runs them. An edit lands before the claim, and the worker runs the
// job as edited, or is refused; never does one change a running job: the
// payload each handler received is the payload the job completed with,
// and it is that of an edit that succeeded.
func TestUpdateJobRacesClaims(t *testing.T) {
	b := setup(t)
	const jobCount, editors = 10, 20
	type marked struct {
		N int64 `json:"n"`
	}
	kind := jobs.MustDefine[marked]("marked")
	ids := make([]int64, jobCount)
	for i := range ids {
		res, err := kind.Enqueue(b.Ctx, b.Pool, marked{N: -1}, jobs.Queue("race"))
		require.NoError(t, err)
		ids[i] = res.ID
	}

	var (
		mu        sync.Mutex
		landed    = map[int64]map[int64]bool{} // job -> markers of edits that succeeded
		ran       = map[int64]int64{}          // job -> the marker its handler received
		refused   = map[int64]chan struct{}{}  // closed at a job's first edit refused as running
		marker    atomic.Int64
		badErrors []error
	)
	for _, id := range ids {
		landed[id] = map[int64]bool{}
		refused[id] = make(chan struct{})
	}
	done := make(chan struct{})
	var editing sync.WaitGroup
	for range editors {
		editing.Add(1)
		go func() {
			defer editing.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				for _, id := range ids {
					n := marker.Add(1)
					row, err := b.client.UpdateJob(b.Ctx, id, hopper.JobUpdate{Payload: hopper.PayloadOf(kind, marked{N: n})})
					mu.Lock()
					switch {
					case err == nil && row.State == jobs.StatePending:
						landed[id][n] = true
					case err == nil:
						badErrors = append(badErrors, fmt.Errorf("job %d: an edit landed on a %s job", id, row.State))
					case errors.Is(err, hopper.ErrRunning):
						select {
						case <-refused[id]:
						default:
							close(refused[id])
						}
					case errors.Is(err, hopper.ErrFinished):
					default:
						badErrors = append(badErrors, err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	defer func() { close(done); editing.Wait() }()

	// Edits land before any claim.
	testdb.WaitFor(t, "an edit of every job", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if len(landed[id]) == 0 {
				return false
			}
		}
		return true
	})
	cfg := worker.Config{Queues: map[string]int{"race": 4}, KeepHistoryByQueue: map[string]time.Duration{"race": time.Hour}}
	b.runUntil(t, cfg, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, kind, func(ctx context.Context, j *jobs.Job[marked]) error {
			mu.Lock()
			ran[j.ID] = j.Payload.N
			wait := refused[j.ID]
			mu.Unlock()
			// Run until an editor has been refused on this job, so that
			// edits race the running job too.
			select {
			case <-wait:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}))
	}, "every job completed", func() bool {
		page, err := b.client.ListJobs(b.Ctx, hopper.ListParams{Queue: "race", States: []jobs.State{jobs.StateCompleted}})
		require.NoError(t, err)
		return len(page.Jobs) == jobCount
	})
	close(done)
	editing.Wait()
	done = make(chan struct{}) // for the deferred close
	require.Empty(t, badErrors)
	for _, id := range ids {
		row, err := b.client.GetJob(b.Ctx, id)
		require.NoError(t, err)
		var stored marked
		require.NoError(t, json.Unmarshal(row.Payload, &stored))
		require.Equal(t, ran[id], stored.N, "job %d completed with the payload its handler ran", id)
		require.True(t, landed[id][stored.N], "job %d ran the payload of an edit that succeeded", id)
	}
}

// row is a factory's job as the Client reads it.
func (b *bundle) row(t *testing.T, r db.HopperAllJob) jobs.Row {
	t.Helper()
	row, err := b.client.GetJob(b.Ctx, r.ID)
	require.NoError(t, err)
	return row
}

// TestDeleteJobRacesClaims: 20 goroutines delete jobs while a worker
// claims and runs them. Each job is either deleted, never run, or run to
// completion, never deleted: a delete never removes a claimed job.
func TestDeleteJobRacesClaims(t *testing.T) {
	b := setup(t)
	const jobCount, deleters = 40, 20
	kind := jobs.MustDefine[Email]("doomed")
	ids := make([]int64, jobCount)
	for i := range ids {
		res, err := kind.Enqueue(b.Ctx, b.Pool, Email{}, jobs.Queue("doomed"))
		require.NoError(t, err)
		ids[i] = res.ID
	}
	var (
		mu      sync.Mutex
		deleted = map[int64]int{} // job -> deletes that succeeded
		ran     = map[int64]bool{}
		bad     []error
	)
	done := make(chan struct{})
	started := make(chan struct{})
	start := sync.OnceFunc(func() { close(started) })
	var deleting sync.WaitGroup
	for g := range deleters {
		deleting.Add(1)
		go func() {
			defer deleting.Done()
			select { // from the worker's first job on, so that both win some
			case <-started:
			case <-done:
				return
			}
			for {
				select {
				case <-done:
					return
				default:
				}
				for i := range ids {
					id := ids[(i+g)%len(ids)]
					if (id+int64(g))%3 != 0 { // each job has its deleters, not all of them
						continue
					}
					_, err := b.client.DeleteJob(b.Ctx, id)
					mu.Lock()
					switch {
					case err == nil:
						deleted[id]++
					case errors.Is(err, hopper.ErrRunning), errors.Is(err, hopper.ErrFinished), errors.Is(err, hopper.ErrNotFound):
					default:
						bad = append(bad, err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	cfg := worker.Config{Queues: map[string]int{"doomed": 4}, KeepHistoryByQueue: map[string]time.Duration{"doomed": time.Hour}}
	b.runUntil(t, cfg, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, kind, func(_ context.Context, j *jobs.Job[Email]) error {
			mu.Lock()
			ran[j.ID] = true
			mu.Unlock()
			start()
			return nil
		}))
	}, "every job completed or deleted", func() bool {
		page, err := b.client.ListJobs(b.Ctx, hopper.ListParams{Queue: "doomed", States: []jobs.State{jobs.StatePending, jobs.StateRunning}})
		require.NoError(t, err)
		return len(page.Jobs) == 0
	})
	close(done)
	deleting.Wait()
	require.Empty(t, bad)
	for _, id := range ids {
		row, err := b.client.GetJob(b.Ctx, id)
		switch {
		case deleted[id] > 0:
			require.Equal(t, 1, deleted[id], "job %d deleted once", id)
			require.False(t, ran[id], "job %d was deleted and ran", id)
			require.ErrorIs(t, err, hopper.ErrNotFound)
		default:
			require.True(t, ran[id], "job %d neither deleted nor run", id)
			require.NoError(t, err)
			require.Equal(t, jobs.StateCompleted, row.State)
		}
	}
	t.Logf("%d of %d jobs deleted before a claim", len(deleted), jobCount)
}

// TestUpdateJobKeepsSequence: a typed payload for a kind with SequenceBy
// may replace a waiting job's only when it derives the job's own sequence
// key; one for another key is refused (ErrPayloadMismatch) and nothing
// changes, since the job would run in the wrong key's order.
func TestUpdateJobKeepsSequence(t *testing.T) {
	b := setup(t)
	type Ledger struct {
		Account string `json:"account"`
		Amount  int    `json:"amount"`
	}
	k := jobs.MustDefine[Ledger]("ledger.edit", jobs.SequenceBy(func(l Ledger) string { return l.Account }))
	_, err := k.Enqueue(b.Ctx, b.Pool, Ledger{Account: "a"})
	require.NoError(t, err)
	waiting, err := k.Enqueue(b.Ctx, b.Pool, Ledger{Account: "a", Amount: 1})
	require.NoError(t, err)

	_, err = b.client.UpdateJob(b.Ctx, waiting.ID, hopper.JobUpdate{Payload: hopper.PayloadOf(k, Ledger{Account: "b", Amount: 2})})
	require.ErrorIs(t, err, hopper.ErrPayloadMismatch)
	require.ErrorContains(t, err, `the payload is for sequence key "b", the job is in "a"`)
	row, err := b.client.GetJob(b.Ctx, waiting.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"account": "a", "amount": 1}`, string(row.Payload), "nothing changed")

	row, err = b.client.UpdateJob(b.Ctx, waiting.ID, hopper.JobUpdate{Payload: hopper.PayloadOf(k, Ledger{Account: "a", Amount: 3})})
	require.NoError(t, err)
	require.JSONEq(t, `{"account": "a", "amount": 3}`, string(row.Payload))
	require.Equal(t, jobs.StateWaiting, row.State)
}
