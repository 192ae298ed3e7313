package hopper_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// TestKeyLimitsAPI: a key's limit is set, replaced, listed by queue and
// removed; bad input is refused with the matching sentinel; a row written
// with the SQL API's INSERT reads back the same.
func TestKeyLimitsAPI(t *testing.T) {
	b := setup(t)
	c := b.client
	require.NoError(t, c.SetKeyLimit(b.Ctx, "default", "tenant:1", 10))
	require.NoError(t, c.SetKeyLimit(b.Ctx, "default", "tenant:1", 5)) // replaces
	require.NoError(t, c.SetKeyLimit(b.Ctx, "other", "tenant:1", 2))
	_, err := b.Pool.Exec(b.Ctx, `INSERT INTO hopper_key_limits (queue, key, max_running) VALUES ('default', 'tenant:0', 1)
		ON CONFLICT (queue, key) DO UPDATE SET max_running = excluded.max_running, updated_at = now()`)
	require.NoError(t, err)

	all, err := c.ListKeyLimits(b.Ctx, "", 0)
	require.NoError(t, err)
	got := make([]string, len(all))
	for i, l := range all {
		got[i] = l.Queue + " " + l.Key + " " + strings.Repeat("|", l.MaxRunning)
	}
	require.Equal(t, []string{"default tenant:0 |", "default tenant:1 |||||", "other tenant:1 ||"}, got)
	one, err := c.ListKeyLimits(b.Ctx, "other", 0)
	require.NoError(t, err)
	require.Len(t, one, 1)
	require.Equal(t, 2, one[0].MaxRunning)

	had, err := c.DeleteKeyLimit(b.Ctx, "default", "tenant:1")
	require.NoError(t, err)
	require.True(t, had)
	had, err = c.DeleteKeyLimit(b.Ctx, "default", "tenant:1")
	require.NoError(t, err)
	require.False(t, had)

	for _, tc := range []struct {
		name       string
		queue, key string
		n          int
		want       error
	}{
		{"no queue", "", "k", 1, jobs.ErrInvalidQueue},
		{"no key", "default", "", 1, jobs.ErrInvalidConcurrencyKey},
		{"long key", "default", strings.Repeat("k", jobs.MaxConcurrencyKeyLength+1), 1, jobs.ErrInvalidConcurrencyKey},
		{"NUL in key", "default", "a\x00b", 1, jobs.ErrInvalidConcurrencyKey},
		{"zero", "default", "k", 0, hopper.ErrInvalidFilter},
		{"too many", "default", "k", hopper.MaxKeyLimitRunning + 1, hopper.ErrInvalidFilter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, c.SetKeyLimit(b.Ctx, tc.queue, tc.key, tc.n), tc.want)
		})
	}
	_, err = c.ListKeyLimits(b.Ctx, "", hopper.MaxKeysLimit+1)
	require.ErrorIs(t, err, hopper.ErrInvalidFilter)
}
