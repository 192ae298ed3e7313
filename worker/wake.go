package worker

import (
	"encoding/json"
	"time"

	"github.com/hopperq/hopper/internal/worker/producer"
)

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
func (wake wakeup) key() producer.Key {
	if wake.Priority == nil || wake.RunAt == nil || wake.ID == nil {
		return producer.FromStart
	}
	return producer.Key{Priority: *wake.Priority, RunAt: *wake.RunAt, ID: *wake.ID}
}
