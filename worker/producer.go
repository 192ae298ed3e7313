package worker

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/hopperq/hopper/db"
)

// producer is one queue's claim loop state.
type producer struct {
	owner     *Worker
	name      string
	max       int
	running   atomic.Int64  // slots taken: claimed jobs not yet finished or abandoned
	stuck     atomic.Int64  // abandoned handlers still running in this queue's goroutines
	wake      chan struct{} // a wake-up arrived for this queue
	slotFreed chan struct{} // a slot came free
	// dispatch feeds the queue's handler goroutines. They are started as
	// needed and live until Run ends, so a burst of short jobs is served by
	// a few goroutines rather than one new goroutine per job.
	dispatch chan dispatched
	spawned  int // handler goroutines started (claim goroutine only)
	cursor   *scanCursor
	flow     *queueFlow    // nil: no flow control (set as Run starts)
	budget   time.Duration // flow control: the last claim was cut short by a rate limit until then
}

func newProducer(w *Worker, name string, n int) *producer {
	return &producer{owner: w, name: name, max: n, wake: make(chan struct{}, 1), slotFreed: make(chan struct{}, 1),
		dispatch: make(chan dispatched, n), cursor: newScanCursor(w.cfg.FullScanInterval)}
}

// dispatched is a claimed, decoded job on its way to a handler goroutine.
type dispatched struct {
	h       *handler
	row     db.HopperJob
	job     *heldJob
	call    func(context.Context) (json.RawMessage, error) // nil when decoding failed
	timeout time.Duration                                  // the run's timeout; 0: none
	keep    time.Duration                                  // how long its completion is kept; 0: not
	err     error                                          // why decoding failed
	rate    *rateClaim                                     // the claim it came in, under a global rate limit; nil: none
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// fetchLoop claims as many jobs as there are free slots. While work is
// waiting it claims again as soon as a quarter of the slots are free (or
// after a short pause, whatever is free then), so that claims come in
// batches rather than one job per freed slot; an idle queue waits for a
// wake-up or the poll interval.
func (w *Worker) fetchLoop(ctx context.Context, qr *producer) {
	poll := time.NewTimer(w.cfg.PollInterval)
	defer poll.Stop()
	refill := max(1, qr.max/4)
	failures := 0
	for {
		free := qr.max - int(qr.running.Load())
		if free > 0 {
			n, err := w.fetch(ctx, qr, free)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				failures++
				delay := retryDelay(failures)
				w.log.Warn("claim failed; retrying", "queue", qr.name, "error", err, "in", delay)
				if !sleep(ctx, delay) {
					return
				}
				continue
			}
			failures = 0
			if n < free {
				w.awaitWork(ctx, qr, poll) // the queue is drained for now
				continue
			}
		}
		if !awaitSlots(ctx, qr, refill) { // work is waiting
			return
		}
	}
}

// refillPause bounds how long a queue with waiting work holds free slots
// back to claim them in one batch.
const refillPause = 2 * time.Millisecond

// awaitSlots waits until want slots are free, or refillPause has passed and
// at least one is. It returns false when ctx ends.
func awaitSlots(ctx context.Context, qr *producer, want int) bool {
	pause := time.NewTimer(refillPause)
	defer pause.Stop()
	paused := false
	for {
		free := qr.max - int(qr.running.Load())
		if free >= want || (paused && free > 0) {
			return true
		}
		var timeout <-chan time.Time
		if !paused {
			timeout = pause.C
		}
		select {
		case <-ctx.Done():
			return false
		case <-qr.slotFreed:
		case <-timeout:
			paused = true
		}
	}
}

