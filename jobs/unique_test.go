package jobs_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testfactory"
	"github.com/hopperq/hopper/jobs"
)

type Sync struct {
	Account int    `json:"account"`
	Region  string `json:"region"`
	Note    string `json:"note"`
}

// A finished job holds its key only in the states chosen, and only within
// the period; a live job always holds it.
func TestUniqueFinishedStatesAndPeriod(t *testing.T) {
	b := setup(t)
	k := jobs.MustDefine[Note]("note.finished")
	old := time.Now().Add(-2 * time.Hour)
	for _, tc := range []struct {
		name  string
		state string
		aged  bool // enqueued two hours ago
		opts  []jobs.EnqueueOption
		holds bool
	}{
		{name: "live only: completed frees", state: testfactory.Completed, holds: false},
		{name: "live only: dead frees", state: testfactory.Dead, holds: false},
		{name: "live only: cancelled frees", state: testfactory.Cancelled, holds: false},
		{name: "live states named: as live only", state: testfactory.Dead, opts: []jobs.EnqueueOption{jobs.UniqueStates(jobs.StatePending, jobs.StateRunning)}, holds: false},
		{name: "states completed", state: testfactory.Completed, opts: []jobs.EnqueueOption{jobs.UniqueStates(jobs.StateCompleted)}, holds: true},
		{name: "states completed, old job too", state: testfactory.Completed, aged: true, opts: []jobs.EnqueueOption{jobs.UniqueStates(jobs.StateCompleted)}, holds: true},
		{name: "states completed: dead frees", state: testfactory.Dead, opts: []jobs.EnqueueOption{jobs.UniqueStates(jobs.StateCompleted)}, holds: false},
		{name: "states dead", state: testfactory.Dead, opts: []jobs.EnqueueOption{jobs.UniqueStates(jobs.StateDead)}, holds: true},
		{name: "states dead: cancelled frees", state: testfactory.Cancelled, opts: []jobs.EnqueueOption{jobs.UniqueStates(jobs.StateDead)}, holds: false},
		{name: "states cancelled", state: testfactory.Cancelled, opts: []jobs.EnqueueOption{jobs.UniqueStates(jobs.StateCancelled)}, holds: true},
		{name: "period: completed within", state: testfactory.Completed, opts: []jobs.EnqueueOption{jobs.UniquePeriod(time.Hour)}, holds: true},
		{name: "period: dead within", state: testfactory.Dead, opts: []jobs.EnqueueOption{jobs.UniquePeriod(time.Hour)}, holds: true},
		{name: "period: cancelled within", state: testfactory.Cancelled, opts: []jobs.EnqueueOption{jobs.UniquePeriod(time.Hour)}, holds: true},
		{name: "period: completed before it", state: testfactory.Completed, aged: true, opts: []jobs.EnqueueOption{jobs.UniquePeriod(time.Hour)}, holds: false},
		{name: "period: dead before it", state: testfactory.Dead, aged: true, opts: []jobs.EnqueueOption{jobs.UniquePeriod(time.Hour)}, holds: false},
		{name: "period with states: other state frees", state: testfactory.Dead, opts: []jobs.EnqueueOption{jobs.UniquePeriod(time.Hour), jobs.UniqueStates(jobs.StateCompleted)}, holds: false},
		{name: "period: a live job holds whatever its age", state: testfactory.Scheduled, aged: true, opts: []jobs.EnqueueOption{jobs.UniquePeriod(time.Hour)}, holds: true},
		{name: "period: running holds", state: testfactory.Running, opts: []jobs.EnqueueOption{jobs.UniquePeriod(time.Hour)}, holds: true},
	} {
		key := "finished/" + tc.name
		o := &testfactory.JobOpts{State: tc.state, Kind: k.Name(), UniqueKey: key}
		if tc.aged {
			o.CreatedAt = &old
		}
		held := testfactory.Job(b.Ctx, t, b.Pool, o)
		for _, path := range []string{"single", "many"} {
			var res jobs.Result
			if path == "single" {
				r, err := k.Enqueue(b.Ctx, b.Pool, Note{Text: path}, append(tc.opts, jobs.UniqueKey(key))...)
				require.NoError(t, err, tc.name)
				res = r
			} else {
				r, err := k.EnqueueMany(b.Ctx, b.Pool, jobs.Items(Note{Text: path}), append(tc.opts, jobs.UniqueKey(key))...)
				require.NoError(t, err, tc.name)
				res = r.Results[0]
			}
			if tc.holds {
				require.Equal(t, jobs.Result{ID: held.ID, Duplicate: true}, res, "%s (%s)", tc.name, path)
				require.Equal(t, jobs.EnqueueKept, res.Outcome())
				continue
			}
			require.False(t, res.Duplicate, "%s (%s)", tc.name, path)
			require.Equal(t, jobs.EnqueueInserted, res.Outcome())
			// The new job is live, and with a period its key's record
			// would hold the key once it completed: the many path starts
			// from the same state without either.
			_, err := b.Pool.Exec(b.Ctx, "DELETE FROM hopper_jobs WHERE id = $1", res.ID)
			require.NoError(t, err)
			_, err = b.Pool.Exec(b.Ctx, "DELETE FROM hopper_unique_periods WHERE job_id = $1", res.ID)
			require.NoError(t, err)
		}
	}
}

