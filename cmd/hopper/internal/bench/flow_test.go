package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMaxInWindow(t *testing.T) {
	t.Parallel()
	at := func(ms int) time.Time { return time.Unix(1_700_000_000, 0).Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name   string
		events []event
		want   int
	}{
		{"none", nil, 0},
		{"one claim", []event{{at(0), 7}}, 7},
		{"a window holds its start, not its end", []event{{at(0), 5}, {at(1000), 5}}, 5},
		{"just inside", []event{{at(0), 5}, {at(999), 5}}, 10},
		{"the busiest window is found wherever it starts", []event{{at(0), 1}, {at(600), 4}, {at(1500), 4}, {at(2600), 9}}, 9},
		{"overlapping windows", []event{{at(0), 3}, {at(400), 3}, {at(900), 3}, {at(1300), 3}}, 9},
		{"unsorted input", []event{{at(900), 3}, {at(0), 3}, {at(1300), 3}, {at(400), 3}}, 9},
		{"same moment", []event{{at(10), 2}, {at(10), 2}, {at(10), 2}}, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, maxInWindow(tc.events, time.Second))
		})
	}
}

func TestTraceLines(t *testing.T) {
	t.Parallel()
	tr := jobTrace{Key: "tenant b", Started: time.Unix(0, 1_700_000_000_123_456_789), Ended: time.Unix(0, 1_700_000_000_125_456_789)}
	got, ok := parseTrace(formatTrace(tr))
	require.True(t, ok)
	require.Equal(t, tr.Key, got.Key)
	require.True(t, tr.Started.Equal(got.Started))
	require.True(t, tr.Ended.Equal(got.Ended))

	got, ok = parseTrace(formatTrace(jobTrace{Started: tr.Started, Ended: tr.Ended}))
	require.True(t, ok, "a job without a key")
	require.Empty(t, got.Key)

	for _, line := range []string{"ready", "completed 5 unconfirmed 0", "job x y z", ""} {
		_, ok := parseTrace(line)
		require.False(t, ok, line)
	}
}

func TestTenantNames(t *testing.T) {
	t.Parallel()
	require.Equal(t, "A", tenant(0))
	require.Equal(t, "K", tenant(10))
	require.Equal(t, "Z", tenant(25))
	require.Equal(t, "T26", tenant(26))
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	ds := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	require.Equal(t, time.Duration(1), percentile(ds, 0))
	require.Equal(t, time.Duration(5), percentile(ds, 50))
	require.Equal(t, time.Duration(9), percentile(ds, 99))
	require.Equal(t, time.Duration(10), percentile(ds, 100))
	require.Zero(t, percentile(nil, 50))
	require.Equal(t, []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}, ds, "the input keeps its order")
}
