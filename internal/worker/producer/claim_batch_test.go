package producer

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// countingDB counts the statements sent through it.
type countingDB struct {
	db.DBTX
	statements atomic.Int64
}

func (c *countingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.statements.Add(1)
	return c.DBTX.Query(ctx, sql, args...)
}

func (c *countingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.statements.Add(1)
	return c.DBTX.Exec(ctx, sql, args...)
}

// TestClaimBatch: 40 queues claim at once, again and again, through one
// ClaimBatch: every ask gets its own queue's jobs and no other's, up to its
// count; every job is claimed once; and the asks share statements (fewer
// statements than asks), while a lone ask is one Dequeue.
func TestClaimBatch(t *testing.T) {
	t.Parallel()
	tdb := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	plain := db.New(tdb.Pool)
	const queues, perQueue, rounds = 40, 12, 4
	for i := range queues {
		for range perQueue {
			_, err := plain.Enqueue(ctx, db.EnqueueParams{Queue: fmt.Sprintf("q%02d", i), Kind: "k", Version: 1,
				Payload: json.RawMessage(`{}`), RunAt: time.Now().Add(-time.Second), MaxAttempts: 3})
			require.NoError(t, err)
		}
	}
	counted := &countingDB{DBTX: tdb.Pool}
	b := NewClaimBatch(db.New(counted))
	ask := func(queue string, n int32) db.DequeueParams {
		return db.DequeueParams{Owner: "w", LeaseMs: 60_000, Queue: queue, AfterPriority: -1,
			Kinds: []string{"k"}, MaxVersions: []int32{1}, MaxJobs: n}
	}

	rows, err := b.dequeue(ctx, ask("q00", 1))
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.EqualValues(t, 1, counted.statements.Load(), "a lone ask is one statement")

	claimed := map[int64]string{}
	var mu sync.Mutex
	asks := 0
	for range rounds {
		var wg sync.WaitGroup
		for i := range queues {
			queue := fmt.Sprintf("q%02d", i)
			asks++
			wg.Go(func() {
				rows, err := b.dequeue(ctx, ask(queue, 3))
				require.NoError(t, err)
				require.LessOrEqual(t, len(rows), 3, queue)
				mu.Lock()
				defer mu.Unlock()
				for _, r := range rows {
					require.Equal(t, queue, r.Queue, "an ask gets its own queue's jobs")
					_, twice := claimed[r.ID]
					require.False(t, twice, "job %d claimed twice", r.ID)
					claimed[r.ID] = queue
				}
			})
		}
		wg.Wait()
	}
	require.Len(t, claimed, queues*perQueue-1, "every job claimed once: 3 per ask, the one claimed before excepted")
	statements := counted.statements.Load() - 1
	t.Logf("%d asks in %d statements", asks, statements)
	require.Less(t, statements, int64(asks), "asks made at once share statements")
	b.mu.Lock()
	defer b.mu.Unlock()
	require.False(t, b.leading, "no leader is left once every ask is answered")
	require.Empty(t, b.queued)
}
