package worker

import (
	"context"

	"github.com/hopperq/hopper/db"
)

// ackTxFate is what became of the row a handler deleted with AckTx, read
// once the handler returned (AckTxFates). The row decides first: a delete
// undone by rolling back a savepoint leaves the outer transaction
// committed. A row gone is told apart by the transaction's id, on the
// ack's timeline only (the id of a transaction lost in a failover is, on
// the new primary, either in its future or given to another transaction
// since): aborted, another run that took the job since ended it.
type ackTxFate int

// The fates, from 1: the zero value is none of them.
const (
	// ackTxCommitted: the row is gone, in neither the live nor the dead
	// table: the AckTx's delete committed, and the job is done whatever
	// the handler returned afterwards.
	ackTxCommitted ackTxFate = iota + 1
	// ackTxUndone: the row is still there (or was moved to the dead table
	// since) on the timeline the ack was made on: the handler's
	// transaction rolled back, whole or to a savepoint before the ack. The
	// handler's return value decides, as if AckTx had never run.
	ackTxUndone
	// ackTxLost: the row is still live and the server is on another
	// timeline than the one that took the delete: the handler's
	// transaction was lost in a failover. Its effects are gone with it, so
	// the handler's nil proves nothing: the job runs again, uncharged.
	ackTxLost
)

// fateOfAckTx decides from the job's row (live, dead), the timeline the
// ack was made on, the server's timeline now, and the status of the ack's
// transaction (pg_xact_status: "committed", "aborted", "in progress", or
// "" when too old to say).
func fateOfAckTx(live, dead bool, ackTimeline, nowTimeline int32, xactStatus string) ackTxFate {
	switch {
	case live && ackTimeline != nowTimeline:
		return ackTxLost
	case live || dead:
		return ackTxUndone
	case ackTimeline == nowTimeline && xactStatus == "aborted":
		// Gone, but not by this ack: its transaction rolled back, and
		// another run, which took the job meanwhile, ended it.
		return ackTxUndone
	default:
		return ackTxCommitted
	}
}

// readAckTxFates reads the fates of claims whose handlers acked with AckTx
// and whose outcome is not known yet, and settles each claim's flags from
// them: committed (ackCommitted), undone (ackedInTx cleared) or lost
// (ackLost, and ackedInTx cleared). A claim the read could not reach is
// left as it was; the error says so.
func readAckTxFates(ctx context.Context, q *db.Queries, claims []*heldJob) error {
	ids := make([]int64, 0, len(claims))
	var xacts []int64
	for _, c := range claims {
		if c.ackedInTx.Load() && !c.ackCommitted.Load() {
			ids = append(ids, c.id)
			xacts = append(xacts, c.ackXact.Load())
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := q.AckTxFates(ctx, db.AckTxFatesParams{Ids: ids, Xacts: xacts})
	if err != nil {
		return err
	}
	byID := make(map[int64]db.AckTxFatesRow, len(rows))
	for _, r := range rows {
		byID[r.ID] = r
	}
	for _, c := range claims {
		r, ok := byID[c.id]
		if !ok || !c.ackedInTx.Load() || c.ackCommitted.Load() {
			continue
		}
		switch fateOfAckTx(r.Live, r.Dead, c.ackTimeline.Load(), r.Timeline, r.XactStatus) {
		case ackTxCommitted:
			c.ackCommitted.Store(true)
		case ackTxLost:
			c.ackLost.Store(true)
			c.ackedInTx.Store(false)
		case ackTxUndone:
			c.ackedInTx.Store(false)
		}
	}
	return nil
}
