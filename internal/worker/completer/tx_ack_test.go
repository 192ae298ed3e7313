package completer

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFateOfAckTx: the row a handler's AckTx deleted decides, with the
// timelines: gone is committed on any timeline, unless the ack's
// transaction aborted on the ack's timeline (another run ended the job);
// still there is a rollback on the ack's timeline, and a loss in a
// failover on another (only while live: a dead job was moved by someone,
// after a rollback).
func TestFateOfAckTx(t *testing.T) {
	for _, tc := range []struct {
		name       string
		live, dead bool
		ack, now   int32
		status     string
		want       ackTxFate
	}{
		{"gone, same timeline", false, false, 1, 1, "committed", ackTxCommitted},
		{"gone, same timeline, status too old to say", false, false, 1, 1, "", ackTxCommitted},
		{"gone, same timeline, aborted: another run ended it", false, false, 1, 1, "aborted", ackTxUndone},
		{"gone, new timeline: the delete reached the standby", false, false, 1, 2, "committed", ackTxCommitted},
		{"gone, new timeline, aborted: an id of another history, says nothing", false, false, 1, 2, "aborted", ackTxCommitted},
		{"live, same timeline: rolled back, whole or to a savepoint", true, false, 1, 1, "committed", ackTxUndone},
		{"live, same timeline, aborted", true, false, 1, 1, "aborted", ackTxUndone},
		{"dead, same timeline: rolled back, then cancelled or swept", false, true, 1, 1, "aborted", ackTxUndone},
		{"live, new timeline: lost in a failover", true, false, 1, 2, "", ackTxLost},
		{"dead, new timeline: moved since, not ours to run again", false, true, 1, 2, "", ackTxUndone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, fateOfAckTx(tc.live, tc.dead, tc.ack, tc.now, tc.status))
		})
	}
}
