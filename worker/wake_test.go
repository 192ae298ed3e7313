package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/worker/producer"
)

// TestWakeupPlaces: a wake-up's place in claim order, as the trigger and
// Notify send it; without one (sent by hand, or by the trigger of schema
// version 1) it rewinds to the start.
func TestWakeupPlaces(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 10, 0, 0, 123456000, time.UTC)
	for _, tc := range []struct {
		payload string
		want    producer.Key
		ok      bool
	}{
		{`{"schema":"s","queue":"q","priority":3,"run_at":"2026-11-22T10:00:00.123456+00:00","id":42}`, producer.Key{Priority: 3, RunAt: at, ID: 42}, true},
		{`{"schema":"s","queue":"q","priority":3,"run_at":"2026-11-22T11:00:00.123456+01:00","id":42}`, producer.Key{Priority: 3, RunAt: at, ID: 42}, true},
		{`{"schema":"s","queue":"q"}`, producer.FromStart, true},
		{`{"schema":"s","queue":"q","priority":3}`, producer.FromStart, true},
		{`not json`, producer.FromStart, false},
	} {
		wake, ok := parseWakeup(tc.payload)
		require.Equal(t, tc.ok, ok, tc.payload)
		got := wake.key()
		require.Equal(t, tc.want.Priority, got.Priority, tc.payload)
		require.True(t, tc.want.RunAt.Equal(got.RunAt), tc.payload)
		require.Equal(t, tc.want.ID, got.ID, tc.payload)
	}
}
