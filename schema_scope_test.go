package hopper_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

var beat = jobs.MustDefine[Email]("scoped_beat", jobs.Defaults(jobs.Queue("mail")))

// unscopedPool connects in exec mode mode with the server's default
// search_path, which does not lead to the test's schema.
func unscopedPool(t *testing.T, ctx context.Context, mode string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.Server(t))
	require.NoError(t, err)
	cfg.ConnConfig.DefaultQueryExecMode = map[string]pgx.QueryExecMode{
		"cache_statement": pgx.QueryExecModeCacheStatement,
		"cache_describe":  pgx.QueryExecModeCacheDescribe,
		"describe_exec":   pgx.QueryExecModeDescribeExec,
		"exec":            pgx.QueryExecModeExec,
		"simple_protocol": pgx.QueryExecModeSimpleProtocol,
	}[mode]
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func searchPath(t *testing.T, ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) string {
	t.Helper()
	var path string
	require.NoError(t, q.QueryRow(ctx, "SELECT current_setting('search_path')").Scan(&path))
	return path
}

// TestInSchema runs enqueue, batch enqueue, the Client and a worker on a
// pool whose search_path does not lead to Hopper's tables, in every pgx
// exec mode, and checks that a caller's transaction keeps its own
// search_path.
func TestInSchema(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			b := setup(t)
			pool := unscopedPool(t, b.Ctx, mode)
			scoped, err := jobs.InSchema(pool, b.Schema)
			require.NoError(t, err)

			// Unscoped, the tables are not found: the test would pass for
			// the wrong reason otherwise.
			_, err = email.Enqueue(b.Ctx, pool, Email{To: "nowhere"})
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			require.Equal(t, "42P01", pgErr.Code)

			one, err := email.Enqueue(b.Ctx, scoped, Email{To: "one"})
			require.NoError(t, err)
			require.Equal(t, jobs.StatePending, b.state(t, one.ID))
			many, err := email.EnqueueMany(b.Ctx, scoped, jobs.Items(Email{To: "now"}, Email{To: "now too"}),
				jobs.Delay(0))
			require.NoError(t, err)
			require.Equal(t, 2, many.Inserted)
			later, err := jobs.EnqueueBatch(b.Ctx, scoped, []jobs.Entry{
				email.Entry(Email{To: "now"}), email.Entry(Email{To: "later"}, jobs.Delay(time.Hour)),
			})
			require.NoError(t, err)
			require.Equal(t, 2, later.Inserted)
			require.Equal(t, jobs.StateScheduled, b.state(t, later.Results[1].ID))

			// In the caller's transaction: the job commits or rolls back with
			// it, and the caller's search_path is the same after.
			for _, commit := range []bool{false, true} {
				tx, err := pool.Begin(b.Ctx)
				require.NoError(t, err)
				before := searchPath(t, b.Ctx, tx)
				inTx, err := jobs.InSchema(tx, b.Schema)
				require.NoError(t, err)
				res, err := email.Enqueue(b.Ctx, inTx, Email{To: "tx"})
				require.NoError(t, err)
				require.Equal(t, before, searchPath(t, b.Ctx, tx))
				if commit {
					require.NoError(t, tx.Commit(b.Ctx))
					require.Equal(t, jobs.StatePending, b.state(t, res.ID))
				} else {
					require.NoError(t, tx.Rollback(b.Ctx))
					_, err := b.client.GetJob(b.Ctx, res.ID)
					require.ErrorIs(t, err, hopper.ErrNotFound)
				}
			}

			// A failing statement in a caller's transaction reports its own
			// error, not the restore's.
			tx, err := pool.Begin(b.Ctx)
			require.NoError(t, err)
			inTx, err := jobs.InSchema(tx, b.Schema)
			require.NoError(t, err)
			_, err = email.Enqueue(b.Ctx, inTx, Email{To: "dup"}, jobs.UniqueKey("k"))
			require.NoError(t, err)
			_, err = inTx.Exec(b.Ctx, "SELECT 1/0")
			require.ErrorAs(t, err, &pgErr)
			require.Equal(t, "22012", pgErr.Code)
			require.NoError(t, tx.Rollback(b.Ctx))

			// The Client scopes the transactions given to its Tx methods.
			client := hopper.NewClient(scoped)
			row, err := client.GetJob(b.Ctx, one.ID)
			require.NoError(t, err)
			require.Equal(t, "email", row.Kind)
			tx, err = pool.Begin(b.Ctx)
			require.NoError(t, err)
			cancelled, err := client.CancelJobsTx(b.Ctx, tx, later.Results[1].ID)
			require.NoError(t, err)
			require.Len(t, cancelled, 1)
			require.NoError(t, tx.Commit(b.Ctx))
			require.Equal(t, jobs.StateCancelled, b.state(t, later.Results[1].ID))

			// A worker given the schema runs the ready jobs (one, two from
			// EnqueueMany, one from EnqueueBatch, the committed one).
			var done atomic.Int32
			w, err := worker.New(pool, worker.Config{
				Queues: map[string]int{"mail": 4}, Schema: b.Schema, PollOnly: true,
				PollInterval: 20 * time.Millisecond, Logger: quiet,
			})
			require.NoError(t, err)
			require.NoError(t, worker.Handle(w, email, func(ctx context.Context, j *jobs.Job[Email]) error {
				done.Add(1)
				return nil
			}))
			// A schedule fires in the schema too (its enqueue included).
			var beats atomic.Int32
			require.NoError(t, worker.Handle(w, beat, func(context.Context, *jobs.Job[Email]) error {
				beats.Add(1)
				return nil
			}))
			require.NoError(t, worker.Schedule(w, "scoped-beat", beat, "@every 1s", func(time.Time) Email { return Email{To: "beat"} }))
			ctx, stop := context.WithCancel(b.Ctx)
			errc := make(chan error, 1)
			go func() { errc <- w.Run(ctx) }()
			testdb.WaitFor(t, "the five ready jobs to be done, and a scheduled one", func() bool {
				s, err := client.GetStats(b.Ctx)
				require.NoError(t, err)
				return done.Load() == 5 && beats.Load() >= 1 && s.Total.Running == 0 && s.Total.Ready == 0
			})
			// Its heartbeat, on a connection it holds from the pool, beats
			// in the schema too: a worker that did not would look gone to
			// the others, which would hand its running jobs back.
			testdb.WaitFor(t, "the worker's beat in the schema", func() bool {
				var beaten bool
				require.NoError(t, scoped.QueryRow(b.Ctx, "SELECT last_seen_at > started_at FROM hopper_workers WHERE id = $1", w.ID()).Scan(&beaten))
				return beaten
			})
			stop()
			require.NoError(t, <-errc)
		})
	}
}

