package shard

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/schemascope"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

type cancelPayload struct {
	N int `json:"n"`
}

var cancelKind = jobs.MustDefine[cancelPayload]("shard_cancel_parity")

// oneShard is a Set of one shard, the schema of d: the sharded cancel's
// statements on plain PostgreSQL.
func oneShard(t *testing.T, d *testdb.DB) *Set {
	t.Helper()
	scoped, err := jobs.InSchema(d.Pool, d.Schema)
	require.NoError(t, err)
	return &Set{pool: d.Pool, names: []string{d.Schema}, clients: []*hopper.Client{hopper.NewClient(scoped)},
		scopes: []*schemascope.DB{scoped.(*schemascope.DB)}}
}

// TestCancelMatchesTheClients: on plain PostgreSQL, the Set's cancel (the
// statements Citus plans on one node) leaves a schema exactly as
// hopper.Client's one-statement cancel leaves another given the same
// jobs: the same results, the same dead rows, and the same effects of the
// delete's triggers (a sequence whose head is cancelled, a running job).
func TestCancelMatchesTheClients(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type outcome struct {
		results []hopper.CancelResult
		dead    []string
		live    []string
	}
	run := func(viaSet bool) outcome {
		d := testdb.New(t)
		var ids []int64
		enqueue := func(n int, opts ...jobs.EnqueueOption) {
			res, err := cancelKind.Enqueue(ctx, d.Pool, cancelPayload{N: n}, opts...)
			require.NoError(t, err)
			ids = append(ids, res.ID)
		}
		enqueue(1)
		enqueue(2, jobs.Metadata(jobs.Meta{"tenant": "acme"}), jobs.ConcurrencyKey("acct"), jobs.UniqueKey("u"))
		enqueue(3, jobs.Sequence("ledger"))
		enqueue(4, jobs.Sequence("ledger")) // waits behind 3
		enqueue(5, jobs.Queue("busy"))
		claimed, err := db.New(d.Pool).Dequeue(ctx, db.DequeueParams{
			Owner: "w-1", LeaseMs: 60_000, Queue: "busy", AfterPriority: -1, Kinds: []string{cancelKind.Name()},
			MaxVersions: []int32{int32(cancelKind.Version())}, MaxJobs: 1,
		})
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		enqueue(6)
		_, err = hopper.NewClient(d.Pool).DeleteJob(ctx, ids[5]) // gone: not found
		require.NoError(t, err)
		asked := []int64{ids[4], ids[0], ids[1], ids[2], ids[5], ids[0], 9999}
		var res []hopper.CancelResult
		if viaSet {
			res, err = oneShard(t, d).CancelJobs(ctx, asked...)
		} else {
			res, err = hopper.NewClient(d.Pool).CancelJobs(ctx, asked...)
		}
		require.NoError(t, err)
		again, err := func() ([]hopper.CancelResult, error) { // finished ones are said to be
			if viaSet {
				return oneShard(t, d).CancelJobs(ctx, ids[0])
			}
			return hopper.NewClient(d.Pool).CancelJobs(ctx, ids[0])
		}()
		require.NoError(t, err)
		res = append(res, again...)
		for i := range res {
			if res[i].Err != nil {
				res[i].Err = errorText{res[i].Err.Error()} // compared by text
			}
		}
		return outcome{results: res, dead: rowsOf(t, ctx, d.Pool, `
			SELECT format('%s %s %s %s %s %s %s %s %s %s %s %s', id, queue, kind, version, payload, priority, attempt,
			              max_attempts, unique_key, errors, reason, state) || ' ' || coalesce(meta::text, '-') || ' ' ||
			       coalesce(concurrency_key, '-') || ' ' || (created_at IS NOT NULL) || ' ' || (run_at IS NOT NULL)
			FROM hopper_dead_jobs ORDER BY id`),
			live: rowsOf(t, ctx, d.Pool, `SELECT format('%s %s %s', id, state, queue) FROM hopper_jobs ORDER BY id`)}
	}
	client, set := run(false), run(true)
	require.Equal(t, client.results, set.results)
	require.Equal(t, client.dead, set.dead)
	require.Equal(t, client.live, set.live)
	require.Len(t, client.dead, 4, "four jobs cancelled")
}

type errorText struct{ s string }

func (e errorText) Error() string { return e.s }

func rowsOf(t *testing.T, ctx context.Context, pool *pgxpool.Pool, sql string) []string {
	t.Helper()
	rows, err := pool.Query(ctx, sql)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}
