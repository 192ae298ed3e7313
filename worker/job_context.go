package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/migrated"
	"github.com/hopperq/hopper/internal/worker/commitfate"
	"github.com/hopperq/hopper/internal/worker/completer"
	"github.com/hopperq/hopper/internal/worker/detached"
	"github.com/hopperq/hopper/jobs"
)

// heldJobKey is the context key under which a handler's context carries
// its *heldJob (run.call), for the job's own calls (ExtendLease, AckTx).
type heldJobKey struct{}

func heldJobFrom(ctx context.Context, id int64) (*heldJob, error) {
	c, ok := ctx.Value(heldJobKey{}).(*heldJob)
	if !ok || c.id != id {
		return nil, fmt.Errorf("no running job %d in this context: pass the handler's context", id)
	}
	return c, nil
}

// ExtendLease makes the lease of the job the handler is running last at
// least d from now, for a step the handler knows will be long. The
// worker's own lease extension (every ExtendInterval) never shortens it:
// the lease holds until the handler finishes or d has passed, whichever is
// first. It returns ErrLeaseLost,
// and cancels the handler's context, when the job is no longer this
// worker's. An extension whose commit's outcome is unknown (the
// connection broke during its commit) is sent once more; when that one's
// is unknown too, it returns ErrCommitUnknown: the lease may or may not
// have been extended.
func ExtendLease[T any](ctx context.Context, job *jobs.Job[T], d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("extend lease of job %d: %w: non-positive duration %v", job.ID, ErrInvalidConfig, d)
	}
	if r := detached.From(ctx); r != nil { // hoppertest.Work: no lease to extend
		r.ExtendLease(d)
		return nil
	}
	c, err := heldJobFrom(ctx, job.ID)
	if err != nil {
		return err
	}
	if c.txAck.Made() {
		return nil // its row is the handler's own (AckTx): locked by its transaction, or gone with it
	}
	// The row may be locked for a moment by the lease extension's Extend or
	// an ack in flight (Extend skips locked rows rather than wait): try
	// again a few times before calling it busy. An extension whose
	// commit's outcome is unknown is sent once more: it never shortens a
	// lease, so a second one changes nothing if the first took effect.
	resent := false
	for try := 0; ; try++ {
		n, err := c.held.extend(ctx, []*heldJob{c}, d)
		switch {
		case err != nil && commitfate.Unknown(err) && !resent && ctx.Err() == nil:
			resent = true
			try--
			continue
		case err != nil && commitfate.Unknown(err):
			return fmt.Errorf("extend lease of job %d: %w: %w", job.ID, ErrCommitUnknown, err)
		case err != nil:
			return fmt.Errorf("extend lease of job %d: %w", job.ID, err)
		case c.is(claimLost):
			return fmt.Errorf("extend lease of job %d: %w", job.ID, ErrLeaseLost)
		case n == 1:
			return nil
		case try == 7 || !sleep(ctx, time.Duration(5<<try)*time.Millisecond): // about 1.3s in all
			return fmt.Errorf("extend lease of job %d: %w", job.ID, ErrLeaseBusy)
		}
	}
}

// AckTx acknowledges the running job inside the handler's own transaction
// tx, so the job's effects and its completion commit together, or roll
// back together. The worker counts the job completed only once it has
// seen that the transaction committed; after a rollback the job takes the
// normal path: the handler's return value decides (nil acks it as usual,
// an error retries it). Where the kind keeps history, the job is kept by
// this same statement, without a result (a HandleWithResult handler's
// return value is not stored after an AckTx). It returns ErrLeaseLost
// when the job is no longer this worker's, ErrCancelled when an operator
// cancelled it: roll back then. The acknowledgement of a job of a sequence
// or a workflow passes its turn in triggers that need a fresh snapshot per
// statement, so tx must be READ COMMITTED for those: under REPEATABLE READ
// or SERIALIZABLE it returns ErrIsolation (jobs.ErrIsolation) and writes
// nothing. Roll back then, or do the work under READ COMMITTED; a handler
// that returns nil without AckTx lets the worker acknowledge the job.
func AckTx[T any](ctx context.Context, tx jobs.DBTX, job *jobs.Job[T]) error {
	if r := detached.From(ctx); r != nil { // hoppertest.Work: no row to delete
		if tx == nil {
			return fmt.Errorf("ack job %d in transaction: nil transaction", job.ID)
		}
		r.AckTx(tx)
		return nil
	}
	c, err := heldJobFrom(ctx, job.ID)
	if err != nil {
		return err
	}
	q := db.New(c.held.dbtx(tx))
	matched, err := completer.AckInTx(ctx, q, c, c.keep)
	if err != nil {
		return fmt.Errorf("ack job %d in transaction: %w", job.ID, migrated.Explain(err, tx))
	}
	if !matched {
		cause := ErrLeaseLost
		if c.is(claimCancelled) {
			cause = ErrCancelled
		}
		return fmt.Errorf("ack job %d in transaction: %w", job.ID, cause)
	}
	// Once the handler returns, the worker reads whether the row is gone
	// (AckTxFates); the timeline tells a row left by a rollback from one
	// left by a failover that lost this transaction, and the transaction's
	// id a row this transaction deleted from one another run deleted after
	// it rolled back.
	mark, err := q.AckTxMark(ctx)
	if err != nil {
		return fmt.Errorf("ack job %d in transaction: %w", job.ID, err)
	}
	c.txAck.Mark(mark.Timeline, mark.Xact)
	return nil
}
