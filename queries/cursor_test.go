package queries_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
)

// TestClaimSeeksPastClaimedJobs: with a snapshot held open, nothing claimed
// after it can be vacuumed, nor its ready-index entry marked dead, so a
// claim that scans from the start walks every job claimed since. A claim
// from the cursor (just past the last job claimed) reads as many buffers
// after 24,000 claimed jobs as after 4,000. The scan from the start is
// measured too, to show the dead entries are really there.
func TestClaimSeeksPastClaimedJobs(t *testing.T) {
	b := setup(t)
	statements, _ := readStatements(t)
	dequeue := positional(statements["Dequeue"])

	const total, batch = 30_000, 500
	rows := make([]db.EnqueueBatchParams, total)
	for i := range rows {
		rows[i] = db.EnqueueBatchParams{Queue: "default", Kind: "k", Version: 1, Payload: json.RawMessage(`{}`), MaxAttempts: 3}
	}
	_, err := b.Queries.EnqueueBatch(b.Ctx, withIDs(t, b.Queries, rows))
	require.NoError(t, err)

	// The snapshot: a report, an idle-in-transaction session.
	holder, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(b.Ctx) }()
	_, err = holder.Exec(b.Ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
	require.NoError(t, err)
	_, err = holder.Exec(b.Ctx, "SELECT count(*) FROM hopper_jobs")
	require.NoError(t, err)

	after := db.DequeueParams{AfterPriority: -1}
	claimAndAck := func(n int) {
		for done := 0; done < n; done += batch {
			p := after
			p.Queue, p.Kinds, p.MaxVersions, p.MaxJobs, p.Owner, p.LeaseMs = "default", []string{"k"}, []int32{1}, batch, "w", 60_000
			got, err := b.Queries.Dequeue(b.Ctx, p)
			require.NoError(t, err)
			require.Len(t, got, batch)
			ack := db.AckBatchParams{}
			for _, j := range got {
				ack.Ids, ack.Attempts = append(ack.Ids, j.ID), append(ack.Attempts, j.Attempt)
				if j.ID > after.AfterID {
					after.AfterPriority, after.AfterRunAt, after.AfterID = j.Priority, j.RunAt, j.ID
				}
			}
			acked, err := b.Queries.AckBatch(b.Ctx, ack)
			require.NoError(t, err)
			require.Len(t, acked, batch)
		}
	}
	// buffers runs one claim of 100 under EXPLAIN (ANALYZE, BUFFERS) and
	// rolls it back.
	buffers := func(from db.DequeueParams) int {
		tx, err := b.Pool.Begin(b.Ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(b.Ctx) }()
		var plan []struct {
			Plan struct {
				Hit  int `json:"Shared Hit Blocks"`
				Read int `json:"Shared Read Blocks"`
			} `json:"Plan"`
		}
		args := map[string]any{
			"owner": "probe", "lease_ms": int64(60_000), "queue": "default",
			"after_priority": from.AfterPriority, "after_run_at": from.AfterRunAt, "after_id": from.AfterID,
			"max_versions": []int32{1}, "kinds": []string{"k"}, "max_jobs": int32(100),
		}
		require.NoError(t, tx.QueryRow(b.Ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+dequeue.sql, dequeue.args(t, args)...).Scan(&plan))
		return plan[0].Plan.Hit + plan[0].Plan.Read
	}
	fromStart := db.DequeueParams{AfterPriority: -1}

	claimAndAck(4_000)
	cursorEarly, startEarly := buffers(after), buffers(fromStart)
	claimAndAck(20_000)
	cursorLate, startLate := buffers(after), buffers(fromStart)
	t.Logf("claim of 100 after 4,000 / 24,000 claimed jobs: from the cursor %d / %d buffers, from the start %d / %d",
		cursorEarly, cursorLate, startEarly, startLate)

	require.Greater(t, startLate, startEarly+200, "the claimed jobs' entries are still in the index (else this test proves nothing)")
	require.LessOrEqual(t, cursorLate, cursorEarly+20, "a claim from the cursor does not walk the claimed jobs")
}

// paramStatement is a query of queries/ with its sqlc parameters
// (@name::type) numbered for the wire ($n::type), as sqlc numbers them.
type paramStatement struct {
	sql   string
	names []string
}

func positional(sql string) paramStatement {
	var p paramStatement
	index := map[string]int{}
	p.sql = regexp.MustCompile(`@(\w+)::`).ReplaceAllStringFunc(sql, func(m string) string {
		name := m[1 : len(m)-2]
		if _, ok := index[name]; !ok {
			p.names = append(p.names, name)
			index[name] = len(p.names)
		}
		return fmt.Sprintf("$%d::", index[name])
	})
	return p
}

func (p paramStatement) args(t *testing.T, values map[string]any) []any {
	t.Helper()
	out := make([]any, len(p.names))
	for i, name := range p.names {
		v, ok := values[name]
		require.True(t, ok, "no value for parameter %s", name)
		out[i] = v
	}
	return out
}
