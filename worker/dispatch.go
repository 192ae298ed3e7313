package worker

import (
	"github.com/hopperq/hopper/internal/worker/executor"
	"github.com/hopperq/hopper/internal/worker/producer"
)

// hand is what a queue's producer hands its claimed jobs to: each is held
// (its slot given back through the producer once it no longer runs), its
// payload decoded, and it goes to the queue's handler goroutines, runners.
func (r *run) hand(runners *executor.Queue[dispatched]) producer.Hand {
	w := r.w
	cfg := &w.cfg
	return func(p *producer.Producer, job producer.Claimed) {
		row := job.Row
		h := w.handlers.of(row.Kind)
		keep := h.keepRow(cfg, row)
		// A keyed job, or one under a shared limit, of a queue under flow
		// control: its result frees its key's slot (heldJob.freeKey).
		keyed := p.Limited() && (row.ConcurrencyKey != nil || w.handlers.sharedOf(row.Kind))
		c := r.held.add(row, p, keyed, job.Sent, keep, h.keyring)
		w.metrics.claimed(row.Queue, row.Kind, job.Answered.Sub(row.RunAt))
		// Decoding here, in the producer's one busy goroutine, rather than
		// in the handler goroutine keeps the decoder's deep stack from
		// being grown anew for every job.
		call, timeout, err := h.prepare(row, keep)
		if r.hooked(h) {
			c.view = view(row)
		}
		if timeout == 0 {
			timeout = cfg.Timeout
		}
		runners.Dispatch(dispatched{h: h, row: row, job: c, call: call, timeout: timeout, keep: keep, err: err, rate: job.Rate})
	}
}
