package worker

import (
	"context"
	"time"

	"github.com/hopperq/hopper/db"
)

// completion is a handler's result, waiting to be recorded.
type completion struct {
	f          *inflight
	ok         bool
	message    string
	backoff    time.Duration
	deadReason string
}

// complete records results in batches: one AckBatch (and, when something
// failed, one NackBatch) per flush, a flush when the batch is full or
// AckFlushInterval old. It returns when w.done is closed and drained.
func (w *Worker) complete() {
	batch := make([]completion, 0, w.cfg.AckBatchSize)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var timeout <-chan time.Time
		if len(batch) > 0 {
			timeout = timer.C
		}
		select {
		case c, ok := <-w.done:
			if !ok {
				w.flush(batch, true)
				return
			}
			if len(batch) == 0 {
				timer.Reset(w.cfg.AckFlushInterval)
			}
			batch = append(batch, c)
			if len(batch) < w.cfg.AckBatchSize {
				continue
			}
		case <-timeout:
		}
		timer.Stop()
		w.flush(batch, false)
		batch = batch[:0]
	}
}

// flush records a batch, retrying while the database is unreachable. A
// result is never reported done before the database said so. On the final
// flush at shutdown it gives up after a while: those jobs' leases then
// expire and the jobs run again.
func (w *Worker) flush(batch []completion, final bool) {
	if len(batch) == 0 {
		return
	}
	var acks db.AckBatchParams
	var nacks db.NackBatchParams
	byClaim := make(map[claimKey]*inflight, len(batch))
	for _, c := range batch {
		byClaim[claimKey{c.f.id, c.f.attempt}] = c.f
		if c.ok {
			acks.Ids = append(acks.Ids, c.f.id)
			acks.Attempts = append(acks.Attempts, c.f.attempt)
			continue
		}
		nacks.Ids = append(nacks.Ids, c.f.id)
		nacks.Attempts = append(nacks.Attempts, c.f.attempt)
		nacks.Messages = append(nacks.Messages, c.message)
		nacks.BackoffsMs = append(nacks.BackoffsMs, c.backoff.Milliseconds())
		nacks.DeadReasons = append(nacks.DeadReasons, c.deadReason)
	}
	deadline := time.Now().Add(w.cfg.LeaseDuration)
	for failures := 0; ; failures++ {
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.LeaseDuration/2)
		err := w.record(ctx, &acks, &nacks, byClaim)
		cancel()
		if err == nil {
			break
		}
		if final && time.Now().After(deadline) {
			w.log.Error("could not record results at shutdown; those jobs run again when their leases expire",
				"jobs", len(acks.Ids)+len(nacks.Ids), "error", err)
			return
		}
		delay := retryDelay(failures + 1)
		w.log.Warn("recording results failed; retrying", "jobs", len(acks.Ids)+len(nacks.Ids), "error", err, "in", delay)
		time.Sleep(delay)
	}
	for _, c := range batch {
		w.inflight.remove(c.f)
	}
}

// record runs the acks and nacks not yet recorded; it empties each list
// once its statement succeeded, so a retry never repeats a done part.
func (w *Worker) record(ctx context.Context, acks *db.AckBatchParams, nacks *db.NackBatchParams, byClaim map[claimKey]*inflight) error {
	if len(acks.Ids) > 0 {
		done, err := w.q.AckBatch(ctx, *acks)
		if err != nil {
			return err
		}
		taken := make(map[claimKey]bool, len(done))
		for _, r := range done {
			taken[claimKey{r.ID, r.Attempt}] = true
		}
		for i, id := range acks.Ids {
			key := claimKey{id, acks.Attempts[i]}
			f := byClaim[key]
			if taken[key] {
				w.metrics.completed(f.queue.name, f.kind)
			} else {
				w.metrics.refused(f.queue.name, f.kind)
				w.log.Warn("ack refused: the lease was lost and the job runs again elsewhere", "job_id", id, "attempt", f.attempt)
			}
		}
		*acks = db.AckBatchParams{}
	}
	if len(nacks.Ids) > 0 {
		rows, err := w.q.NackBatch(ctx, *nacks)
		if err != nil {
			return err
		}
		taken := make(map[claimKey]bool, len(rows))
		for _, r := range rows {
			key := claimKey{r.ID, r.Attempt}
			taken[key] = true
			f := byClaim[key]
			if r.Dead {
				w.metrics.dead(f.queue.name, f.kind)
			} else {
				w.metrics.failed(f.queue.name, f.kind)
			}
		}
		for i, id := range nacks.Ids {
			key := claimKey{id, nacks.Attempts[i]}
			if f := byClaim[key]; !taken[key] {
				w.metrics.refused(f.queue.name, f.kind)
				w.log.Warn("failure not recorded: the lease was lost and the job runs again elsewhere", "job_id", id, "attempt", f.attempt)
			}
		}
		*nacks = db.NackBatchParams{}
	}
	return nil
}
