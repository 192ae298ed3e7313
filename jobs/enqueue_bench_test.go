package jobs_test

import (
	"context"
	"testing"

	"github.com/hopperq/hopper/internal/testdb"
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
