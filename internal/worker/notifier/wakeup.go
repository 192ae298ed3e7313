package notifier

import (
	"encoding/json"
	"time"
)

// wakeup is a notification's payload on the channel hopper_jobs. Go only
// reads it, here; the SQL writes it: the trigger on hopper_jobs
// (hopper_notify_enqueued), Notify (announce), and the control statements
// that cancel jobs, resume queues, and trigger or resume schedules.
// Priority, RunAt and ID place the earliest job announced in claim order; a
// payload without them (sent by hand, by an older schema, or by
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

// parseWakeup reads a notification's payload; ok is false when it is not
// a JSON object of that shape.
func parseWakeup(payload string) (wake wakeup, ok bool) {
	return wake, json.Unmarshal([]byte(payload), &wake) == nil
}

// place is where the wake-up moves the queue's cursor back to: the job's
// (priority, run_at, id) in claim order; ok is false when the payload
// names no place, and the cursor goes back to the start.
func (wake wakeup) place() (priority int16, runAt time.Time, id int64, ok bool) {
	if wake.Priority == nil || wake.RunAt == nil || wake.ID == nil {
		return 0, time.Time{}, 0, false
	}
	return *wake.Priority, *wake.RunAt, *wake.ID, true
}
