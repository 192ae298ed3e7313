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

// Wake has the claim loops of the queues named look for work now, from
// the start of their claim order, as a wake-up on hopper_jobs that names
// no place does; with no queue named, every queue the worker serves. It
// is for the wake-ups the worker cannot hear: package shard's worker
// calls it after an acknowledgement in a shard, whose functions send no
// NOTIFY (a sequence's next job, a workflow's next step). Before Run, and
// for a queue the worker does not serve, it does nothing.
func (w *Worker) Wake(queues ...string) {
	r := w.active.Load()
	if r == nil {
		return
	}
	if len(queues) == 0 {
		for _, p := range r.producers {
			waker{p}.WakeFromStart()
		}
		return
	}
	for _, name := range queues {
		if p, ok := r.producers[name]; ok {
			waker{p}.WakeFromStart()
		}
	}
}