// awaitWork waits for a wake-up or the poll interval.
func (w *Worker) awaitWork(ctx context.Context, qr *producer, poll *time.Timer) {
	if !poll.Stop() {
		select {
		case <-poll.C:
		default:
		}
	}
	next := w.cfg.PollInterval
	if qr.budget > 0 && qr.budget < next {
		next = qr.budget // a rate limit gives budget back then
	}
	poll.Reset(next)
	for {
		select {
		case <-ctx.Done():
			return
		case <-qr.wake:
			return
		case <-poll.C:
			return
		case <-qr.slotFreed: // irrelevant while the queue is drained
		}
	}
}

// dequeue claims up to n jobs of the queue: from the claim cursor on, or,
// under flow control, by the limited claim.
func (w *Worker) dequeue(ctx context.Context, qr *producer, n int, sent time.Time) ([]db.HopperJob, error) {
	if qr.flow != nil {
		rows, wait, err := w.dequeueLimited(ctx, qr, n)
		qr.budget = wait
		return rows, err
	}
	after := qr.cursor.begin(sent, w.notifier.listening.Load())
	rows, err := w.q.Dequeue(ctx, db.DequeueParams{
		Owner:         w.cfg.ID,
		LeaseMs:       w.cfg.LeaseDuration.Milliseconds(),
		Queue:         qr.name,
		AfterPriority: after.priority,
		AfterRunAt:    after.runAt,
		AfterID:       after.id,
		Kinds:         w.kinds,
		MaxVersions:   w.versions,
		MaxJobs:       int32(n),
	})
	if err != nil {
		qr.cursor.failed()
		return nil, err
	}
	qr.cursor.claimed(rows)
	return rows, nil
}

// claimAnswerWait bounds how long a claim waits for its answer, however
// short the lease. A claim that was sent has most likely committed: given
// up on, its jobs stay leased to a worker that does not know them until the
// leases expire and a sweep takes them back, charged an attempt they never
// ran. A late answer is still this worker's to run: the heartbeat extends
// its leases from then on, and a job a sweep took back meanwhile is fenced
// (its handler is cancelled, its result refused). The bound only ends a
// wait on a connection that will never answer.
const claimAnswerWait = 30 * time.Second

// fetch dequeues up to n jobs and starts their handlers.
func (w *Worker) fetch(ctx context.Context, qr *producer, n int) (int, error) {
	// The claim is not cut off by shutdown, only by the shutdown's hard
	// deadline, and it waits long for its answer (claimAnswerWait).
	qctx, cancel := context.WithTimeout(w.hard, claimAnswerWait)
	defer cancel()
	sent := time.Now()
	rows, err := w.dequeue(qctx, qr, n, sent)
	if err != nil {
		return 0, err
	}
	w.metrics.fetched(qr.name, len(rows))
	now := time.Now()
	rates := w.rateClaimsOf(qr, rows)
	for i, row := range rows {
		h := w.handlers[row.Kind]
		keep := h.keepFor(&w.cfg, row.Queue)
		c := w.held.add(w, row, qr, sent, keep)
		w.metrics.claimed(row.Queue, row.Kind, now.Sub(row.RunAt))
		// Decoding here, in one busy goroutine, rather than in the handler
		// goroutine keeps the decoder's deep stack from being grown anew
		// for every job.
		call, timeout, err := h.prepare(row, keep)
		if w.hooked(h) {
			c.view = view(row)
		}
		if timeout == 0 {
			timeout = w.cfg.Timeout
		}
		// Never fewer free handler goroutines than jobs in flight, so a
		// job is never left waiting behind a handler that blocks (an
		// abandoned one included).
		running := int(qr.running.Add(1))
		w.handlerWG.Add(1)
		for qr.spawned-int(qr.stuck.Load()) < running {
			qr.spawned++
			w.poolWG.Add(1)
			go w.handlerLoop(qr)
		}
		// Never blocks: at most max jobs are waiting or running.
		d := dispatched{h: h, row: row, job: c, call: call, timeout: timeout, keep: keep, err: err}
		if rates != nil {
			d.rate = rates[i]
		}
		qr.dispatch <- d
	}
	return len(rows), nil
}
