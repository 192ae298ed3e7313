package completer

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestResultQueueHandsOverBatchesAndReusesThem(t *testing.T) {
	t.Parallel()
	q := newResultQueue(3)
	jobs := make([]*testJob, 5)
	for i := range jobs {
		jobs[i] = &testJob{id: int64(i)}
		require.True(t, q.push(Completion{Job: jobs[i]}))
	}

	first := q.take()
	require.Len(t, first, 3, "one batch at most")
	second := q.take()
	require.Len(t, second, 2)
	require.Equal(t, Job(jobs[3]), second[0].Job, "in the order pushed")
	require.Empty(t, q.take())

	// A batch given back is cleared and queues the next results.
	q.recycle(first)
	require.Nil(t, first[0].Job, "it no longer holds the jobs it carried")
	require.True(t, q.push(Completion{Job: jobs[0]}))
	again := q.take()
	require.Len(t, again, 1)
	require.Same(t, &first[0], &again[0], "the batch's room is reused")

	// After close nothing more is queued.
	require.True(t, q.push(Completion{Job: jobs[1]}))
	require.Len(t, q.close(), 1)
	require.False(t, q.push(Completion{Job: jobs[2]}))
}
