package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

type Note struct {
	Text string `json:"text"`
}

var noteKind = jobs.MustDefine[Note]("note")

func TestEnqueueStoresOptions(t *testing.T) {
	b := setup(t)
	k := jobs.MustDefine[Note]("note.options", jobs.Defaults(jobs.Queue("notes"), jobs.MaxAttempts(4)))
	res, err := k.Enqueue(b.Ctx, b.Pool, Note{Text: "hi"}, jobs.Priority(7), jobs.Delay(time.Hour), jobs.UniqueKey("n-1"))
	require.NoError(t, err)
	require.False(t, res.Duplicate)

	row, err := b.Queries.GetJob(b.Ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, "notes", row.Queue, "kind default")
	require.Equal(t, "note.options", row.Kind)
	require.Equal(t, int32(1), row.Version)
	require.Equal(t, int16(7), row.Priority)
	require.Equal(t, int32(4), row.MaxAttempts)
	require.Equal(t, "n-1", *row.UniqueKey)
	require.JSONEq(t, `{"text":"hi"}`, string(row.Payload))
	require.WithinDuration(t, row.CreatedAt.Add(time.Hour), row.RunAt, time.Second)

	at := time.Now().Add(72 * time.Hour).Truncate(time.Microsecond)
	res, err = k.Enqueue(b.Ctx, b.Pool, Note{}, jobs.RunAt(at), jobs.Queue("other"))
	require.NoError(t, err)
	row, err = b.Queries.GetJob(b.Ctx, res.ID)
	require.NoError(t, err)
	require.True(t, at.Equal(row.RunAt))
	require.Equal(t, "other", row.Queue, "call options override kind defaults")
}

// TestEnqueueRunAtFarBackIsNow: a run time in the past means now, however
// far back: one hundreds of thousands of years back, whose microseconds
// since 2000 overflow pgx's int64 into a time far ahead, is ready now by
// every enqueue path, not scheduled for the year 284000.
func TestEnqueueRunAtFarBackIsNow(t *testing.T) {
	b := setup(t)
	far := jobs.RunAt(time.Date(-300000, 1, 1, 0, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		name    string
		enqueue func() (int64, error)
	}{
		{"Enqueue", func() (int64, error) { r, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, far); return r.ID, err }},
		{"Enqueue with a unique key", func() (int64, error) {
			r, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, far, jobs.UniqueKey("far"))
			return r.ID, err
		}},
		{"EnqueueMany", func() (int64, error) {
			r, err := noteKind.EnqueueMany(b.Ctx, b.Pool, []jobs.Item[Note]{{Payload: Note{}, Options: []jobs.EnqueueOption{far}}})
			if err != nil {
				return 0, err
			}
			return r.Results[0].ID, nil
		}},
		{"EnqueueMany with a unique key", func() (int64, error) {
			r, err := noteKind.EnqueueMany(b.Ctx, b.Pool, []jobs.Item[Note]{{Payload: Note{}, Options: []jobs.EnqueueOption{far, jobs.UniqueKey("far-batch")}}})
			if err != nil {
				return 0, err
			}
			return r.Results[0].ID, nil
		}},
	} {
		id, err := tc.enqueue()
		require.NoError(t, err, tc.name)
		row, err := b.Queries.GetJob(b.Ctx, id)
		require.NoError(t, err, tc.name)
		require.Equal(t, "pending", row.State, tc.name)
		require.WithinDuration(t, time.Now(), row.RunAt, time.Minute, tc.name)
	}
}

