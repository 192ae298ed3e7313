package worker

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testdb"
)

// passBed is a test schema for one maintenance service, driven directly:
// its statements, an announcer that records what each pass announced, and
// helpers that enqueue and claim.
type passBed struct {
	t         *testing.T
	ctx       context.Context
	tdb       *testdb.DB
	q         *db.Queries
	log       *slog.Logger
	metrics   *metrics
	announcer announcer

	mu        sync.Mutex
	announced map[string][]int64 // by the pass that announced: the ids
}

func newPassBed(t *testing.T) *passBed {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	tdb := testdb.New(t)
	met, err := newMetrics(nil)
	require.NoError(t, err)
	b := &passBed{t: t, ctx: ctx, tdb: tdb, q: db.New(tdb.Pool), log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		metrics: met, announced: map[string][]int64{}}
	b.announcer = announcer{q: b.q, log: b.log}
	return b
}

// announce records what a pass announced, then sends it.
func (b *passBed) announce(ctx context.Context, wk *wakeups, after string) {
	b.mu.Lock()
	b.announced[after] = append(b.announced[after], wk.p.Ids...)
	b.mu.Unlock()
	b.announcer.announce(ctx, wk, after)
}

func (b *passBed) sawAnnounced(after string) []int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.announced[after]
}

func (b *passBed) enqueue(runAt time.Time) int64 {
	b.t.Helper()
	r, err := b.q.Enqueue(b.ctx, db.EnqueueParams{Queue: "default", Kind: "k", Version: 1,
		Payload: json.RawMessage(`{}`), RunAt: runAt, MaxAttempts: 3})
	require.NoError(b.t, err)
	return r.ID
}

func (b *passBed) claim(owner string, leaseMs int64) []db.HopperJob {
	b.t.Helper()
	rows, err := b.q.Dequeue(b.ctx, db.DequeueParams{Owner: owner, LeaseMs: leaseMs, Queue: "default",
		AfterPriority: -1, Kinds: []string{"k"}, MaxVersions: []int32{1}, MaxJobs: 10})
	require.NoError(b.t, err)
	return rows
}

func (b *passBed) state(id int64) string {
	b.t.Helper()
	j, err := b.q.GetJob(b.ctx, id)
	require.NoError(b.t, err)
	return j.State
}

// Every periodic service waits a jittered interval before each pass (never
// at once, within ±25%), and returns once its context ends, mid-wait.
func TestEveryJittered(t *testing.T) {
	t.Parallel()
	for range 1000 {
		d := jittered(time.Second)
		require.GreaterOrEqual(t, d, 750*time.Millisecond)
		require.Less(t, d, 1250*time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	passes := make(chan struct{}, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		everyJittered(ctx, time.Millisecond, func(context.Context) { passes <- struct{}{} })
	}()
	for range 3 {
		<-passes
	}
	cancel()
	<-done
	stopped := len(passes)
	everyJittered(ctx, time.Millisecond, func(context.Context) { t.Fatal("a pass after the context ended") })
	require.Equal(t, stopped, len(passes))
}