// fakeDBTX is a DBTX of a kind InSchema cannot scope.
type fakeDBTX struct{ jobs.DBTX }

func TestInSchemaRejects(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t).Pool
	for _, tc := range []struct {
		name   string
		dbtx   jobs.DBTX
		schema string
		want   string
	}{
		{"empty name", pool, "", "empty"},
		{"too long", pool, strings.Repeat("s", 64), "at most 63"},
		{"NUL byte", pool, "a\x00b", "NUL"},
		{"nil database", nil, "jobs", "nil database"},
		{"unknown handle", fakeDBTX{}, "jobs", "needs a *pgxpool.Pool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := jobs.InSchema(tc.dbtx, tc.schema)
			require.ErrorIs(t, err, jobs.ErrInvalidSchema)
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err := worker.New(pool, worker.Config{Schema: strings.Repeat("s", 64)})
	require.ErrorIs(t, err, worker.ErrInvalidConfig)
	require.ErrorContains(t, err, "at most 63")
}

// TestWorkerSchemaNotMigrated: a schema without Hopper's tables is named
// in the error, with what to run.
func TestWorkerSchemaNotMigrated(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	empty := testdb.NewEmpty(t)
	pool := unscopedPool(t, ctx, "exec")
	w, err := worker.New(pool, worker.Config{Queues: map[string]int{"mail": 1}, Schema: empty.Schema, Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, email, func(context.Context, *jobs.Job[Email]) error { return nil }))
	err = w.Run(ctx)
	require.ErrorIs(t, err, jobs.ErrNotMigrated)
	require.ErrorContains(t, err, "in schema "+empty.Schema)
}

// BenchmarkEnqueueInSchema is one enqueue, one round trip each, on a pool
// whose search_path leads to the tables ("search_path") and on one scoped
// with jobs.InSchema ("in_schema"), in pgx's statement-cache and exec
// modes: what naming the schema in Go costs (make bench-go).
func BenchmarkEnqueueInSchema(b *testing.B) {
	tdb := testdb.New(b)
	ctx := context.Background()
	for _, mode := range []string{"cache_statement", "exec"} {
		cfg, err := pgxpool.ParseConfig(tdb.URL)
		require.NoError(b, err)
		cfg.ConnConfig.DefaultQueryExecMode = map[string]pgx.QueryExecMode{
			"cache_statement": pgx.QueryExecModeCacheStatement, "exec": pgx.QueryExecModeExec,
		}[mode]
		direct, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(b, err)
		b.Cleanup(direct.Close)
		scoped, err := jobs.InSchema(direct, tdb.Schema)
		require.NoError(b, err)
		for _, way := range []struct {
			name string
			dbtx jobs.DBTX
		}{{"search_path", direct}, {"in_schema", scoped}} {
			b.Run(mode+"/"+way.name, func(b *testing.B) {
				for b.Loop() {
					if _, err := email.Enqueue(ctx, way.dbtx, Email{To: "bench"}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
