package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

// statements counts what a connection sends: every query, exec, batch,
// COPY and prepare is a round trip of its own (BEGIN and COMMIT are execs).
type statements struct {
	mu   sync.Mutex
	sent []string
}

func (s *statements) add(sql string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, sql)
}

// take returns what was sent since the last take.
func (s *statements) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	sent := s.sent
	s.sent = nil
	return sent
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.add(d.SQL)
	return ctx
}
func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (s *statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	s.add(fmt.Sprintf("batch of %d", d.Batch.Len()))
	return ctx
}
func (s *statements) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (s *statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}
func (s *statements) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceCopyFromStartData) context.Context {
	s.add(fmt.Sprintf("COPY %s", d.TableName))
	return ctx
}
func (s *statements) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}
func (s *statements) TracePrepareStart(ctx context.Context, _ *pgx.Conn, d pgx.TracePrepareStartData) context.Context {
	s.add("prepare " + d.SQL)
	return ctx
}
func (s *statements) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// traced opens a connection to the test's schema whose statements are
// counted.
func traced(t *testing.T, b *bundle) (*pgx.Conn, *statements) {
	t.Helper()
	cfg, err := pgx.ParseConfig(b.URL)
	require.NoError(t, err)
	s := &statements{}
	cfg.Tracer = s
	conn, err := pgx.ConnectConfig(b.Ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn, s
}

// TestSmallBatchIsOneRoundTrip: a batch without unique keys of up to
// MaxInsertBatch jobs is one statement, whether its jobs are ready, delayed
// or both, on a connection or in a transaction; one job more goes by COPY.
func TestSmallBatchIsOneRoundTrip(t *testing.T) {
	b := setup(t)
	conn, sent := traced(t, b)
	listener := b.Listen(t)

	// Statements are prepared on a connection's first use of them: warm
	// the connection up with each path first.
	_, err := noteKind.EnqueueMany(b.Ctx, conn, jobs.Items(Note{}))
	require.NoError(t, err)
	_, err = noteKind.EnqueueMany(b.Ctx, conn, jobs.Items(make([]Note, jobs.MaxInsertBatch+1)...))
	require.NoError(t, err)
	b.WakeUps(t, listener)
	sent.take()

	res, err := noteKind.EnqueueMany(b.Ctx, conn, jobs.Items(Note{Text: "one"}), jobs.Queue("one"), jobs.Priority(3))
	require.NoError(t, err)
	require.Len(t, sent.take(), 1, "a one-job batch is one round trip")
	require.Equal(t, 1, res.Inserted)
	require.Len(t, res.Results, 1)
	one, err := b.Queries.GetJob(b.Ctx, res.Results[0].ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"text":"one"}`, string(one.Payload))
	require.Equal(t, "pending", one.State)
	require.Equal(t, one.CreatedAt, one.RunAt, "a ready job's run_at is the database's now()")
	require.Equal(t, []testdb.WakeUp{{Schema: b.Schema, Queue: "one", Priority: 3, RunAt: one.RunAt.UTC(), ID: one.ID}}, b.WakeUps(t, listener))

	// Ready and delayed jobs in two queues, in a transaction of the caller's.
	items := jobs.Items(Note{Text: "a"}, Note{Text: "b"}, Note{Text: "c"}, Note{Text: "d"}, Note{Text: "e"})
	items[0].Options = []jobs.EnqueueOption{jobs.Priority(4)}
	items[1].Options = []jobs.EnqueueOption{jobs.Delay(time.Hour)}
	items[2].Options = []jobs.EnqueueOption{jobs.RunAt(time.Now().Add(-time.Hour)), jobs.Priority(1)}
	items[3].Options = []jobs.EnqueueOption{jobs.Queue("other"), jobs.ConcurrencyKey("acme"), jobs.Metadata(jobs.Meta{"by": "test"})}
	tx, err := conn.Begin(b.Ctx)
	require.NoError(t, err)
	sent.take()
	before := time.Now()
	res, err = noteKind.EnqueueMany(b.Ctx, tx, items)
	after := time.Now()
	require.NoError(t, err)
	require.Len(t, sent.take(), 1, "a mixed batch is one round trip, without a savepoint")
	require.NoError(t, tx.Commit(b.Ctx))
	sent.take()
	require.Equal(t, 5, res.Inserted)
	rows := make([]db.HopperJob, len(res.Results))
	for i, r := range res.Results {
		require.False(t, r.Duplicate)
		if i > 0 {
			require.Greater(t, r.ID, res.Results[i-1].ID, "ids ascend in batch order")
		}
		row, err := b.Queries.GetJob(b.Ctx, r.ID)
		require.NoError(t, err)
		require.JSONEq(t, fmt.Sprintf(`{"text":%q}`, "abcde"[i:i+1]), string(row.Payload), "result %d names item %d's job", i, i)
		rows[i] = row
	}
	require.Equal(t, []string{"pending", "scheduled", "pending", "pending", "pending"},
		[]string{rows[0].State, rows[1].State, rows[2].State, rows[3].State, rows[4].State})
	require.Equal(t, rows[0].CreatedAt, rows[0].RunAt)
	require.WithinRange(t, rows[1].RunAt, before.Add(time.Hour).Truncate(time.Microsecond), after.Add(time.Hour),
		"a delayed job's run_at is this process's clock, as under COPY")
	require.Equal(t, []string{"default", "default", "default", "other", "default"},
		[]string{rows[0].Queue, rows[1].Queue, rows[2].Queue, rows[3].Queue, rows[4].Queue})
	require.Equal(t, "acme", *rows[3].ConcurrencyKey)
	require.Nil(t, rows[0].ConcurrencyKey)
	require.JSONEq(t, `{"by":"test"}`, string(rows[3].Meta))
	require.Nil(t, rows[0].Meta)
	// One statement: one wake-up per queue with ready jobs, at the
	// smallest of its ready jobs' places.
	got := b.WakeUps(t, listener)
	require.ElementsMatch(t, []testdb.WakeUp{
		{Schema: b.Schema, Queue: "default", Priority: 0, RunAt: earliest(rows[0].RunAt, rows[2].RunAt, rows[4].RunAt), ID: rows[0].ID},
		{Schema: b.Schema, Queue: "other", Priority: 0, RunAt: rows[3].RunAt.UTC(), ID: rows[3].ID},
	}, got)

	// Delayed jobs only: one statement, and no wake-up.
	_, err = noteKind.EnqueueMany(b.Ctx, conn, jobs.Items(Note{}, Note{}), jobs.Delay(time.Hour))
	require.NoError(t, err)
	require.Len(t, sent.take(), 1)
	require.Empty(t, b.WakeUps(t, listener), "a scheduled job wakes nobody")

	// The largest small batch, then one job more: COPY under reserved ids.
	_, err = noteKind.EnqueueMany(b.Ctx, conn, jobs.Items(make([]Note, jobs.MaxInsertBatch)...))
	require.NoError(t, err)
	require.Len(t, sent.take(), 1)
	_, err = noteKind.EnqueueMany(b.Ctx, conn, jobs.Items(make([]Note, jobs.MaxInsertBatch+1)...))
	require.NoError(t, err)
	require.Len(t, sent.take(), 2, "a large batch reserves its ids, then COPY")

	// EnqueueBatch takes the same path.
	_, err = jobs.EnqueueBatch(b.Ctx, conn, []jobs.Entry{noteKind.Entry(Note{})})
	require.NoError(t, err)
	require.Len(t, sent.take(), 1)
}

// TestSmallBatchStoresWhatCOPYStores: the same items sent as a small batch
// (one INSERT) and at the head of a large one (COPY) are stored alike.
func TestSmallBatchStoresWhatCOPYStores(t *testing.T) {
	b := setup(t)
	keyed := jobs.MustDefine[Note]("keyed-note", jobs.Version(3), jobs.Upgrade(1, func(raw json.RawMessage) (json.RawMessage, error) { return raw, nil }),
		jobs.Upgrade(2, func(raw json.RawMessage) (json.RawMessage, error) { return raw, nil }),
		jobs.KeyBy(func(n Note) string { return n.Text }), jobs.Defaults(jobs.Queue("keyed"), jobs.MaxAttempts(7)))
	at := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	head := []jobs.Entry{
		noteKind.Entry(Note{Text: "plain"}),
		keyed.Entry(Note{Text: "tenant"}, jobs.Priority(9), jobs.Metadata(jobs.Meta{"k": "v"})),
		noteKind.Entry(Note{Text: "at"}, jobs.RunAt(at), jobs.Queue("later")),
		keyed.Entry(Note{Text: ""}, jobs.RunAt(time.Now().Add(-time.Minute))),
	}
	small, err := jobs.EnqueueBatch(b.Ctx, b.Pool, head)
	require.NoError(t, err)
	large := append([]jobs.Entry{}, head...)
	for len(large) <= jobs.MaxInsertBatch {
		large = append(large, noteKind.Entry(Note{}))
	}
	big, err := jobs.EnqueueBatch(b.Ctx, b.Pool, large)
	require.NoError(t, err)
	require.Equal(t, len(large), big.Inserted)

	for i := range head {
		s, err := b.Queries.GetJob(b.Ctx, small.Results[i].ID)
		require.NoError(t, err)
		c, err := b.Queries.GetJob(b.Ctx, big.Results[i].ID)
		require.NoError(t, err)
		if i == 2 {
			require.Equal(t, at.UTC(), s.RunAt.UTC())
		}
		if s.State == "pending" && i != 3 {
			require.Equal(t, s.CreatedAt, s.RunAt, "entry %d: ready now, by the database's clock", i)
			require.Equal(t, c.CreatedAt, c.RunAt, "entry %d: ready now, by the database's clock", i)
			s.RunAt, c.RunAt = time.Time{}, time.Time{}
		}
		if i == 3 { // a past run_at, by this process's clock on both paths
			require.WithinDuration(t, s.RunAt, c.RunAt, time.Second)
			s.RunAt, c.RunAt = time.Time{}, time.Time{}
		}
		require.NotEqual(t, s.ID, c.ID)
		s.ID, c.ID, s.CreatedAt, c.CreatedAt = 0, 0, time.Time{}, time.Time{}
		require.Equal(t, c, s, "entry %d", i)
	}
}

// earliest is the earliest of times, in UTC.
func earliest(times ...time.Time) time.Time {
	first := times[0]
	for _, at := range times[1:] {
		if at.Before(first) {
			first = at
		}
	}
	return first.UTC()
}
