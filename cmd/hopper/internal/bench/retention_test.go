package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The retention mode at a small size on the shared server: both cases
// remove exactly the expired 24th of the history, the delete leaves a
// dead tuple per row and the drop none. Nothing is judged for speed.
func TestRetentionMode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := sharedServer(ctx, t)
	var log strings.Builder
	r, err := Run(ctx, Config{Mode: "retention", Retention: RetentionOptions{Kept: 48_000}, DatabaseURL: url, Log: &log})
	require.NoError(t, err, log.String())
	require.NotNil(t, r.Retention)
	require.Len(t, r.Retention.Cases, 2)
	del, drop := r.Retention.Cases[0], r.Retention.Cases[1]
	for _, c := range r.Retention.Cases {
		require.Equal(t, int64(2000), c.Expired, c.Name)
		require.Equal(t, c.Expired, c.Removed, "%s removes the expired rows and no other", c.Name)
	}
	require.Equal(t, "delete", del.Name)
	require.Equal(t, 3, del.Statements, "two full batches and the one that finds fewer")
	require.Equal(t, del.Expired, del.DeadTuples, "a dead tuple per deleted row")
	require.Equal(t, "drop", drop.Name)
	require.Equal(t, 1, drop.Statements)
	require.Zero(t, drop.DeadTuples)
	var out bytes.Buffer
	r.Retention.Print(&out)
	require.Contains(t, out.String(), "the delete took")
}
