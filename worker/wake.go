package worker

import (
	"time"

	"github.com/hopperq/hopper/internal/worker/producer"
)

// queue is a queue's producer as a wake-up moves it: Rewind moves its scan
// cursor back so that the job at a key is claimed again, Wake has its claim
// loop look for work now.
type queue interface {
	Rewind(producer.Key)
	Wake()
}

// waker is a queue as the notifier (internal/worker/notifier) wakes it:
// the two packages know nothing of each other, and the wake-up's place
// becomes the producer's Key here.
type waker struct{ q queue }

// WakeAt: a job became ready at (priority, runAt, id), behind the cursor
// maybe, so the cursor moves back to it before the claim loop looks.
func (w waker) WakeAt(priority int16, runAt time.Time, id int64) {
	w.q.Rewind(producer.Key{Priority: priority, RunAt: runAt, ID: id})
	w.q.Wake()
}

// WakeFromStart: a wake-up that names no place, or the notifier
// (re)subscribed and wake-ups may have been missed: the next claim scans
// from the start.
func (w waker) WakeFromStart() {
	w.q.Rewind(producer.FromStart)
	w.q.Wake()
}
