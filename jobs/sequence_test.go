package jobs_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/jobs"
)

type Account struct {
	ID     string `json:"id"`
	Amount int    `json:"amount,omitempty"`
}

var accountKind = jobs.MustDefine[Account]("account.sync",
	jobs.SequenceBy(func(a Account) string { return a.ID }))

// state reads a job's state and its sequence metadata.
func (b *bundle) sequenceOf(t *testing.T, id int64) (state string, meta map[string]string) {
	t.Helper()
	row, err := b.Queries.GetJob(b.Ctx, id)
	require.NoError(t, err)
	if row.Meta != nil {
		require.NoError(t, json.Unmarshal(row.Meta, &meta))
	}
	return row.State, meta
}

func TestSequenceOptionsStored(t *testing.T) {
	b := setup(t)
	for _, tc := range []struct {
		name      string
		enqueue   func() (jobs.Result, error)
		wantKey   string
		wantState string
		policy    string
	}{
		{"derived from the payload", func() (jobs.Result, error) {
			return accountKind.Enqueue(b.Ctx, b.Pool, Account{ID: "a"})
		}, "a", "pending", ""},
		{"second of the key waits", func() (jobs.Result, error) {
			return accountKind.Enqueue(b.Ctx, b.Pool, Account{ID: "a"})
		}, "a", "waiting", ""},
		{"the option wins over the payload", func() (jobs.Result, error) {
			return accountKind.Enqueue(b.Ctx, b.Pool, Account{ID: "a"}, jobs.Sequence("b"))
		}, "b", "pending", ""},
		{"continue is stored", func() (jobs.Result, error) {
			return accountKind.Enqueue(b.Ctx, b.Pool, Account{ID: "c"}, jobs.SequenceOnDead(jobs.SequenceContinue))
		}, "c", "pending", "continue"},
		{"block is the default, not stored", func() (jobs.Result, error) {
			return accountKind.Enqueue(b.Ctx, b.Pool, Account{ID: "d"}, jobs.SequenceOnDead(jobs.SequenceBlock))
		}, "d", "pending", ""},
		{"an empty derived key means none", func() (jobs.Result, error) {
			return accountKind.Enqueue(b.Ctx, b.Pool, Account{})
		}, "", "pending", ""},
		{"a key in the metadata is a sequence", func() (jobs.Result, error) {
			return noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.Metadata(jobs.Meta{jobs.MetaSequence: "a", "tenant": "x"}))
		}, "a", "waiting", ""},
		{"delayed behind the head, still waiting", func() (jobs.Result, error) {
			return noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.Sequence("a"), jobs.Delay(time.Hour))
		}, "a", "waiting", ""},
		{"a delayed head is scheduled", func() (jobs.Result, error) {
			return noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.Sequence("e"), jobs.Delay(time.Hour))
		}, "e", "scheduled", ""},
		{"with a unique key", func() (jobs.Result, error) {
			return noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.Sequence("a"), jobs.UniqueKey("u"))
		}, "a", "waiting", ""},
	} {
		res, err := tc.enqueue()
		require.NoError(t, err, tc.name)
		require.False(t, res.Duplicate, tc.name)
		state, meta := b.sequenceOf(t, res.ID)
		require.Equal(t, tc.wantState, state, tc.name)
		require.Equal(t, tc.wantKey, meta[jobs.MetaSequence], tc.name)
		require.Equal(t, tc.policy, meta[jobs.MetaSequencePolicy], tc.name)
	}
	// A unique key still dedupes behind a head.
	res, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.Sequence("a"), jobs.UniqueKey("u"))
	require.NoError(t, err)
	require.True(t, res.Duplicate)
}

func TestSequenceRejectsBadInput(t *testing.T) {
	b := setup(t)
	panicky := jobs.MustDefine[Account]("account.panicky", jobs.SequenceBy(func(a Account) string { panic("no key") }))
	for _, tc := range []struct {
		name    string
		enqueue func() error
		msg     string
	}{
		{"empty key", func() error { _, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.Sequence("")); return err }, "empty"},
		{"key of 256 bytes", func() error {
			_, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.Sequence(strings.Repeat("k", 256)))
			return err
		}, "256 bytes long, over the limit of 255"},
		{"NUL in the key", func() error { _, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.Sequence("a\x00b")); return err }, "not valid UTF-8"},
		{"unknown policy", func() error {
			_, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.Sequence("a"), jobs.SequenceOnDead("later"))
			return err
		}, `unknown policy "later"`},
		{"unknown policy in the metadata", func() error {
			_, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.Metadata(jobs.Meta{jobs.MetaSequence: "a", jobs.MetaSequencePolicy: "skip"}))
			return err
		}, `unknown policy "skip"`},
		{"SequenceBy panics", func() error { _, err := panicky.Enqueue(b.Ctx, b.Pool, Account{ID: "a"}); return err }, "SequenceBy panicked: no key"},
		{"a bad item fails the batch", func() error {
			items := jobs.Items(Account{ID: "a"}, Account{ID: strings.Repeat("k", 300)})
			_, err := accountKind.EnqueueMany(b.Ctx, b.Pool, items)
			return err
		}, "item 1"},
	} {
		err := tc.enqueue()
		require.ErrorIs(t, err, jobs.ErrInvalidSequenceKey, tc.name)
		require.ErrorContains(t, err, tc.msg, tc.name)
	}
	require.Zero(t, b.live(t), "nothing was written")

	_, err := jobs.Define[Note]("note.wrong", jobs.SequenceBy(func(a Account) string { return a.ID }))
	require.ErrorIs(t, err, jobs.ErrInvalidDefinition)
	require.ErrorContains(t, err, "SequenceBy takes a func(jobs_test.Note) string")
}

