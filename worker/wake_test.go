package worker

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/metricsum"
	"github.com/hopperq/hopper/internal/worker/notifier"
	"github.com/hopperq/hopper/internal/worker/producer"
)

var (
	_ queue          = (*producer.Producer)(nil)
	_ notifier.Waker = waker{}
)

// fakeQueue records what a waker did to it, in order: the keys it was
// rewound to, and "wake".
type fakeQueue struct{ calls []any }

func (f *fakeQueue) Rewind(k producer.Key) { f.calls = append(f.calls, k) }

func (f *fakeQueue) Wake() { f.calls = append(f.calls, "wake") }

// A wake-up with a place rewinds the queue to the job announced, one
// without a place to the start, each before it wakes the queue.
func TestWakerRewindsThenWakes(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	f := &fakeQueue{}
	waker{f}.WakeAt(5, at, 7)
	waker{f}.WakeFromStart()
	require.Equal(t, []any{producer.Key{Priority: 5, RunAt: at, ID: 7}, "wake", producer.FromStart, "wake"}, f.calls)
}

// The notifier's Metrics are the worker's: ListenerUp sets
// hopper_listener_up.
func TestListenerUpGauge(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	require.NoError(t, err)
	var _ notifier.Metrics = m
	m.ListenerUp(true)
	require.Equal(t, 1.0, metricsum.Sum("hopper_listener_up", reg))
	m.ListenerUp(false)
	require.Equal(t, 0.0, metricsum.Sum("hopper_listener_up", reg))
}
