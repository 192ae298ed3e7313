package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
)

// requireNotMigrated: err is jobs.ErrNotMigrated, saying what is missing,
// the version this build needs, and what to run.
func requireNotMigrated(t *testing.T, err error, missing string) {
	t.Helper()
	require.ErrorIs(t, err, jobs.ErrNotMigrated)
	require.ErrorContains(t, err, "hopper: schema not migrated: "+missing)
	require.ErrorContains(t, err, "does not exist: this build")
	require.ErrorContains(t, err, fmt.Sprintf("this build of Hopper needs schema version %d; run `hopper migrate up", schema.Latest()))
}

// requireRefused: err is jobs.ErrNotMigrated for a schema that records
// version v: it names the version, the migrations missing and what to run.
func requireRefused(t *testing.T, err error, v uint, name string) {
	t.Helper()
	require.ErrorIs(t, err, jobs.ErrNotMigrated, name)
	require.ErrorContains(t, err, fmt.Sprintf("is at version %d without migration", v), name)
	require.ErrorContains(t, err, fmt.Sprintf("this build of Hopper needs schema version %d; run `hopper migrate up", schema.Latest()), name)
}

// TestEnqueueNotMigrated: on a schema migrated only part of the way (an
// upgrade without `hopper migrate up`), every enqueue path refuses with
// jobs.ErrNotMigrated and writes nothing, whether or not its statement
// would have found every column it names: the rows a build writes are
// its schema's, whose triggers and checks an older schema lacks. Without
// Hopper's tables it says so, and keeps the database's error for
// errors.As.
func TestEnqueueNotMigrated(t *testing.T) {
	t.Parallel()
	for v := uint(0); v < schema.Latest(); v++ {
		t.Run(fmt.Sprintf("version %d", v), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			pool := testdb.NewAtVersion(t, v).Pool
			wf := func(id string) *jobs.Workflow {
				w := jobs.NewWorkflow(id)
				w.Add("a", noteKind.Entry(Note{}))
				return w
			}
			enqueues := map[string]func() error{
				"Enqueue": func() error {
					_, err := noteKind.Enqueue(ctx, pool, Note{Text: "a"}, jobs.ConcurrencyKey("k"))
					return err
				},
				"EnqueueRaw": func() error {
					_, err := jobs.EnqueueRaw(ctx, pool, "raw", 1, json.RawMessage(`{}`))
					return err
				},
				"EnqueueMany (COPY)": func() error {
					_, err := noteKind.EnqueueMany(ctx, pool, jobs.Items(Note{Text: "b"}, Note{Text: "c"}))
					return err
				},
				"EnqueueMany (now and later)": func() error {
					_, err := noteKind.EnqueueMany(ctx, pool, []jobs.Item[Note]{{Payload: Note{}}, {Payload: Note{}, Options: []jobs.EnqueueOption{jobs.Delay(time.Hour)}}})
					return err
				},
				"EnqueueBatch (unique)": func() error {
					_, err := jobs.EnqueueBatch(ctx, pool, []jobs.Entry{noteKind.Entry(Note{}, jobs.UniqueKey("u"))})
					return err
				},
				"EnqueueWorkflow": func() error {
					_, err := jobs.EnqueueWorkflow(ctx, pool, wf("w1"))
					return err
				},
				"EnqueueWorkflows": func() error {
					_, err := jobs.EnqueueWorkflows(ctx, pool, []*jobs.Workflow{wf("w2"), wf("w3")})
					return err
				},
			}
			for name, enqueue := range enqueues {
				err := enqueue()
				if v > 0 {
					requireRefused(t, err, v, name)
					continue
				}
				requireNotMigrated(t, err, `relation "hopper_jobs`)
				var pgErr *pgconn.PgError
				require.ErrorAs(t, err, &pgErr, name)
			}
			if v > 0 {
				var n int
				require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM hopper_jobs").Scan(&n))
				require.Zero(t, n, "a refused enqueue wrote nothing")
			}
		})
	}
}

// versionReads counts the statements that read the schema's version.
type versionReads struct{ n atomic.Int64 }

func (r *versionReads) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "hopper_schema_migrations") {
		r.n.Add(1)
	}
	return ctx
}

func (r *versionReads) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestEnqueueReadsVersionOnce: the refusal costs one read of the version
// per pool (per connection for callers' transactions), not one per
// enqueue; a refusal is not remembered, so that `hopper migrate up` while
// the program runs lets the same pool enqueue at its next call.
func TestEnqueueReadsVersionOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := testdb.NewAtVersion(t, schema.Latest()-1)
	cfg, err := pgxpool.ParseConfig(d.URL)
	require.NoError(t, err)
	cfg.MaxConns = 2
	reads := &versionReads{}
	cfg.ConnConfig.Tracer = reads
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	for range 3 {
		_, err := noteKind.Enqueue(ctx, pool, Note{})
		requireRefused(t, err, schema.Latest()-1, "Enqueue")
	}
	require.Equal(t, int64(3), reads.n.Load(), "a refusal is read again at each call")

	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	require.NoError(t, mg.Up(ctx))
	require.NoError(t, mg.Close())

	reads.n.Store(0)
	for range 50 {
		_, err := noteKind.Enqueue(ctx, pool, Note{})
		require.NoError(t, err)
	}
	require.Equal(t, int64(1), reads.n.Load(), "one read for the pool")
	for range 20 {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = noteKind.Enqueue(ctx, tx, Note{})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
	}
	require.LessOrEqual(t, reads.n.Load(), int64(1+2), "at most one more read per connection of the pool")
}

// TestEnqueueNotMigratedInSchema: through jobs.InSchema the command to run
// names the schema.
func TestEnqueueNotMigratedInSchema(t *testing.T) {
	b := setup(t)
	empty := testdb.NewEmpty(t)
	scoped, err := jobs.InSchema(b.Pool, empty.Schema)
	require.NoError(t, err)
	_, err = noteKind.Enqueue(b.Ctx, scoped, Note{})
	requireNotMigrated(t, err, `relation "hopper_jobs"`)
	require.ErrorContains(t, err, "run `hopper migrate up --schema "+empty.Schema+"` (or schema.Up with schema.Name)")
}

// TestEnqueueHookErrorNotExplained: a hook's own statement that finds no
// table is the hook's error, not Hopper's schema.
func TestEnqueueHookErrorNotExplained(t *testing.T) {
	b := setup(t)
	k := jobs.MustDefine[Note]("note.hooked", jobs.OnEnqueue(func(ctx context.Context, e *jobs.Enqueueing) error {
		_, err := e.DB.Exec(ctx, "INSERT INTO no_such_audit_table VALUES (1)")
		return err
	}))
	_, err := k.Enqueue(b.Ctx, b.Pool, Note{})
	require.ErrorContains(t, err, `relation "no_such_audit_table" does not exist`)
	require.False(t, errors.Is(err, jobs.ErrNotMigrated), "%v", err)
}
