package failover

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/hacluster"
)

// syncOff is a span in which a node's commits did not wait for its
// standby: pg_auto_failover had assigned or reported it wait_primary (a
// primary without a standby in its quorum, synchronous_standby_names
// emptied). During a user-initiated failover the monitor may do so to the
// old primary for a moment (the standby, preparing its promotion, counts
// as unhealthy), and commits that primary acknowledges then never reach
// the promoted standby.
type syncOff struct {
	node       string
	from, till time.Time // till is zero while it lasts
}

// syncOffSpans reads the spans from the monitor's events, oldest first: a
// span opens at a node's first event naming wait_primary (assigned or
// reported) and closes at its next event naming neither.
func syncOffSpans(events []hacluster.Event) []syncOff {
	var spans []syncOff
	open := map[string]int{} // node → index in spans
	for _, e := range events {
		waiting := e.Reported == "wait_primary" || e.Assigned == "wait_primary"
		i, isOpen := open[e.Node]
		switch {
		case waiting && !isOpen:
			open[e.Node] = len(spans)
			spans = append(spans, syncOff{node: e.Node, from: e.At})
		case !waiting && isOpen:
			spans[i].till = e.At
			delete(open, e.Node)
		}
	}
	return spans
}

// within returns the span that holds at, if any. A commit is
// acknowledged to its client a moment after it happened: a span ends late
// by slack.
func within(spans []syncOff, at time.Time, slack time.Duration) (syncOff, bool) {
	for _, s := range spans {
		if !at.Before(s.from) && (s.till.IsZero() || !at.After(s.till.Add(slack))) {
			return s, true
		}
	}
	return syncOff{}, false
}

func TestSyncOffSpans(t *testing.T) {
	t.Parallel()
	at := func(s float64) time.Time { return time.Unix(1000, 0).Add(time.Duration(s * float64(time.Second))) }
	ev := func(s float64, node, reported, assigned string) hacluster.Event {
		return hacluster.Event{At: at(s), Node: node, Reported: reported, Assigned: assigned}
	}
	// The events of a failover that lost a commit (CI, 2026-12-06), after
	// a formation's start.
	events := []hacluster.Event{
		ev(0, "node1", "single", "wait_primary"),
		ev(0.1, "node1", "wait_primary", "wait_primary"),
		ev(8, "node1", "wait_primary", "primary"),
		ev(8.2, "node1", "primary", "primary"),
		ev(20, "node1", "primary", "draining"),
		ev(20, "node2", "secondary", "prepare_promotion"),
		ev(20.003, "node1", "primary", "wait_primary"),
		ev(20.086, "node1", "wait_primary", "wait_primary"),
		ev(20.089, "node1", "wait_primary", "demote_timeout"),
		ev(25.84, "node1", "demoted", "demoted"),
		ev(26, "node2", "wait_primary", "wait_primary"),
	}
	spans := syncOffSpans(events)
	require.Equal(t, []syncOff{
		{node: "node1", from: at(0), till: at(8.2)},
		{node: "node1", from: at(20.003), till: at(25.84)},
		{node: "node2", from: at(26)},
	}, spans)
	for _, tc := range []struct {
		at   float64
		node string // "" when no span holds it
	}{
		{4, "node1"}, {10, ""}, {20.001, ""}, {20.14, "node1"}, {25.84, "node1"}, {26.2, "node1"}, {26.5, "node2"}, {30, "node2"},
	} {
		s, ok := within(spans, at(tc.at), 500*time.Millisecond)
		require.Equal(t, tc.node != "", ok, "at %v", tc.at)
		require.Equal(t, tc.node, s.node, "at %v", tc.at)
	}
}
