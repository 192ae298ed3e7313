package schema_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/schema"
)

// insertSequenceJobs inserts, in one statement, one waiting job for each
// key, as the enqueue statements store a job of a sequence.
func insertSequenceJobs(ctx context.Context, t *testing.T, tx pgx.Tx, keys ...string) {
	t.Helper()
	_, err := tx.Exec(ctx, `
		INSERT INTO hopper_jobs (queue, kind, payload, state, meta)
		SELECT 'default', 'k', '{}', 'waiting', jsonb_build_object('hopper.sequence', k)
		FROM unnest($1::text[]) AS k`, keys)
	require.NoError(t, err)
}

// placed reports, for each key, the state of its jobs in id order.
func placed(ctx context.Context, t *testing.T, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, keys ...string) map[string][]string {
	t.Helper()
	rows, err := q.Query(ctx, `
		SELECT meta ->> 'hopper.sequence', array_agg(state ORDER BY id)
		FROM hopper_jobs WHERE meta ->> 'hopper.sequence' = ANY ($1::text[])
		GROUP BY 1`, keys)
	require.NoError(t, err)
	got := map[string][]string{}
	for rows.Next() {
		var key string
		var states []string
		require.NoError(t, rows.Scan(&key, &states))
		got[key] = states
	}
	require.NoError(t, rows.Err())
	return got
}

func migrateUp(ctx context.Context, t *testing.T, d *testdb.DB) {
	t.Helper()
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer mg.Close()
	require.NoError(t, mg.Up(ctx))
}

