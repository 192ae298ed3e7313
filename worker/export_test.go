package worker

import (
	"context"
	"time"

	"github.com/hopperq/hopper/internal/worker/completer"
)

// ObserveOutcomes makes fn see every result the worker settles, with its
// outcome's name. Set it before Run.
func ObserveOutcomes(w *Worker, fn func(id int64, attempt int32, outcome string)) {
	w.observe = func(id int64, attempt int32, o completer.Outcome) { fn(id, attempt, o.String()) }
}

// HeldClaims is how many claims the worker holds, whose leases its
// heartbeat extends.
func HeldClaims(w *Worker) int {
	if r := w.active.Load(); r != nil {
		return r.held.len()
	}
	return 0
}

// Extensions is how many lease extensions the worker's heartbeat has done
// (its passes over the claims held, every ExtendInterval; not its beats).
func Extensions(w *Worker) int64 {
	if r := w.active.Load(); r != nil {
		return r.heartbeat.Extensions()
	}
	return 0
}

// Listening reports whether the worker's wake-up listener is subscribed
// (its claim cursors are in use only then).
func Listening(w *Worker) bool {
	r := w.active.Load()
	return r != nil && r.notifier.Listening()
}

// CursorAt is where queue's next claim starts: the (priority, run_at, id)
// of the last job it claimed, or priority -1 for the start (and before
// Run has built its queues).
func CursorAt(w *Worker, queue string) (priority int16, runAt time.Time, id int64) {
	r := w.active.Load()
	if r == nil {
		return -1, time.Time{}, 0
	}
	k := r.producers[queue].Cursor()
	return k.Priority, k.RunAt, k.ID
}

// ClaimFinished reports whether the claim (id, attempt) is held with its
// handler returned and its result waiting to be recorded.
func ClaimFinished(w *Worker, id int64, attempt int32) bool {
	r := w.active.Load()
	if r == nil {
		return false
	}
	c := r.held.get(id, attempt)
	return c != nil && c.is(claimFinished)
}

// StorableText and StorableJSON are what the worker stores of a failure's
// message and of a handler's result.
var (
	StorableText = storableText
	StorableJSON = storableJSON
)

// LookAlike makes the workers of this process record host and pid in the
// registry, as a container's replica running as pid 1 would. Call it
// before Run.
func LookAlike(host string, pid int) {
	processIdentity = func() (string, int) { return host, pid }
}

// MoveAckTxTimeline makes the running job's AckTx look as if it had been
// made on another timeline than the server's: the job's row left live
// then reads as a transaction lost in a failover.
func MoveAckTxTimeline(ctx context.Context, jobID int64) error {
	c, err := heldJobFrom(ctx, jobID)
	if err != nil {
		return err
	}
	c.txAck.MoveTimeline(1000)
	return nil
}

// reminderBound is the most reminders an outage can log in elapsed: the
// k-th comes no sooner than the sum of the first k gaps after its start.
func reminderBound(elapsed time.Duration) int {
	k := 0
	for sum := reminderGap(0); sum <= elapsed; sum += reminderGap(k) {
		k++
	}
	return k
}

// OutageReminderBound is reminderBound, for the tests outside the package.
func OutageReminderBound(elapsed time.Duration) int { return reminderBound(elapsed) }
