package completer

import (
	"context"
	"sync/atomic"

	"github.com/hopperq/hopper/db"
)

// TxAck is what a handler's AckTx left on its claim: the row it deleted
// in the handler's own transaction, and, once read (ReadTxAcks), what
// became of that delete. The worker marks it; the completer reads it
// before it decides the result's outcome.
type TxAck struct {
	made     atomic.Bool  // AckTx deleted the row in the handler's transaction
	timeline atomic.Int32 // the server's timeline when it did
	xact     atomic.Int64 // and the id of the handler's transaction
	// committed: the job's row was found gone after the handler's AckTx
	// (AckTxFates): the job is done, whatever the handler returned
	// afterwards.
	committed atomic.Bool
	// lost: the row was found still live on a new timeline: the handler's
	// AckTx transaction was lost in a failover, and the job runs again,
	// uncharged.
	lost atomic.Bool
}

// Mark records that AckTx deleted the claim's row in the handler's
// transaction xact, on the server's timeline.
func (a *TxAck) Mark(timeline int32, xact int64) {
	a.timeline.Store(timeline)
	a.xact.Store(xact)
	a.made.Store(true)
}

// Made reports whether the handler's AckTx deleted the row and no read
// since found that delete undone (rolled back, or lost in a failover).
func (a *TxAck) Made() bool { return a.made.Load() }

// Committed reports whether the row was found gone after the handler's
// AckTx: the job is done.
func (a *TxAck) Committed() bool { return a.committed.Load() }

// Lost reports whether the handler's AckTx transaction was found lost in
// a failover: the job runs again, uncharged.
func (a *TxAck) Lost() bool { return a.lost.Load() }

// MoveTimeline makes the ack look made on another timeline than the
// server's, as after a failover: tests make a lost transaction with it.
func (a *TxAck) MoveTimeline(by int32) { a.timeline.Add(by) }

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

// ReadTxAcks reads the fates of claims whose handlers acked with AckTx
// and whose outcome is not known yet, and settles each claim's TxAck from
// them: committed, undone (no longer Made) or lost (and no longer Made).
// A claim the read could not reach is left as it was; the error says so.
func ReadTxAcks(ctx context.Context, q *db.Queries, claims []Job) error {
	ids := make([]int64, 0, len(claims))
	var xacts []int64
	for _, c := range claims {
		if a := c.TxAck(); a.Made() && !a.Committed() {
			ids = append(ids, c.ID())
			xacts = append(xacts, a.xact.Load())
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
		r, ok := byID[c.ID()]
		a := c.TxAck()
		if !ok || !a.Made() || a.Committed() {
			continue
		}
		switch fateOfAckTx(r.Live, r.Dead, a.timeline.Load(), r.Timeline, r.XactStatus) {
		case ackTxCommitted:
			a.committed.Store(true)
		case ackTxLost:
			a.lost.Store(true)
			a.made.Store(false)
		case ackTxUndone:
			a.made.Store(false)
		}
	}
	return nil
}
