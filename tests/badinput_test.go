package tests

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/worker"
)

// TestBadInput: odd and hostile input gets a clear error or a dead-table
// entry with its reason; no worker crashes and nothing else is affected.
// (Oversize payloads, bad options, failing upgrades, newer payload
// versions and an unmigrated schema have tests next to their code.)
func TestBadInput(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	q := db.New(d.Pool)

	// Invalid JSON inserted through raw SQL never reaches the table.
	_, err := d.Pool.Exec(ctx, "INSERT INTO hopper_jobs (queue, kind, payload) VALUES ('default', 'k', $1::text::jsonb)", `{"broken":`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "22P02", pgErr.Code, "invalid_text_representation")

	// Names full of SQL metacharacters and odd characters are just data.
	odd := jobs.MustDefine[Chore](`kind'); DROP TABLE hopper_jobs; --`)
	queue := `q"; DELETE FROM hopper_jobs; -- ünïcødé ✓`
	_, err = odd.EnqueueMany(ctx, d.Pool, jobs.Items(Chore{N: 1}, Chore{N: 2}), jobs.Queue(queue), jobs.UniqueKey(`k'"\`))
	require.NoError(t, err)
	// A kind no worker handles, and a payload its kind cannot decode.
	_, err = jobs.EnqueueRaw(ctx, d.Pool, "nobody.handles.this", 1, []byte(`{}`), jobs.Queue(queue))
	require.NoError(t, err)
	_, err = jobs.EnqueueRaw(ctx, d.Pool, odd.Name(), 1, []byte(`{"n":"not a number"}`), jobs.Queue(queue))
	require.NoError(t, err)

	var ran atomic.Int64
	w, err := worker.New(d.Pool, worker.Config{Queues: map[string]int{queue: 4}, PollInterval: 50 * time.Millisecond, Logger: quietLog})
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, odd, func(context.Context, *jobs.Job[Chore]) error { ran.Add(1); return nil }))
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(runCtx) }()
	// The condition runs on a goroutine of its own, so it reports through
	// CollectT rather than t.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		stats, err := q.Stats(ctx)
		require.NoError(c, err)
		byKind := map[string]db.StatsRow{}
		for _, s := range stats {
			byKind[s.Kind] = s
		}
		got := byKind[odd.Name()]
		require.Equal(c, [3]int64{1, 0, 0}, [3]int64{got.Dead, got.Ready, got.Running}, "dead, ready, running")
	}, testdb.WaitLimit, 20*time.Millisecond)
	stop()
	require.NoError(t, <-errc, "the worker did not crash")
	require.EqualValues(t, 1, ran.Load(), "the unique key let one of the two in; it ran")

	stats, err := q.Stats(ctx)
	require.NoError(t, err)
	for _, s := range stats {
		require.Equal(t, queue, s.Queue)
		if s.Kind == "nobody.handles.this" {
			require.EqualValues(t, 1, s.Ready, "a kind nobody handles is left alone")
		}
	}
	dead, err := hopper.NewClient(d.Pool).ListJobs(ctx, hopper.ListParams{States: []jobs.State{jobs.StateDead}})
	require.NoError(t, err)
	require.Len(t, dead.Jobs, 1)
	require.Contains(t, dead.Jobs[0].Reason, "undecodable payload")
}

// TestWorkerWithUnreachableDatabase: Run says why it cannot start.
func TestWorkerWithUnreachableDatabase(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody:secret@127.0.0.1:1/none?connect_timeout=1")
	require.NoError(t, err)
	defer pool.Close()
	w, err := worker.New(pool, worker.Config{Logger: quietLog})
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, jobs.MustDefine[Chore]("any"), func(context.Context, *jobs.Job[Chore]) error { return nil }))
	err = w.Run(context.Background())
	require.ErrorContains(t, err, "worker: start")
	require.ErrorContains(t, err, "connect")
}

// TestMigrateDirty: the CLI reports a migrations table left dirty, with
// the way out.
func TestMigrateDirty(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	_, err := d.Pool.Exec(context.Background(), "UPDATE hopper_schema_migrations SET dirty = true")
	require.NoError(t, err)
	requireFailure(t, runHopper(t, d.URL, "", "migrate", "up"), 1, "dirty")
	r := runHopper(t, d.URL, "", "migrate", "version")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "hopper migrate force")
	r = runHopper(t, d.URL, "", "migrate", "force", strconv.Itoa(int(schema.Latest())))
	require.Zero(t, r.code, r.stderr)
	require.Zero(t, runHopper(t, d.URL, "", "migrate", "up").code, "clean again")
}
