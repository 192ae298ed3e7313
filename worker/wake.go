package worker

import "time"

// WakeAt is how the notifier (internal/worker/notifier) wakes the queue: a
// job became ready at (priority, runAt, id), behind the cursor maybe, so
// the cursor moves back to it before the claim loop looks.
func (p *producer) WakeAt(priority int16, runAt time.Time, id int64) {
	p.cursor.rewind(readyKey{priority: priority, runAt: runAt, id: id})
	signal(p.wake)
}

// WakeFromStart is the notifier's wake-up that names no place, and the one
// after it (re)subscribed, when wake-ups may have been missed: the next
// claim scans from the start.
func (p *producer) WakeFromStart() {
	p.cursor.rewind(fromStart)
	signal(p.wake)
}
