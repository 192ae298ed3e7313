package worker

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

// A producer's fetch, driven directly: it claims at most what it is asked
// for, in ready order, holds each job, takes a slot for it, moves its scan
// cursor past the last one and dispatches it to a handler goroutine; a
// fetch with nothing ready claims nothing and leaves the cursor alone.
func TestProducerFetch(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tdb := testdb.New(t)
	w, err := New(tdb.Pool, Config{Queues: map[string]int{"default": 10}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	release := make(chan struct{})
	started := make(chan int64, 10)
	type task struct{}
	require.NoError(t, Handle(w, jobs.MustDefine[task]("producer-test"), func(ctx context.Context, j *jobs.Job[task]) error {
		started <- j.ID
		<-release
		return nil
	}))
	r := newTestRun(t, ctx, w)
	r.listening.Store(true) // wake-ups would reach the cursor: it may be used

	var ids []int64
	base := time.Now().Add(-time.Minute)
	for i := range 3 {
		r, err := w.q.Enqueue(ctx, db.EnqueueParams{Queue: "default", Kind: "producer-test", Version: 1,
			Payload: json.RawMessage(`{}`), RunAt: base.Add(time.Duration(i) * time.Second), MaxAttempts: 3})
		require.NoError(t, err)
		ids = append(ids, r.ID)
	}

	p := r.producers["default"]
	n, err := p.fetch(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, 2, n, "no more than asked for")
	require.Equal(t, 2, r.held.len())
	require.EqualValues(t, 2, p.running.Load(), "a slot per job")
	require.Equal(t, ids[1], p.cursor.at().id, "the cursor is past the last job claimed")
	got := map[int64]bool{<-started: true, <-started: true}
	require.Equal(t, map[int64]bool{ids[0]: true, ids[1]: true}, got, "the first two in ready order run")

	n, err = p.fetch(ctx, 5)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, ids[2], <-started)
	at := p.cursor.at()
	n, err = p.fetch(ctx, 5)
	require.NoError(t, err)
	require.Zero(t, n, "nothing left")
	require.Equal(t, at, p.cursor.at(), "an empty claim leaves the cursor")

	close(release)
	p.runners.close()
	r.executor.poolWG.Wait()
	require.Zero(t, p.running.Load(), "every slot given back")
}