// TestSequenceBatchOrder: a batch gives a key's jobs ids in the batch's
// order, so they run in it, whatever other keys and kinds it mixes.
func TestSequenceBatchOrder(t *testing.T) {
	b := setup(t)
	entries := []jobs.Entry{
		accountKind.Entry(Account{ID: "x"}),
		noteKind.Entry(Note{Text: "plain"}),
		accountKind.Entry(Account{ID: "y"}),
		noteKind.Entry(Note{Text: "x2"}, jobs.Sequence("x")),
		accountKind.Entry(Account{ID: "x"}),
	}
	res, err := jobs.EnqueueBatch(b.Ctx, b.Pool, entries)
	require.NoError(t, err)
	require.Equal(t, 5, res.Inserted)
	want := []string{"pending", "pending", "pending", "waiting", "waiting"}
	for i, r := range res.Results {
		state, _ := b.sequenceOf(t, r.ID)
		require.Equal(t, want[i], state, "entry %d", i)
		if i > 0 {
			require.Greater(t, r.ID, res.Results[i-1].ID, "ids in the batch's order")
		}
	}
	// Rolled back, a batch leaves nothing behind and no key held.
	tx, err := b.Pool.Begin(context.Background())
	require.NoError(t, err)
	_, err = accountKind.EnqueueMany(b.Ctx, tx, jobs.Items(Account{ID: "z"}, Account{ID: "z"}))
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.Ctx))
	r, err := accountKind.Enqueue(b.Ctx, b.Pool, Account{ID: "z"})
	require.NoError(t, err)
	state, _ := b.sequenceOf(t, r.ID)
	require.Equal(t, "pending", state, "the rolled-back jobs hold nothing")
}

// TestReplaceKeepsSequence: ReplaceWaiting (and Debounce, alone or in a
// batch) replaces a waiting holder's payload only when the new payload is
// for the holder's own sequence key: the key is fixed at enqueue, so a
// payload for another key (or none) would run in the wrong key's order.
// Such a holder is kept, as one of another kind is.
func TestReplaceKeepsSequence(t *testing.T) {
	b := setup(t)
	k := jobs.MustDefine[Account]("account.replace", jobs.SequenceBy(func(a Account) string { return a.ID }))
	head, err := k.Enqueue(b.Ctx, b.Pool, Account{ID: "a"})
	require.NoError(t, err)
	held, err := k.Enqueue(b.Ctx, b.Pool, Account{ID: "a", Amount: 1}, jobs.UniqueKey("u"), jobs.ReplaceWaiting())
	require.NoError(t, err)
	require.Equal(t, jobs.EnqueueInserted, held.Outcome())
	amount := func() (string, int) {
		var key string
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT meta ->> 'hopper.sequence', (payload ->> 'amount')::int FROM hopper_jobs WHERE id = $1`, held.ID).Scan(&key, &n))
		return key, n
	}

	want := 1
	for i, opts := range [][]jobs.EnqueueOption{
		{jobs.UniqueKey("u"), jobs.ReplaceWaiting()},
		{jobs.UniqueKey("u"), jobs.Debounce(time.Minute)},
	} {
		other, err := k.Enqueue(b.Ctx, b.Pool, Account{ID: "b", Amount: 2}, opts...)
		require.NoError(t, err)
		require.Equal(t, jobs.Result{ID: held.ID, Duplicate: true}, other, "another key's payload keeps the holder")
		batch, err := jobs.EnqueueBatch(b.Ctx, b.Pool, []jobs.Entry{k.Entry(Account{ID: "b", Amount: 3}, opts...)})
		require.NoError(t, err)
		require.Equal(t, jobs.EnqueueKept, batch.Results[0].Outcome(), "in a batch too")
		key, n := amount()
		require.Equal(t, "a", key)
		require.Equal(t, want, n)

		want = 4 + i
		same, err := k.Enqueue(b.Ctx, b.Pool, Account{ID: "a", Amount: want}, opts...)
		require.NoError(t, err)
		require.Equal(t, jobs.EnqueueReplaced, same.Outcome(), "the holder's own key replaces")
		_, n = amount()
		require.Equal(t, want, n)
	}
	require.NotZero(t, head.ID)
}