func TestEnqueueRejectsBadInput(t *testing.T) {
	b := setup(t)
	small := jobs.MustDefine[Note]("note.small", jobs.MaxPayloadBytes(64))
	type unmarshalable struct{ C chan int }
	bad := jobs.MustDefine[unmarshalable]("bad")
	for _, tc := range []struct {
		name    string
		enqueue func() error
		want    error
		msg     string
	}{
		{"empty queue", func() error { _, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.Queue("")); return err }, jobs.ErrInvalidQueue, "empty"},
		{"long queue", func() error {
			_, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.Queue(strings.Repeat("q", 129)))
			return err
		}, jobs.ErrInvalidQueue, "129 characters"},
		{"priority above 9", func() error { _, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.Priority(10)); return err }, jobs.ErrInvalidPriority, "10 is outside 0"},
		{"negative priority", func() error { _, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.Priority(-1)); return err }, jobs.ErrInvalidPriority, "-1"},
		{"zero attempts", func() error { _, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.MaxAttempts(0)); return err }, jobs.ErrInvalidMaxAttempts, "0"},
		{"absurd attempts", func() error {
			_, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.MaxAttempts(math.MaxInt))
			return err
		}, jobs.ErrInvalidMaxAttempts, ""},
		{"negative delay", func() error { _, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.Delay(-time.Second)); return err }, jobs.ErrInvalidRunAt, "negative"},
		{"run at in the year 9999", func() error {
			_, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.RunAt(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)))
			return err
		}, jobs.ErrInvalidRunAt, "run_at is in the year 9999 or later"},
		{"run at past what pgx encodes", func() error { // microseconds since 2000 overflow an int64 into the past
			_, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.RunAt(time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)))
			return err
		}, jobs.ErrInvalidRunAt, "year 9999"},
		{"run at in the year 9999 in a batch", func() error {
			items := jobs.Items(Note{}, Note{})
			items[1].Options = []jobs.EnqueueOption{jobs.RunAt(time.Date(9999, 6, 1, 0, 0, 0, 0, time.UTC))}
			_, err := noteKind.EnqueueMany(b.Ctx, b.Pool, items)
			return err
		}, jobs.ErrInvalidRunAt, "item 1"},
		{"run at in the year 9999 with a unique key", func() error {
			_, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.UniqueKey("u"), jobs.RunAt(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)))
			return err
		}, jobs.ErrInvalidRunAt, "year 9999"},
		{"empty unique key", func() error { _, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.UniqueKey("")); return err }, jobs.ErrInvalidUniqueKey, "empty"},
		{"long unique key", func() error {
			_, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.UniqueKey(strings.Repeat("u", 513)))
			return err
		}, jobs.ErrInvalidUniqueKey, "513"},
		{"payload too large", func() error {
			_, err := small.Enqueue(b.Ctx, b.Pool, Note{Text: strings.Repeat("x", 100)})
			return err
		}, jobs.ErrPayloadTooLarge, "over the limit of 64"},
		{"payload does not marshal", func() error { _, err := bad.Enqueue(b.Ctx, b.Pool, unmarshalable{}); return err }, jobs.ErrMarshal, "chan"},
		{"one bad item fails the batch", func() error {
			items := jobs.Items(Note{}, Note{}, Note{})
			items[2].Options = []jobs.EnqueueOption{jobs.Priority(99)}
			_, err := noteKind.EnqueueMany(b.Ctx, b.Pool, items)
			return err
		}, jobs.ErrInvalidPriority, "item 2"},
		{"oversize item fails the batch", func() error {
			_, err := small.EnqueueMany(b.Ctx, b.Pool, jobs.Items(Note{}, Note{Text: strings.Repeat("x", 100)}))
			return err
		}, jobs.ErrPayloadTooLarge, "item 1"},
	} {
		err := tc.enqueue()
		require.ErrorIs(t, err, tc.want, tc.name)
		require.Contains(t, err.Error(), tc.msg, tc.name)
		require.Contains(t, err.Error(), "enqueue", tc.name)
	}
	require.Zero(t, b.live(t), "nothing was written")

	// The default limit is 1 MiB.
	_, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{Text: strings.Repeat("x", jobs.DefaultMaxPayloadBytes)})
	require.ErrorIs(t, err, jobs.ErrPayloadTooLarge)
	_, err = noteKind.Enqueue(b.Ctx, b.Pool, Note{Text: strings.Repeat("x", jobs.DefaultMaxPayloadBytes-20)})
	require.NoError(t, err)
}