// A kind derives the key from the payload: a func of T or named fields,
// scoped by the kind's name; UniqueKey overrides it.
func TestUniqueKeyFromPayload(t *testing.T) {
	b := setup(t)
	byFunc := jobs.MustDefine[Sync]("sync.func", jobs.UniqueBy(func(s Sync) string {
		if s.Account == 0 {
			return ""
		}
		return s.Region + "/" + string(rune('0'+s.Account))
	}), jobs.Defaults(jobs.UniquePeriod(time.Hour)))
	byFields := jobs.MustDefine[Sync]("sync.fields", jobs.UniqueFields("account", "region"))

	key := func(id int64) string {
		var k *string
		require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT unique_key FROM hopper_jobs WHERE id = $1", id).Scan(&k))
		if k == nil {
			return ""
		}
		return *k
	}
	first, err := byFunc.Enqueue(b.Ctx, b.Pool, Sync{Account: 4, Region: "eu", Note: "a"})
	require.NoError(t, err)
	require.Equal(t, "sync.func:eu/4", key(first.ID))
	again, err := byFunc.Enqueue(b.Ctx, b.Pool, Sync{Account: 4, Region: "eu", Note: "b"})
	require.NoError(t, err)
	require.Equal(t, jobs.Result{ID: first.ID, Duplicate: true}, again, "the note is not part of the key")
	none, err := byFunc.Enqueue(b.Ctx, b.Pool, Sync{Region: "eu"})
	require.NoError(t, err)
	require.False(t, none.Duplicate)
	require.Equal(t, "", key(none.ID), "an empty derived key is none")
	over, err := byFunc.Enqueue(b.Ctx, b.Pool, Sync{Account: 4, Region: "eu"}, jobs.UniqueKey("mine"))
	require.NoError(t, err)
	require.Equal(t, "mine", key(over.ID), "UniqueKey overrides the derived key")

	f1, err := byFields.Enqueue(b.Ctx, b.Pool, Sync{Account: 42, Region: "eu", Note: "x"})
	require.NoError(t, err)
	require.Equal(t, `sync.fields:[42,"eu"]`, key(f1.ID))
	batch, err := byFields.EnqueueMany(b.Ctx, b.Pool, jobs.Items(Sync{Account: 42, Region: "eu", Note: "y"}, Sync{Account: 42, Region: "us"}))
	require.NoError(t, err)
	require.Equal(t, []jobs.Result{{ID: f1.ID, Duplicate: true}, batch.Results[1]}, batch.Results)
	require.False(t, batch.Results[1].Duplicate)
	require.Equal(t, `sync.fields:[42,"eu"]`, byFields.Entry(Sync{Account: 42, Region: "eu"}).UniqueKey())

	for name, def := range map[string]func() error{
		"nil func": func() error { _, err := jobs.Define[Sync]("x", jobs.UniqueBy[Sync](nil)); return err },
		"wrong type": func() error {
			_, err := jobs.Define[Sync]("x", jobs.UniqueBy(func(Note) string { return "" }))
			return err
		},
		"no fields": func() error { _, err := jobs.Define[Sync]("x", jobs.UniqueFields()); return err },
		"both": func() error {
			_, err := jobs.Define[Sync]("x", jobs.UniqueFields("a"), jobs.UniqueBy(func(Sync) string { return "" }))
			return err
		},
		"bad state": func() error { _, err := jobs.Define[Sync]("x", jobs.Defaults(jobs.UniqueStates("gone"))); return err },
		"negative span": func() error {
			_, err := jobs.Define[Sync]("x", jobs.Defaults(jobs.UniquePeriod(-time.Second)))
			return err
		},
	} {
		require.Error(t, def(), name)
	}
	_, err = jobs.Define[Sync]("x", jobs.Defaults(jobs.UniqueStates("gone")))
	require.ErrorIs(t, err, jobs.ErrInvalidState)
	_, err = jobs.Define[Sync]("x", jobs.UniqueBy(func(Note) string { return "" }))
	require.ErrorIs(t, err, jobs.ErrInvalidDefinition)
	panicky := jobs.MustDefine[Sync]("sync.panics", jobs.UniqueBy(func(Sync) string { panic("no") }))
	_, err = panicky.Enqueue(b.Ctx, b.Pool, Sync{})
	require.ErrorIs(t, err, jobs.ErrInvalidUniqueKey)
}

