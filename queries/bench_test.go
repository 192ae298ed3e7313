package queries_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// The hot paths, per job, at a batch of 1000 (make bench-go; compare runs
// with benchstat). Each includes the round trip to a local PostgreSQL.

const benchBatch = 1000

func benchSetup(b *testing.B, n int) (context.Context, *db.Queries) {
	b.Helper()
	ctx, q, _ := benchSetupPool(b, n)
	return ctx, q
}

// benchSetupPool is benchSetup that also returns the scratch schema's
// pool.
func benchSetupPool(b *testing.B, n int) (context.Context, *db.Queries, *pgxpool.Pool) {
	b.Helper()
	ctx := context.Background()
	tdb := testdb.New(b)
	q := db.New(tdb.Pool)
	rows := make([]db.EnqueueBatchParams, n)
	for i := range rows {
		rows[i] = db.EnqueueBatchParams{Queue: "default", Kind: "k", Version: 1, Payload: json.RawMessage(`{"user_id":42}`), MaxAttempts: 5}
	}
	for start := 0; start < n; start += 50_000 {
		if _, err := q.EnqueueBatch(ctx, withIDs(b, q, rows[start:min(start+50_000, n)])); err != nil {
			b.Fatal(err)
		}
	}
	return ctx, q, tdb.Pool
}

func dequeue(ctx context.Context, b *testing.B, q *db.Queries, n int) []db.HopperJob {
	jobs, err := q.Dequeue(ctx, db.DequeueParams{Queue: "default", Kinds: []string{"k"}, MaxVersions: []int32{1}, MaxJobs: int32(n), Owner: "bench", LeaseMs: 60_000})
	if err != nil {
		b.Fatal(err)
	}
	return jobs
}

func BenchmarkEnqueueBatchCopy(b *testing.B) {
	ctx, q := benchSetup(b, 0)
	rows := make([]db.EnqueueBatchParams, benchBatch)
	for i := range rows {
		rows[i] = db.EnqueueBatchParams{Queue: "default", Kind: "k", Version: 1, Payload: json.RawMessage(`{"user_id":42}`), MaxAttempts: 5}
	}
	b.ResetTimer()
	for done := 0; done < b.N; done += benchBatch {
		if _, err := q.EnqueueBatch(ctx, withIDs(b, q, rows[:min(benchBatch, b.N-done)])); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDequeue(b *testing.B) {
	ctx, q := benchSetup(b, b.N)
	b.ResetTimer()
	for done := 0; done < b.N; {
		done += len(dequeue(ctx, b, q, min(benchBatch, b.N-done)))
	}
}

func BenchmarkAckBatch(b *testing.B) {
	ctx, q := benchSetup(b, b.N)
	var claims []db.AckBatchParams
	for done := 0; done < b.N; {
		jobs := dequeue(ctx, b, q, min(benchBatch, b.N-done))
		p := db.AckBatchParams{}
		for _, j := range jobs {
			p.Ids = append(p.Ids, j.ID)
			p.Attempts = append(p.Attempts, j.Attempt)
		}
		claims = append(claims, p)
		done += len(jobs)
	}
	b.ResetTimer()
	for _, p := range claims {
		if _, err := q.AckBatch(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAckBatchKeep is BenchmarkAckBatch for a kind that keeps its
// completed jobs in the history: the same delete, plus the copy.
func BenchmarkAckBatchKeep(b *testing.B) {
	ctx, q := benchSetup(b, b.N)
	var claims []db.AckBatchKeepParams
	for done := 0; done < b.N; {
		jobs := dequeue(ctx, b, q, min(benchBatch, b.N-done))
		p := db.AckBatchKeepParams{}
		for _, j := range jobs {
			p.Ids = append(p.Ids, j.ID)
			p.Attempts = append(p.Attempts, j.Attempt)
			p.KeepMs = append(p.KeepMs, 3_600_000)
			p.Results = append(p.Results, nil)
		}
		claims = append(claims, p)
		done += len(jobs)
	}
	b.ResetTimer()
	for _, p := range claims {
		if _, err := q.AckBatchKeep(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
}