// TestEnqueueTransactional: the job commits or rolls back with the caller's
// own writes, whatever handle the caller holds.
func TestEnqueueTransactional(t *testing.T) {
	b := setup(t)
	_, err := b.Pool.Exec(b.Ctx, "CREATE TABLE orders (id bigint PRIMARY KEY)")
	require.NoError(t, err)

	placeOrder := func(tx pgx.Tx, id int64) {
		_, err := tx.Exec(b.Ctx, "INSERT INTO orders (id) VALUES ($1)", id)
		require.NoError(t, err)
		// The caller's own sqlc Queries, bound to the same transaction, can
		// work alongside: both go through tx.
		_, err = db.New(tx).Stats(b.Ctx)
		require.NoError(t, err)
		_, err = noteKind.Enqueue(b.Ctx, tx, Note{Text: fmt.Sprint("order ", id)})
		require.NoError(t, err)
	}
	orders := func() (n int64) {
		require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT count(*) FROM orders").Scan(&n))
		return n
	}

	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	placeOrder(tx, 1)
	require.NoError(t, tx.Rollback(b.Ctx))
	require.Zero(t, b.live(t), "rolled back: no job")
	require.Zero(t, orders())

	tx, err = b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	placeOrder(tx, 2)
	require.NoError(t, tx.Commit(b.Ctx))
	require.EqualValues(t, 1, b.live(t), "committed: exactly one job")
	require.EqualValues(t, 1, orders())

	// A plain connection and the pool work too.
	conn, err := pgx.Connect(b.Ctx, b.URL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = noteKind.Enqueue(b.Ctx, conn, Note{})
	require.NoError(t, err)
	_, err = noteKind.Enqueue(b.Ctx, b.Pool, Note{})
	require.NoError(t, err)

	// And a batch inside a transaction that rolls back leaves nothing.
	tx, err = b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	items := jobs.Items(Note{}, Note{})
	items[1].Options = []jobs.EnqueueOption{jobs.Delay(time.Minute)} // two COPY statements
	res, err := noteKind.EnqueueMany(b.Ctx, tx, items)
	require.NoError(t, err)
	require.Equal(t, 2, res.Inserted)
	require.NoError(t, tx.Rollback(b.Ctx))
	require.EqualValues(t, 3, b.live(t))
}

// TestUniqueKeyConcurrent: many goroutines enqueue the same key at once;
// exactly one job is inserted, and every other call learns it was a
// duplicate of that job.
func TestUniqueKeyConcurrent(t *testing.T) {
	b := setup(t)
	const callers = 40
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		results []jobs.Result
		errs    []error
	)
	start := make(chan struct{})
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.UniqueKey("same"))
			mu.Lock()
			defer mu.Unlock()
			results = append(results, res)
			errs = append(errs, err)
		}()
	}
	close(start)
	wg.Wait()
	var inserted []int64
	for i, res := range results {
		require.NoError(t, errs[i])
		if !res.Duplicate {
			inserted = append(inserted, res.ID)
		}
	}
	require.Len(t, inserted, 1)
	for _, res := range results {
		if res.Duplicate && res.ID != 0 {
			require.Equal(t, inserted[0], res.ID, "a duplicate names the live holder")
		}
	}
	require.EqualValues(t, 1, b.live(t))
}

func TestEnqueueMany100k(t *testing.T) {
	testdb.Slow(t, "100,000 jobs enqueued")
	b := setup(t)
	const n = 100_000
	payloads := make([]Note, n)
	for i := range payloads {
		payloads[i] = Note{Text: fmt.Sprint(i)}
	}
	res, err := noteKind.EnqueueMany(b.Ctx, b.Pool, jobs.Items(payloads...), jobs.Queue("bulk"), jobs.Priority(5), jobs.MaxAttempts(3))
	require.NoError(t, err)
	require.Equal(t, n, res.Inserted)
	require.Zero(t, res.Duplicates)
	require.Len(t, res.Results, n)
	// COPY reports no ids, so they are reserved first: each result names
	// the job made of its item, in the batch's order.
	for i, r := range res.Results {
		require.False(t, r.Duplicate)
		if i > 0 {
			require.Greater(t, r.ID, res.Results[i-1].ID, "ids ascend in batch order")
		}
	}
	for _, i := range []int{0, 1, n / 2, n - 1} {
		row, err := b.Queries.GetJob(b.Ctx, res.Results[i].ID)
		require.NoError(t, err)
		require.JSONEq(t, fmt.Sprintf(`{"text":%q}`, fmt.Sprint(i)), string(row.Payload), "result %d names item %d's job", i, i)
	}

	var count, right, distinct int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `
		SELECT count(*),
		       count(*) FILTER (WHERE queue = 'bulk' AND kind = 'note' AND version = 1 AND priority = 5
		                        AND max_attempts = 3 AND state = 'pending' AND attempt = 0 AND unique_key IS NULL),
		       count(DISTINCT payload->>'text')
		FROM hopper_jobs`).Scan(&count, &right, &distinct))
	require.EqualValues(t, n, count)
	require.EqualValues(t, n, right, "every job has the fields it was given")
	require.EqualValues(t, n, distinct, "every payload arrived once")

	empty, err := noteKind.EnqueueMany(b.Ctx, b.Pool, nil)
	require.NoError(t, err)
	require.Zero(t, empty.Inserted)
}

