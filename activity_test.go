package hopper_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

// TestActivity: the live table's inserts and deletes as PostgreSQL's
// statistics count them, and the rates two readings give; the Tx variant
// reads the same counts in the caller's transaction.
func TestActivity(t *testing.T) {
	b := setup(t)
	before, err := b.client.GetActivity(b.Ctx)
	require.NoError(t, err)
	first := b.enqueue(t, report, "one", jobs.Queue("idle"))
	b.enqueue(t, report, "two", jobs.Queue("idle"))
	err = b.client.CancelJob(b.Ctx, first)
	require.NoError(t, err)

	now := before
	testdb.WaitFor(t, "the statistics collector counts the inserts and the cancel", func() bool {
		now, err = b.client.GetActivity(b.Ctx)
		require.NoError(t, err)
		return now.Enqueued >= before.Enqueued+2 && now.Finished >= before.Finished+1
	})
	enqueued, finished := now.Rates(before)
	require.Greater(t, enqueued, 0.0)
	require.Greater(t, finished, 0.0)
	enqueued, finished = before.Rates(now)
	require.Zero(t, enqueued, "an earlier reading gives no rate")
	require.Zero(t, finished)

	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.Ctx) }()
	inTx, err := b.client.GetActivityTx(b.Ctx, tx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, inTx.Enqueued, now.Enqueued)
	require.GreaterOrEqual(t, inTx.Finished, now.Finished)
}
