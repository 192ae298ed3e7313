package jobs_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

// BenchmarkEnqueue is one Kind.Enqueue on a pool, one round trip each:
// what the library adds around the statement shows in allocs/op.
func BenchmarkEnqueue(b *testing.B) {
	tdb := testdb.New(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := noteKind.Enqueue(ctx, tdb.Pool, Note{Text: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEnqueueMany is one plain EnqueueMany on a pool per size: up to
// MaxInsertBatch jobs one INSERT (one round trip), one job more ids then
// COPY (two). Compare ns/op of the last two sizes: the cost of the round
// trip saved against COPY's cheaper rows.
func BenchmarkEnqueueMany(b *testing.B) {
	tdb := testdb.New(b)
	ctx := context.Background()
	for _, n := range []int{1, 16, jobs.MaxInsertBatch, jobs.MaxInsertBatch + 1} {
		items := make([]jobs.Item[Note], n)
		for i := range items {
			items[i].Payload = Note{Text: "bench"}
		}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := noteKind.EnqueueMany(ctx, tdb.Pool, items); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