// TestSequencePlacementFiresOnce: a transaction's new sequence jobs are
// placed by one call of the placement, however many jobs and statements
// (before migration 26, one call per job, all but the first finding
// nothing to do: about 10 µs a job).
func TestSequencePlacementFiresOnce(t *testing.T) {
	ctx, d := setup(t)
	migrateUp(ctx, t, d)

	keys := make([]string, 100)
	for i := range keys {
		keys[i] = "once-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	tx, err := d.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, `SET LOCAL track_functions = 'all'`)
	require.NoError(t, err)
	for range 3 {
		insertSequenceJobs(ctx, t, tx, keys...)
		_, err = tx.Exec(ctx, `INSERT INTO hopper_jobs (queue, kind, payload) SELECT 'default', 'plain', '{}' FROM generate_series(1, 50)`)
		require.NoError(t, err)
	}
	// Fire the deferred placement now, so that this transaction's count
	// of calls can still be read.
	_, err = tx.Exec(ctx, `SET CONSTRAINTS ALL IMMEDIATE`)
	require.NoError(t, err)
	var calls int64
	require.NoError(t, tx.QueryRow(ctx, `
		SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions
		WHERE schemaname = current_schema() AND funcname = 'hopper_sequence_place'`).Scan(&calls))
	require.Equal(t, int64(1), calls, "one placement for 300 sequence jobs in three statements")
	// The WHEN's function runs for every inserted job, plain ones too: it
	// must stay inlined (no call of its own, which track_functions would
	// count), or every insert pays a function call.
	require.NoError(t, tx.QueryRow(ctx, `
		SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions
		WHERE schemaname = current_schema() AND funcname = 'hopper_sequence_place_queue'`).Scan(&calls))
	require.Zero(t, calls, "hopper_sequence_place_queue is inlined into the trigger's WHEN")
	for key, states := range placed(ctx, t, tx, keys...) {
		require.Equal(t, []string{"pending", "waiting", "waiting"}, states, key)
	}
	require.NoError(t, tx.Commit(ctx))
}

// TestSequencesUnderImmediateConstraints: the placement is a deferred
// constraint trigger, and an application may make it IMMEDIATE (SET
// CONSTRAINTS ALL IMMEDIATE, to check its own constraints early). Before
// migration 26 its jobs were then never placed: the first job of a new
// key stayed waiting. Each case is one transaction; after its commit,
// each key has its first job pending and the rest waiting, in every mix
// of modes, statements and savepoints.
func TestSequencesUnderImmediateConstraints(t *testing.T) {
	ctx, d := setup(t)
	migrateUp(ctx, t, d)

	for _, tc := range []struct {
		name string
		// run writes the transaction; want is each key's states by id.
		run  func(tx pgx.Tx)
		want map[string][]string
	}{
		{
			name: "immediate, one statement",
			run: func(tx pgx.Tx) {
				exec(ctx, t, tx, `SET CONSTRAINTS ALL IMMEDIATE`)
				insertSequenceJobs(ctx, t, tx, "imm-a", "imm-a", "imm-a")
			},
			want: map[string][]string{"imm-a": {"pending", "waiting", "waiting"}},
		},
		{
			name: "immediate, a statement per job",
			run: func(tx pgx.Tx) {
				exec(ctx, t, tx, `SET CONSTRAINTS hopper_jobs_sequence_place IMMEDIATE`)
				insertSequenceJobs(ctx, t, tx, "imm-b")
				insertSequenceJobs(ctx, t, tx, "imm-b", "imm-c")
			},
			want: map[string][]string{"imm-b": {"pending", "waiting"}, "imm-c": {"pending"}},
		},
		{
			name: "deferred, then immediate",
			run: func(tx pgx.Tx) {
				insertSequenceJobs(ctx, t, tx, "mix-a")
				exec(ctx, t, tx, `SET CONSTRAINTS ALL IMMEDIATE`)
				insertSequenceJobs(ctx, t, tx, "mix-a", "mix-b")
			},
			want: map[string][]string{"mix-a": {"pending", "waiting"}, "mix-b": {"pending"}},
		},
		{
			name: "immediate, then deferred",
			run: func(tx pgx.Tx) {
				exec(ctx, t, tx, `SET CONSTRAINTS ALL IMMEDIATE`)
				insertSequenceJobs(ctx, t, tx, "mix-c")
				exec(ctx, t, tx, `SET CONSTRAINTS ALL DEFERRED`)
				insertSequenceJobs(ctx, t, tx, "mix-c", "mix-d")
			},
			want: map[string][]string{"mix-c": {"pending", "waiting"}, "mix-d": {"pending"}},
		},
		{
			name: "the first job in a savepoint rolled back",
			run: func(tx pgx.Tx) {
				exec(ctx, t, tx, `SAVEPOINT s`)
				insertSequenceJobs(ctx, t, tx, "sp-a")
				exec(ctx, t, tx, `ROLLBACK TO SAVEPOINT s`)
				insertSequenceJobs(ctx, t, tx, "sp-b")
			},
			want: map[string][]string{"sp-b": {"pending"}},
		},
		{
			name: "a later job in a savepoint rolled back",
			run: func(tx pgx.Tx) {
				insertSequenceJobs(ctx, t, tx, "sp-c")
				exec(ctx, t, tx, `SAVEPOINT s`)
				insertSequenceJobs(ctx, t, tx, "sp-c", "sp-d")
				exec(ctx, t, tx, `ROLLBACK TO SAVEPOINT s`)
			},
			want: map[string][]string{"sp-c": {"pending"}},
		},
		{
			name: "the first job in a savepoint released",
			run: func(tx pgx.Tx) {
				exec(ctx, t, tx, `SAVEPOINT s`)
				insertSequenceJobs(ctx, t, tx, "sp-e")
				exec(ctx, t, tx, `RELEASE SAVEPOINT s`)
				insertSequenceJobs(ctx, t, tx, "sp-e", "sp-f")
			},
			want: map[string][]string{"sp-e": {"pending", "waiting"}, "sp-f": {"pending"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := d.Pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(context.Background()) }()
			tc.run(tx)
			require.NoError(t, tx.Commit(ctx))
			keys := []string{"imm-a", "imm-b", "imm-c", "mix-a", "mix-b", "mix-c", "mix-d", "sp-a", "sp-b", "sp-c", "sp-d", "sp-e", "sp-f"}
			got := placed(ctx, t, d.Pool, keys...)
			for key, want := range tc.want {
				require.Equal(t, want, got[key], key)
			}
		})
	}
	// Nothing of the rolled-back savepoints is left.
	got := placed(ctx, t, d.Pool, "sp-a", "sp-d")
	require.Empty(t, got)
}

func exec(ctx context.Context, t *testing.T, tx pgx.Tx, sql string) {
	t.Helper()
	_, err := tx.Exec(ctx, sql)
	require.NoError(t, err)
}

// TestSequencePlacementProperty: random transactions of sequence inserts,
// constraint mode switches and savepoints (rolled back or released), some
// rolled back whole. After them, every key's first job is pending and the
// rest wait, and exactly the jobs of the committed parts exist. The seed
// is logged; HOPPER_PLACEMENT_SEED repeats a run.
func TestSequencePlacementProperty(t *testing.T) {
	ctx, d := setup(t)
	migrateUp(ctx, t, d)

	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("HOPPER_PLACEMENT_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d: repeat with HOPPER_PLACEMENT_SEED=%d go test -run %s ./schema", seed, seed, t.Name())
	r := rand.New(rand.NewPCG(seed, 49))

	keys := []string{"p-a", "p-b", "p-c", "p-d", "p-e", "p-f", "p-g", "p-h"}
	committed := 0 // jobs inserted by the parts that committed
	for round := range 40 {
		tx, err := d.Pool.Begin(ctx)
		require.NoError(t, err)
		// inserted[i] counts the jobs inserted since savepoint i (0: the
		// transaction itself); a rollback to a savepoint drops its count.
		inserted := []int{0}
		var steps []string
		for range 1 + r.IntN(8) {
			switch op := r.IntN(6); {
			case op <= 1:
				batch := make([]string, 1+r.IntN(4))
				for i := range batch {
					batch[i] = keys[r.IntN(len(keys))]
				}
				insertSequenceJobs(ctx, t, tx, batch...)
				inserted[len(inserted)-1] += len(batch)
				steps = append(steps, fmt.Sprintf("insert %v", batch))
			case op == 2:
				mode := []string{"IMMEDIATE", "DEFERRED"}[r.IntN(2)]
				exec(ctx, t, tx, "SET CONSTRAINTS ALL "+mode)
				steps = append(steps, mode)
			case op == 3:
				exec(ctx, t, tx, fmt.Sprintf("SAVEPOINT s%d", len(inserted)))
				inserted = append(inserted, 0)
				steps = append(steps, "savepoint")
			case op == 4 && len(inserted) > 1:
				name := fmt.Sprintf("s%d", len(inserted)-1)
				exec(ctx, t, tx, "ROLLBACK TO SAVEPOINT "+name)
				exec(ctx, t, tx, "RELEASE SAVEPOINT "+name)
				inserted = inserted[:len(inserted)-1]
				steps = append(steps, "rollback to savepoint")
			case op == 5 && len(inserted) > 1:
				exec(ctx, t, tx, fmt.Sprintf("RELEASE SAVEPOINT s%d", len(inserted)-1))
				inserted[len(inserted)-2] += inserted[len(inserted)-1]
				inserted = inserted[:len(inserted)-1]
				steps = append(steps, "release")
			}
		}
		if r.IntN(8) == 0 {
			require.NoError(t, tx.Rollback(ctx))
			steps = append(steps, "ROLLBACK")
		} else {
			require.NoError(t, tx.Commit(ctx), "round %d (seed %d): %v", round, seed, steps)
			for _, n := range inserted {
				committed += n
			}
		}

		total := 0
		for key, states := range placed(ctx, t, d.Pool, keys...) {
			total += len(states)
			want := append([]string{"pending"}, slices.Repeat([]string{"waiting"}, len(states)-1)...)
			require.Equal(t, want, states, "round %d (seed %d), key %s, after %v", round, seed, key, steps)
		}
		require.Equal(t, committed, total, "round %d (seed %d): the committed jobs, after %v", round, seed, steps)
	}
}