func TestEnqueueManyMixed(t *testing.T) {
	b := setup(t)
	_, err := noteKind.Enqueue(b.Ctx, b.Pool, Note{}, jobs.UniqueKey("held"))
	require.NoError(t, err)

	items := jobs.Items(Note{Text: "a"}, Note{Text: "b"}, Note{Text: "c"}, Note{Text: "d"}, Note{Text: "e"})
	items[0].Options = []jobs.EnqueueOption{jobs.UniqueKey("k1")}
	items[1].Options = []jobs.EnqueueOption{jobs.UniqueKey("held")}
	items[2].Options = []jobs.EnqueueOption{jobs.UniqueKey("k1")} // repeats item 0
	items[4].Options = []jobs.EnqueueOption{jobs.Delay(time.Hour)}
	res, err := noteKind.EnqueueMany(b.Ctx, b.Pool, items)
	require.NoError(t, err)
	require.Equal(t, 3, res.Inserted)
	require.Equal(t, 2, res.Duplicates)
	require.Len(t, res.Results, 5)
	// Per item, in order: a, b (held by the first job), c (held by a), d, e.
	texts := []string{"a", "", "a", "d", "e"} // the payload of the job each result names
	dup := []bool{false, true, true, false, false}
	for i, r := range res.Results {
		require.Equal(t, dup[i], r.Duplicate, "item %d", i)
		row, err := b.Queries.GetJob(b.Ctx, r.ID)
		require.NoError(t, err, "item %d names a live job", i)
		require.JSONEq(t, fmt.Sprintf(`{"text":%q}`, texts[i]), string(row.Payload), "item %d", i)
	}
	require.Equal(t, res.Results[0].ID, res.Results[2].ID, "a duplicate within the batch names the earlier item's job")

	stats, err := b.Queries.Stats(b.Ctx)
	require.NoError(t, err)
	require.Len(t, stats, 1)
	require.EqualValues(t, 3, stats[0].Ready) // held, a, d
	require.EqualValues(t, 1, stats[0].Scheduled)

	// A plain batch mixing ready and scheduled jobs, without a transaction.
	items = jobs.Items(Note{Text: "x"}, Note{Text: "y"}, Note{Text: "z"})
	items[1].Options = []jobs.EnqueueOption{jobs.RunAt(time.Now().Add(time.Hour))}
	res, err = noteKind.EnqueueMany(b.Ctx, b.Pool, items)
	require.NoError(t, err)
	require.Equal(t, 3, res.Inserted)
	for i, r := range res.Results {
		row, err := b.Queries.GetJob(b.Ctx, r.ID)
		require.NoError(t, err)
		require.JSONEq(t, fmt.Sprintf(`{"text":%q}`, []string{"x", "y", "z"}[i]), string(row.Payload))
		require.Equal(t, map[bool]string{true: "scheduled", false: "pending"}[i == 1], row.State)
	}
	require.EqualValues(t, 7, b.live(t))
}

