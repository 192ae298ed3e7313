package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

func storedMeta(t *testing.T, q *db.Queries, id int64) jobs.Meta {
	t.Helper()
	row, err := q.GetJob(context.Background(), id)
	require.NoError(t, err)
	m, err := jobs.ParseMeta(row.Meta)
	require.NoError(t, err)
	return m
}

// TestEnqueueHooks: global hooks (UseEnqueue) run before a kind's own
// (OnEnqueue), in order, see the caller's transaction, and change options
// and metadata; every enqueue path runs them; an error refuses the
// enqueue; a hook's bad value is refused like an option's. Not parallel:
// global hooks would reach other tests' enqueues.
func TestEnqueueHooks(t *testing.T) {
	tdb := testdb.New(t)
	ctx, q := context.Background(), db.New(tdb.Pool)
	var order []string
	remove := jobs.UseEnqueue(
		func(_ context.Context, e *jobs.Enqueueing) error {
			order = append(order, "global 1 "+e.Kind)
			e.Meta["traceparent"] = "00-trace"
			return nil
		},
		func(_ context.Context, e *jobs.Enqueueing) error {
			order = append(order, "global 2")
			if e.Meta["refuse"] != "" {
				return errors.New("refused: " + e.Meta["refuse"])
			}
			return nil
		})
	defer remove()
	kind := jobs.MustDefine[Note]("note.hooked", jobs.OnEnqueue(func(_ context.Context, e *jobs.Enqueueing) error {
		order = append(order, "kind")
		e.Queue = "hooked"
		if e.Meta["priority"] == "bad" {
			e.Priority = 99
		}
		return nil
	}))

	tx, err := tdb.Pool.Begin(ctx)
	require.NoError(t, err)
	var sawTx jobs.DBTX
	removeTx := jobs.UseEnqueue(func(_ context.Context, e *jobs.Enqueueing) error { sawTx = e.DB; return nil })
	res, err := kind.Enqueue(ctx, tx, Note{Text: "one"}, jobs.Metadata(jobs.Meta{"tenant": "acme"}))
	removeTx()
	require.NoError(t, err)
	require.Equal(t, tx, sawTx, "hooks see the caller's transaction")
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, []string{"global 1 note.hooked", "global 2", "kind"}, order)
	require.Equal(t, jobs.Meta{"tenant": "acme", "traceparent": "00-trace"}, storedMeta(t, q, res.ID))
	row, err := q.GetJob(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, "hooked", row.Queue)

	// Batches: COPY (ready and scheduled) and the unique-key path.
	items := []jobs.Item[Note]{{Payload: Note{Text: "a"}}, {Payload: Note{Text: "b"}, Options: []jobs.EnqueueOption{jobs.Delay(time.Hour)}}}
	many, err := kind.EnqueueMany(ctx, tdb.Pool, items)
	require.NoError(t, err)
	unique, err := jobs.EnqueueBatch(ctx, tdb.Pool, []jobs.Entry{kind.Entry(Note{Text: "u"}, jobs.UniqueKey("u"))})
	require.NoError(t, err)
	for _, id := range []int64{many.Results[0].ID, many.Results[1].ID, unique.Results[0].ID} {
		require.Equal(t, "00-trace", storedMeta(t, q, id)["traceparent"])
		row, err := q.GetJob(ctx, id)
		require.NoError(t, err)
		require.Equal(t, "hooked", row.Queue, "the kind's own hook ran too")
	}
	require.Nil(t, items[0].Options, "the caller's items are not changed")

	_, err = kind.Enqueue(ctx, tdb.Pool, Note{}, jobs.Metadata(jobs.Meta{"refuse": "no"}))
	require.ErrorContains(t, err, "enqueue hook: refused: no")
	_, err = kind.Enqueue(ctx, tdb.Pool, Note{}, jobs.Metadata(jobs.Meta{"priority": "bad"}))
	require.ErrorIs(t, err, jobs.ErrInvalidPriority)
	_, err = kind.EnqueueMany(ctx, tdb.Pool, []jobs.Item[Note]{{Payload: Note{}, Options: []jobs.EnqueueOption{jobs.Metadata(jobs.Meta{"refuse": "batch"})}}})
	require.ErrorContains(t, err, "item 0 (note.hooked): enqueue hook: refused: batch")

	remove()
	order = nil
	_, err = noteKind.Enqueue(ctx, tdb.Pool, Note{})
	require.NoError(t, err)
	require.Empty(t, order, "a removed hook is not run")
}

// TestMetaRules: metadata is checked at enqueue, and stored as given.
func TestMetaRules(t *testing.T) {
	b := setup(t)
	for _, tc := range []struct {
		name string
		meta jobs.Meta
		want string
	}{
		{"empty key", jobs.Meta{"": "x"}, "an empty key"},
		{"bad UTF-8", jobs.Meta{"k": "\xff"}, "not valid UTF-8"},
		{"NUL", jobs.Meta{"k": "a\x00b"}, "not valid UTF-8"},
		{"too large", jobs.Meta{"k": strings.Repeat("x", jobs.MaxMetaBytes)}, "over the limit of 8192"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.Metadata(tc.meta))
			require.ErrorIs(t, err, jobs.ErrInvalidMeta)
			require.ErrorContains(t, err, tc.want)
			require.ErrorIs(t, noteKind.Check(Note{}, jobs.Metadata(tc.meta)), jobs.ErrInvalidMeta)
		})
	}
	// Later values win, and a kind's default metadata is not changed by a
	// job's own.
	k := jobs.MustDefine[Note]("note.meta", jobs.Defaults(jobs.Metadata(jobs.Meta{"team": "core", "tier": "1"})))
	one, err := k.Enqueue(b.Ctx, b.Pool, Note{}, jobs.Metadata(jobs.Meta{"tier": "2"}))
	require.NoError(t, err)
	two, err := k.Enqueue(b.Ctx, b.Pool, Note{})
	require.NoError(t, err)
	require.Equal(t, jobs.Meta{"team": "core", "tier": "2"}, storedMeta(t, b.Queries, one.ID))
	require.Equal(t, jobs.Meta{"team": "core", "tier": "1"}, storedMeta(t, b.Queries, two.ID))
	none, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{})
	require.NoError(t, err)
	row, err := b.Queries.GetJob(b.Ctx, none.ID)
	require.NoError(t, err)
	require.Nil(t, row.Meta, "no metadata is stored as NULL")
	batch, err := jobs.EnqueueBatch(b.Ctx, b.Pool, []jobs.Entry{noteKind.Entry(Note{}, jobs.UniqueKey("no-meta"))})
	require.NoError(t, err)
	row, err = b.Queries.GetJob(b.Ctx, batch.Results[0].ID)
	require.NoError(t, err)
	require.Nil(t, row.Meta, "in a batch too")

	// Written by SQL of one's own: non-string values come back as JSON.
	m, err := jobs.ParseMeta(json.RawMessage(`{"n": 3, "s": "x"}`))
	require.NoError(t, err)
	require.Equal(t, jobs.Meta{"n": "3", "s": "x"}, m)
}
