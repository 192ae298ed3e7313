package queries_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
)

// TestQueueDepthsReadsBoundedRanges: QueueDepths examines at most its scan
// limit of entries per count, however many jobs the table holds and
// whatever the statistics say of them (taken on an empty table, or on the
// full one), with custom and generic plans: a producer may poll it several
// times a second.
func TestQueueDepthsReadsBoundedRanges(t *testing.T) {
	const scan = 101 // a limit of 100
	// 40,000 ready jobs in "big", 10,000 scheduled and 10,000 running in
	// "other", and a few of each in "small".
	const load = `INSERT INTO hopper_jobs (queue, kind, payload, state, priority, run_at, lease_owner, lease_until)
		SELECT CASE WHEN g % 1000 = 0 THEN 'small' WHEN g % 6 < 4 THEN 'big' ELSE 'other' END, 'k',
		       jsonb_build_object('n', g, 'pad', repeat('x', 64)),
		       CASE WHEN g % 6 < 4 THEN 'pending' WHEN g % 6 = 4 THEN 'scheduled' ELSE 'running' END,
		       g % 3,
		       CASE WHEN g % 6 = 4 THEN now() + interval '1 day' ELSE now() - interval '1 minute' END,
		       CASE WHEN g % 6 = 5 THEN 'w' END,
		       CASE WHEN g % 6 = 5 THEN now() + interval '1 hour' END
		FROM generate_series(1, 60000) AS g`
	for _, st := range []struct{ name, before, after string }{
		{name: "statistics of an empty table", after: load},
		{name: "statistics of the full table", before: load},
	} {
		t.Run(st.name, func(t *testing.T) {
			b := setup(t)
			for _, stmt := range []string{
				"ALTER TABLE hopper_jobs SET (autovacuum_enabled = off)",
				"ALTER TABLE hopper_jobs DISABLE TRIGGER hopper_jobs_notify_enqueued",
				st.before,
				"ANALYZE hopper_jobs",
				st.after,
			} {
				if stmt != "" {
					_, err := b.Pool.Exec(b.Ctx, stmt)
					require.NoError(t, err, stmt)
				}
			}
			for _, queues := range [][]string{{"big"}, {"small", "other"}, {}} {
				var c capture
				_, err := db.New(&c).QueueDepths(b.Ctx, db.QueueDepthsParams{Queues: queues, ScanLimit: scan})
				require.ErrorIs(t, err, errCaptured)
				for _, generic := range []bool{false, true} {
					root := b.explainDepth(t, c, generic)
					var examined int64
					root.walk(func(n *planNode) {
						if n.RelationName == "hopper_jobs" && strings.Contains(n.NodeType, "Scan") {
							examined += int64((n.ActualRows + n.RemovedByFilter) * max(n.ActualLoops, 1))
						}
					})
					t.Logf("queues %v, generic %v: %d rows examined, %d buffers; plan: %s", queues, generic, examined, root.blocks(), root.describe())
					// ready per queue, scheduled and running once, oldest
					// ready 10 per queue, the skip scan 1 per queue.
					perQueue := int64(scan + 10 + 1)
					require.LessOrEqual(t, examined, 2*scan+int64(max(len(queues), 3))*perQueue,
						"QueueDepths(%v) examined rows in proportion to the table (60,000 jobs), not to its scan limit: %s", queues, root.describe())
				}
			}

			// And the counts are right.
			got, err := b.Queries.QueueDepths(b.Ctx, db.QueueDepthsParams{Queues: []string{"big", "small"}, ScanLimit: scan})
			require.NoError(t, err)
			require.Len(t, got, 2)
			require.Equal(t, db.QueueDepthsRow{Queue: "big", Ready: scan, ScheduledScanned: scan, RunningScanned: scan},
				withoutAge(got[0]))
			require.Equal(t, "small", got[1].Queue)
			require.Equal(t, int64(scan), got[1].ScheduledScanned)
			require.Positive(t, got[1].Ready)
		})
	}
}

// TestQueueDepthsContract: the clauses that bound QueueDepths' reads are
// there (TestRuntimeContract's check, for this statement).
func TestQueueDepthsContract(t *testing.T) {
	t.Parallel()
	sqlByName, cmdByName := readStatements(t)
	require.Equal(t, ":many", cmdByName["QueueDepths"])
	for _, frag := range []string{
		"limit @scan_limit::integer) as r",
		"where j.state = 'scheduled' order by j.run_at limit @scan_limit::integer",
		"where j.state = 'running' order by j.lease_until limit @scan_limit::integer",
	} {
		require.Contains(t, sqlByName["QueueDepths"], normalise(frag),
			"QueueDepths lost %q: producers poll a queue's depth, and every count must read a bounded range of its index, not the table", frag)
	}
}

func withoutAge(r db.QueueDepthsRow) db.QueueDepthsRow {
	r.OldestReadySeconds = 0
	return r
}

// explainDepth runs the captured statement under EXPLAIN (ANALYZE,
// BUFFERS, FORMAT JSON), with a custom or a generic plan.
func (b *bundle) explainDepth(t *testing.T, c capture, generic bool) *planNode {
	t.Helper()
	conn, err := b.Pool.Acquire(b.Ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(b.Ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.Ctx) }()
	mode := "force_custom_plan"
	if generic {
		mode = "force_generic_plan"
	}
	_, err = tx.Exec(b.Ctx, "SET LOCAL jit = off")
	require.NoError(t, err)
	_, err = tx.Exec(b.Ctx, "SET LOCAL plan_cache_mode = "+mode)
	require.NoError(t, err)
	var out []byte
	require.NoError(t, tx.QueryRow(b.Ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+c.sql, c.args...).Scan(&out))
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(out, &plans))
	require.Len(t, plans, 1)
	return &plans[0].Plan
}