// TestEnqueueBatchMixedKinds: jobs of several kinds in one call, on both
// paths (COPY, and unique keys), all or nothing, one result per entry.
func TestEnqueueBatchMixedKinds(t *testing.T) {
	b := setup(t)
	type Invoice struct {
		Number int `json:"number"`
	}
	invoice := jobs.MustDefine[Invoice]("invoice", jobs.Version(2), jobs.Upgrade(1, func(raw json.RawMessage) (json.RawMessage, error) { return raw, nil }),
		jobs.Defaults(jobs.Queue("billing")))

	res, err := jobs.EnqueueBatch(b.Ctx, b.Pool, []jobs.Entry{
		noteKind.Entry(Note{Text: "hi"}),
		invoice.Entry(Invoice{Number: 7}, jobs.Priority(3)),
		noteKind.Entry(Note{Text: "later"}, jobs.Delay(time.Hour)),
	})
	require.NoError(t, err)
	require.Equal(t, 3, res.Inserted)
	want := []struct {
		kind, queue, state string
		version            int32
	}{{"note", "default", "pending", 1}, {"invoice", "billing", "pending", 2}, {"note", "default", "scheduled", 1}}
	for i, r := range res.Results {
		row, err := b.Queries.GetJob(b.Ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, want[i].kind, row.Kind, "entry %d", i)
		require.Equal(t, want[i].queue, row.Queue, "entry %d", i)
		require.Equal(t, want[i].state, row.State, "entry %d", i)
		require.Equal(t, want[i].version, row.Version, "entry %d: stored at its kind's version", i)
	}

	// With a unique key: one statement, duplicates named.
	res, err = jobs.EnqueueBatch(b.Ctx, b.Pool, []jobs.Entry{
		invoice.Entry(Invoice{Number: 8}, jobs.UniqueKey("invoice-8")),
		noteKind.Entry(Note{Text: "dup"}, jobs.UniqueKey("invoice-8")),
	})
	require.NoError(t, err)
	require.Equal(t, 1, res.Inserted)
	require.Equal(t, []jobs.Result{{ID: res.Results[0].ID}, {ID: res.Results[0].ID, Duplicate: true}}, res.Results)

	// One bad entry refuses the whole batch, naming it; nothing is written.
	before := b.live(t)
	_, err = jobs.EnqueueBatch(b.Ctx, b.Pool, []jobs.Entry{
		noteKind.Entry(Note{}),
		invoice.Entry(Invoice{}, jobs.Priority(12)),
	})
	require.ErrorIs(t, err, jobs.ErrInvalidPriority)
	require.Contains(t, err.Error(), "item 1 (invoice)")
	_, err = jobs.EnqueueBatch(b.Ctx, b.Pool, []jobs.Entry{{}})
	require.ErrorIs(t, err, jobs.ErrInvalidDefinition, "a zero Entry is refused")
	require.Equal(t, before, b.live(t))

	empty, err := jobs.EnqueueBatch(b.Ctx, b.Pool, nil)
	require.NoError(t, err)
	require.Empty(t, empty.Results)
}

func TestEnqueueRaw(t *testing.T) {
	b := setup(t)
	res, err := jobs.EnqueueRaw(b.Ctx, b.Pool, "ops.reindex", 3, []byte(`{"table":"users"}`), jobs.Queue("ops"), jobs.Priority(2))
	require.NoError(t, err)
	row, err := b.Queries.GetJob(b.Ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, int32(3), row.Version)
	require.Equal(t, "ops", row.Queue)
	require.JSONEq(t, `{"table":"users"}`, string(row.Payload))

	for _, tc := range []struct {
		kind    string
		version int
		payload string
		want    error
	}{
		{"", 1, `{}`, jobs.ErrInvalidDefinition},
		{"k", 0, `{}`, jobs.ErrInvalidDefinition},
		{"k", 1, `{"unterminated":`, jobs.ErrMarshal},
		{"k", 1, ``, jobs.ErrMarshal},
	} {
		_, err := jobs.EnqueueRaw(b.Ctx, b.Pool, tc.kind, tc.version, []byte(tc.payload))
		require.ErrorIs(t, err, tc.want, "%+v", tc)
	}
	_, err = jobs.EnqueueRaw(b.Ctx, b.Pool, "k", 1, []byte(`{}`), jobs.Priority(10))
	require.ErrorIs(t, err, jobs.ErrInvalidPriority)
	require.EqualValues(t, 1, b.live(t))
}
