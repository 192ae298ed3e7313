package worker

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestResultQueueHandsOverBatchesAndReusesThem(t *testing.T) {
	t.Parallel()
	q := newResultQueue(3)
	jobs := make([]*heldJob, 5)
	for i := range jobs {
		jobs[i] = &heldJob{id: int64(i)}
		require.True(t, q.push(completion{job: jobs[i]}))
	}

	first := q.take()
	require.Len(t, first, 3, "one batch at most")
	second := q.take()
	require.Len(t, second, 2)
	require.Equal(t, jobs[3], second[0].job, "in the order pushed")
	require.Empty(t, q.take())

	// A batch given back is cleared and queues the next results.
	q.recycle(first)
	require.Nil(t, first[0].job, "it no longer holds the jobs it carried")
	require.True(t, q.push(completion{job: jobs[0]}))
	again := q.take()
	require.Len(t, again, 1)
	require.Same(t, &first[0], &again[0], "the batch's room is reused")

	// After close nothing more is queued.
	require.True(t, q.push(completion{job: jobs[1]}))
	require.Len(t, q.close(), 1)
	require.False(t, q.push(completion{job: jobs[2]}))
}
