package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/hopperq/hopper/db"
)

// wakeups collects jobs that became pending other than by an insert (a
// release, a sweep, a promotion), to announce them to every worker with one
// Notify: their queues wake, and cursors that moved past them move back.
type wakeups struct{ p db.NotifyParams }

func (wk *wakeups) add(queue string, priority int16, runAt time.Time, id int64) {
	wk.p.Queues = append(wk.p.Queues, queue)
	wk.p.Priorities = append(wk.p.Priorities, priority)
	wk.p.RunAts = append(wk.p.RunAts, runAt)
	wk.p.Ids = append(wk.p.Ids, id)
}

// wakeup is a notification's payload: the trigger on hopper_jobs and Notify
// send it. Priority, RunAt and ID place the earliest job announced in claim
// order; a payload without them (sent by hand, by an older schema, or by
// ResumeQueue) rewinds the queue's cursor to the start. The Cancel
// statement sends a notice instead: Cancel and Attempt name a running
// claim an operator cancelled, Owner the worker holding it.
type wakeup struct {
	Schema   string     `json:"schema"`
	Queue    string     `json:"queue"`
	Priority *int16     `json:"priority"`
	RunAt    *time.Time `json:"run_at"`
	ID       *int64     `json:"id"`
	Cancel   *int64     `json:"cancel"`
	Attempt  *int32     `json:"attempt"`
	Owner    string     `json:"owner"`
	// Schedule names a schedule triggered or resumed (TriggerSchedule,
	// ResumeSchedule): the firing loop looks at once.
	Schedule string `json:"schedule"`
}

func parseWakeup(payload string) (wakeup, bool) {
	var wake wakeup
	return wake, json.Unmarshal([]byte(payload), &wake) == nil
}

// key is where the wake-up moves cursors back to.
func (wake wakeup) key() readyKey {
	if wake.Priority == nil || wake.RunAt == nil || wake.ID == nil {
		return fromStart
	}
	return readyKey{priority: *wake.Priority, runAt: *wake.RunAt, id: *wake.ID}
}

// announceFunc sends the wake-ups a pass collected; after names the pass
// (sweep, promotion, release) in the log.
type announceFunc func(ctx context.Context, wk *wakeups, after string)

// announcer sends the wake-ups a pass collected (a sweep, a promotion, a
// release) to every worker, the notifier's included.
type announcer struct {
	q   *db.Queries
	log *slog.Logger
}

// announce sends the wake-ups collected, if any. A failure costs latency
// only: workers poll, and scan from the start periodically.
func (a announcer) announce(ctx context.Context, wk *wakeups, after string) {
	if len(wk.p.Queues) == 0 {
		return
	}
	if err := a.q.Notify(ctx, wk.p); err != nil {
		a.log.Warn("wake-up after "+after+" failed; workers will poll", "error", err)
	}
}
