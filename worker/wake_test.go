package worker

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/metricsum"
	"github.com/hopperq/hopper/internal/worker/notifier"
)

var _ notifier.Waker = (*producer)(nil)

// A producer is the notifier's Waker: a wake-up with a place moves its
// cursor back to just before the job announced, one without a place back
// to the start, and both signal its claim loop.
func TestProducerWakes(t *testing.T) {
	t.Parallel()
	p := &producer{name: "default", wake: make(chan struct{}, 1), cursor: newScanCursor(time.Hour)}
	far := readyKey{priority: 100, runAt: time.Now(), id: 1 << 40}
	p.cursor.pos = far
	woken := func(what string) {
		t.Helper()
		select {
		case <-p.wake:
		default:
			t.Fatalf("not signalled: %s", what)
		}
	}

	at := time.Now()
	p.WakeAt(5, at, 7)
	woken("a wake-up with a place")
	require.Equal(t, readyKey{priority: 5, runAt: at, id: 7}.justBefore(), p.cursor.at())
	p.WakeFromStart()
	woken("a wake-up from the start")
	require.Equal(t, fromStart, p.cursor.at())
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