// ReplaceWaiting gives a waiting holder the new payload; a running one is
// kept; Debounce also pushes the run time.
func TestReplaceWaitingAndDebounce(t *testing.T) {
	b := setup(t)
	k := jobs.MustDefine[Note]("note.replace")
	payload := func(id int64) (string, string, time.Time) {
		var raw json.RawMessage
		var state string
		var runAt time.Time
		require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT payload, state, run_at FROM hopper_jobs WHERE id = $1", id).Scan(&raw, &state, &runAt))
		var n Note
		require.NoError(t, json.Unmarshal(raw, &n))
		return n.Text, state, runAt
	}

	first, err := k.Enqueue(b.Ctx, b.Pool, Note{Text: "1"}, jobs.UniqueKey("r"), jobs.ReplaceWaiting())
	require.NoError(t, err)
	require.Equal(t, jobs.EnqueueInserted, first.Outcome())
	second, err := k.Enqueue(b.Ctx, b.Pool, Note{Text: "2"}, jobs.UniqueKey("r"), jobs.ReplaceWaiting(), jobs.Delay(time.Hour))
	require.NoError(t, err)
	require.Equal(t, jobs.Result{ID: first.ID, Duplicate: true, Replaced: true}, second)
	require.Equal(t, jobs.EnqueueReplaced, second.Outcome())
	text, state, _ := payload(first.ID)
	require.Equal(t, "2", text)
	require.Equal(t, "pending", state, "ReplaceWaiting keeps the run time")
	plain, err := k.Enqueue(b.Ctx, b.Pool, Note{Text: "3"}, jobs.UniqueKey("r"))
	require.NoError(t, err)
	require.Equal(t, jobs.EnqueueKept, plain.Outcome(), "without the option the waiting job is kept")

	// Debounce: the run time moves to d from now, each time.
	d1, err := k.Enqueue(b.Ctx, b.Pool, Note{Text: "d1"}, jobs.UniqueKey("d"), jobs.Debounce(time.Minute))
	require.NoError(t, err)
	_, state, at1 := payload(d1.ID)
	require.Equal(t, "scheduled", state)
	d2, err := k.Enqueue(b.Ctx, b.Pool, Note{Text: "d2"}, jobs.UniqueKey("d"), jobs.Debounce(time.Hour))
	require.NoError(t, err)
	require.Equal(t, jobs.EnqueueReplaced, d2.Outcome())
	text, state, at2 := payload(d1.ID)
	require.Equal(t, "d2", text)
	require.Equal(t, "scheduled", state)
	require.Greater(t, at2.Sub(at1), 50*time.Minute)
	d3, err := k.Enqueue(b.Ctx, b.Pool, Note{Text: "d3"}, jobs.UniqueKey("d"), jobs.Debounce(0))
	require.NoError(t, err)
	require.Equal(t, jobs.EnqueueReplaced, d3.Outcome())
	_, state, _ = payload(d1.ID)
	require.Equal(t, "pending", state, "a debounce of 0 makes it ready now")

	// A running holder is not changed: it gives up the key to a new job,
	// so that the latest payload runs after it.
	run := testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{State: testfactory.Running, Kind: k.Name(), UniqueKey: "run", Payload: json.RawMessage(`{"text":"running"}`)})
	after, err := k.Enqueue(b.Ctx, b.Pool, Note{Text: "new"}, jobs.UniqueKey("run"), jobs.Debounce(time.Minute))
	require.NoError(t, err)
	require.Equal(t, jobs.EnqueueInserted, after.Outcome())
	text, state, _ = payload(run.ID)
	require.Equal(t, "running", text)
	require.Equal(t, "running", state)
	var key *string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT unique_key FROM hopper_jobs WHERE id = $1", run.ID).Scan(&key))
	require.Nil(t, key, "the running job gave its key up")
	again, err := k.Enqueue(b.Ctx, b.Pool, Note{Text: "newer"}, jobs.UniqueKey("run"), jobs.Debounce(time.Minute))
	require.NoError(t, err)
	require.Equal(t, jobs.Result{ID: after.ID, Duplicate: true, Replaced: true}, again)

	// Where finished jobs hold the key, a running holder is kept.
	run2 := testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{State: testfactory.Running, Kind: k.Name(), UniqueKey: "run2"})
	kept, err := k.Enqueue(b.Ctx, b.Pool, Note{Text: "new"}, jobs.UniqueKey("run2"), jobs.ReplaceWaiting(), jobs.UniquePeriod(time.Hour))
	require.NoError(t, err)
	require.Equal(t, jobs.Result{ID: run2.ID, Duplicate: true}, kept)

	// A holder of another kind is kept, waiting or running: its payload
	// is of another type.
	other := jobs.MustDefine[Sync]("sync.other")
	waiting, err := other.Enqueue(b.Ctx, b.Pool, Sync{Account: 1}, jobs.UniqueKey("shared"))
	require.NoError(t, err)
	for _, opt := range []jobs.EnqueueOption{jobs.ReplaceWaiting(), jobs.Debounce(time.Minute)} {
		res, err := k.Enqueue(b.Ctx, b.Pool, Note{Text: "x"}, jobs.UniqueKey("shared"), opt)
		require.NoError(t, err)
		require.Equal(t, jobs.Result{ID: waiting.ID, Duplicate: true}, res)
		many, err := k.EnqueueMany(b.Ctx, b.Pool, jobs.Items(Note{Text: "x"}, Note{Text: "y"}), jobs.UniqueKey("shared"), opt)
		require.NoError(t, err)
		require.Equal(t, []jobs.Result{res, res}, many.Results)
	}
	runningOther := testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{State: testfactory.Running, Kind: other.Name(), UniqueKey: "shared-running"})
	res2, err := k.Enqueue(b.Ctx, b.Pool, Note{Text: "x"}, jobs.UniqueKey("shared-running"), jobs.Debounce(time.Minute))
	require.NoError(t, err)
	require.Equal(t, jobs.Result{ID: runningOther.ID, Duplicate: true}, res2)

	// In a batch: the counts, and each job answered as if enqueued alone.
	res, err := k.EnqueueMany(b.Ctx, b.Pool, []jobs.Item[Note]{
		{Payload: Note{Text: "b1"}, Options: []jobs.EnqueueOption{jobs.UniqueKey("b")}},
		{Payload: Note{Text: "b2"}, Options: []jobs.EnqueueOption{jobs.UniqueKey("b"), jobs.ReplaceWaiting()}},
		{Payload: Note{Text: "b3"}, Options: []jobs.EnqueueOption{jobs.UniqueKey("b")}},
		{Payload: Note{Text: "free"}},
		{Payload: Note{Text: "run"}, Options: []jobs.EnqueueOption{jobs.UniqueKey("run2"), jobs.ReplaceWaiting(), jobs.UniqueStates(jobs.StateDead)}},
	})
	require.NoError(t, err)
	id := res.Results[0].ID
	require.Equal(t, []jobs.Result{{ID: id}, {ID: id, Duplicate: true, Replaced: true}, {ID: id, Duplicate: true}, {ID: res.Results[3].ID}, {ID: run2.ID, Duplicate: true}}, res.Results)
	require.Equal(t, 2, res.Inserted)
	require.Equal(t, 3, res.Duplicates)
	require.Equal(t, 1, res.Replaced)
	text, _, _ = payload(id)
	require.Equal(t, "b2", text)
}

// txOnly is a DBTX that can neither send batches nor begin: the locked
// modes then run their statements one by one on it, which must be a
// transaction.
type txOnly struct{ tx pgx.Tx }

func (d txOnly) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return d.tx.Exec(ctx, sql, args...)
}
func (d txOnly) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return d.tx.Query(ctx, sql, args...)
}
func (d txOnly) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return d.tx.QueryRow(ctx, sql, args...)
}
func (d txOnly) CopyFrom(ctx context.Context, t pgx.Identifier, c []string, s pgx.CopyFromSource) (int64, error) {
	return d.tx.CopyFrom(ctx, t, c, s)
}

// The locked modes answer alike through every kind of DBTX: a schema
// scope (which begins a transaction of its own), a bare DBTX over a
// transaction, a transaction that rolls back (freeing the key).
func TestUniqueThroughEveryDBTX(t *testing.T) {
	b := setup(t)
	k := jobs.MustDefine[Note]("note.dbtx")
	scoped, err := jobs.InSchema(b.Pool, b.Schema)
	require.NoError(t, err)
	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.Ctx) //nolint:errcheck
	for name, dbtx := range map[string]jobs.DBTX{"scoped": scoped, "bare": txOnly{tx}, "tx": tx} {
		opts := []jobs.EnqueueOption{jobs.UniqueKey("dbtx/" + name), jobs.ReplaceWaiting(), jobs.UniquePeriod(time.Hour)}
		first, err := k.Enqueue(b.Ctx, dbtx, Note{Text: "1"}, opts...)
		require.NoError(t, err, name)
		require.Equal(t, jobs.EnqueueInserted, first.Outcome(), name)
		again, err := k.Enqueue(b.Ctx, dbtx, Note{Text: "2"}, opts...)
		require.NoError(t, err, name)
		require.Equal(t, jobs.Result{ID: first.ID, Duplicate: true, Replaced: true}, again, name)
		many, err := k.EnqueueMany(b.Ctx, dbtx, jobs.Items(Note{Text: "3"}, Note{Text: "4"}), opts...)
		require.NoError(t, err, name)
		require.Equal(t, []jobs.Result{again, again}, many.Results, name)
	}
	require.NoError(t, tx.Rollback(b.Ctx))
	// The rolled-back transaction's keys are free again.
	for _, name := range []string{"bare", "tx"} {
		res, err := k.Enqueue(b.Ctx, b.Pool, Note{Text: "after"}, jobs.UniqueKey("dbtx/"+name), jobs.UniquePeriod(time.Hour))
		require.NoError(t, err)
		require.Equal(t, jobs.EnqueueInserted, res.Outcome(), name)
	}
}

// TestUniquePeriodWithoutHistory: UniquePeriod holds the key for its
// period after the job completed even where no history is kept (the
// default): the enqueue records the key beside the job, and a later one
// finds the record once the job has left the table. Alone and in a batch;
// once the period is over the key is free, and the workers' prune deletes
// the record.
func TestUniquePeriodWithoutHistory(t *testing.T) {
	b := setup(t)
	k := jobs.MustDefine[Note]("note.period", jobs.Defaults(jobs.UniquePeriod(time.Hour)))
	first, err := k.Enqueue(b.Ctx, b.Pool, Note{Text: "1"}, jobs.UniqueKey("sync:7"))
	require.NoError(t, err)
	require.Equal(t, jobs.EnqueueInserted, first.Outcome())
	_, err = b.Pool.Exec(b.Ctx, `DELETE FROM hopper_jobs WHERE id = $1`, first.ID) // completed, as its acknowledgement without history does
	require.NoError(t, err)
	var kept int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT count(*) FROM hopper_job_history`).Scan(&kept))
	require.Zero(t, kept, "no history row")

	again, err := k.Enqueue(b.Ctx, b.Pool, Note{Text: "2"}, jobs.UniqueKey("sync:7"))
	require.NoError(t, err)
	require.Equal(t, jobs.Result{ID: first.ID, Duplicate: true}, again, "completed less than an hour ago: kept")
	batch, err := jobs.EnqueueBatch(b.Ctx, b.Pool, []jobs.Entry{k.Entry(Note{Text: "3"}, jobs.UniqueKey("sync:7")), k.Entry(Note{Text: "4"}, jobs.UniqueKey("sync:8"))})
	require.NoError(t, err)
	require.Equal(t, jobs.EnqueueKept, batch.Results[0].Outcome(), "in a batch too")
	require.Equal(t, first.ID, batch.Results[0].ID)
	require.Equal(t, jobs.EnqueueInserted, batch.Results[1].Outcome(), "the batch records its own keys")
	_, err = b.Pool.Exec(b.Ctx, `DELETE FROM hopper_jobs WHERE id = $1`, batch.Results[1].ID)
	require.NoError(t, err)
	again, err = k.Enqueue(b.Ctx, b.Pool, Note{Text: "5"}, jobs.UniqueKey("sync:8"))
	require.NoError(t, err)
	require.Equal(t, jobs.EnqueueKept, again.Outcome(), "a key the batch inserted is held after its job completed")

	// The period over (its record an hour and a minute old), the key is
	// free, and the prune deletes what has expired.
	_, err = b.Pool.Exec(b.Ctx, `UPDATE hopper_unique_periods SET created_at = created_at - interval '61 minutes', expires_at = expires_at - interval '61 minutes'`)
	require.NoError(t, err)
	n, err := b.Queries.PruneUniquePeriods(b.Ctx, 1000)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	later, err := k.Enqueue(b.Ctx, b.Pool, Note{Text: "6"}, jobs.UniqueKey("sync:7"))
	require.NoError(t, err)
	require.Equal(t, jobs.EnqueueInserted, later.Outcome())

	// A key held for no period writes no record.
	_, err = k.Enqueue(b.Ctx, b.Pool, Note{Text: "7"}, jobs.UniqueKey("live-only"), jobs.UniquePeriod(0))
	require.NoError(t, err)
	var records int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT count(*) FROM hopper_unique_periods WHERE unique_key = 'live-only'`).Scan(&records))
	require.Zero(t, records)
}
