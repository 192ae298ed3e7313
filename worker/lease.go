package worker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
)

// The life of a claim inside the worker.
const (
	stateRunning  int32 = iota // the handler runs
	stateFinished              // the handler returned; its ack or nack is on its way
	stateLost                  // the lease was lost: the result will be discarded
	stateReleased              // given back at shutdown: the result will be discarded
)

// inflight is one claim this worker holds, from claim until its ack or nack
// is recorded (so the heartbeat keeps extending it until then).
type inflight struct {
	id        int64
	attempt   int32
	kind      string
	queue     *queueRunner
	state     atomic.Int32
	ackedInTx atomic.Bool

	mu     sync.Mutex
	cancel context.CancelCauseFunc
}

func (f *inflight) setCancel(cancel context.CancelCauseFunc) {
	f.mu.Lock()
	f.cancel = cancel
	f.mu.Unlock()
}

func (f *inflight) cancelWith(cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancel != nil {
		f.cancel(cause)
	}
}

type inflightKey struct{}

// claimKey names one claim: a worker that lost a job may claim it again.
type claimKey struct {
	id      int64
	attempt int32
}

type inflightSet struct {
	mu   sync.Mutex
	jobs map[claimKey]*inflight
}

func (s *inflightSet) add(row db.HopperJob, qr *queueRunner) *inflight {
	f := &inflight{id: row.ID, attempt: row.Attempt, kind: row.Kind, queue: qr}
	s.mu.Lock()
	s.jobs[claimKey{row.ID, row.Attempt}] = f
	s.mu.Unlock()
	return f
}

func (s *inflightSet) remove(f *inflight) {
	s.mu.Lock()
	delete(s.jobs, claimKey{f.id, f.attempt})
	s.mu.Unlock()
}

func (s *inflightSet) snapshot() []*inflight {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*inflight, 0, len(s.jobs))
	for _, f := range s.jobs {
		out = append(out, f)
	}
	return out
}

// markReleased moves every running claim to released, so that a handler
// finishing later cannot queue a result, and returns the claims it moved.
func (s *inflightSet) markReleased() []*inflight {
	var moved []*inflight
	for _, f := range s.snapshot() {
		if f.state.CompareAndSwap(stateRunning, stateReleased) {
			moved = append(moved, f)
		}
	}
	return moved
}

// takeReleased removes and returns the released claims.
func (s *inflightSet) takeReleased() []*inflight {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*inflight
	for key, f := range s.jobs {
		if f.state.Load() == stateReleased {
			out = append(out, f)
			delete(s.jobs, key)
		}
	}
	return out
}

// extendBatch bounds one Extend statement.
const extendBatch = 5000

// heartbeat extends the leases of every claim this worker holds. A claim
// the database no longer has for us is lost: its handler is cancelled.
func (w *Worker) heartbeat(ctx context.Context) {
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		held := w.inflight.snapshot()
		for start := 0; start < len(held); start += extendBatch {
			chunk := held[start:min(start+extendBatch, len(held))]
			if err := w.extend(ctx, chunk, w.cfg.LeaseDuration); err != nil {
				w.log.Warn("heartbeat failed; retrying at the next beat", "error", err)
				break
			}
		}
	}
}

// extend pushes the leases of claims forward and marks those the database
// no longer holds for us as lost.
func (w *Worker) extend(ctx context.Context, claims []*inflight, lease time.Duration) error {
	p := db.ExtendParams{LeaseMs: lease.Milliseconds()}
	for _, f := range claims {
		p.Ids = append(p.Ids, f.id)
		p.Attempts = append(p.Attempts, f.attempt)
	}
	ectx, cancel := context.WithTimeout(ctx, w.cfg.LeaseDuration/2)
	defer cancel()
	rows, err := w.q.Extend(ectx, p)
	if err != nil {
		return err
	}
	still := make(map[claimKey]bool, len(rows))
	for _, r := range rows {
		still[claimKey{r.ID, r.Attempt}] = true
	}
	for _, f := range claims {
		// Only a running handler can lose its lease: a finished claim
		// missing from the answer has simply been acked meanwhile.
		if !still[claimKey{f.id, f.attempt}] && f.state.CompareAndSwap(stateRunning, stateLost) {
			w.metrics.leaseLost(f.queue.name, f.kind)
			w.log.Warn("lease lost: cancelling the handler", "job_id", f.id, "attempt", f.attempt)
			f.cancelWith(ErrLeaseLost)
		}
	}
	return nil
}

func inflightFrom(ctx context.Context, id int64) (*inflight, error) {
	f, ok := ctx.Value(inflightKey{}).(*inflight)
	if !ok || f.id != id {
		return nil, fmt.Errorf("hopper: no running job %d in this context: pass the handler's context", id)
	}
	return f, nil
}

// ExtendLease pushes the lease of the job the handler is running to d from
// now, for a step the handler knows will be long (the heartbeat keeps
// leases alive on its own otherwise). It returns ErrLeaseLost, and cancels
// the handler's context, when the job is no longer this worker's.
func ExtendLease[T any](ctx context.Context, job *jobs.Job[T], d time.Duration) error {
	f, err := inflightFrom(ctx, job.ID)
	if err != nil {
		return err
	}
	w := f.queue.owner
	if err := w.extend(ctx, []*inflight{f}, d); err != nil {
		return fmt.Errorf("hopper: extend lease of job %d: %w", job.ID, err)
	}
	if f.state.Load() == stateLost {
		return fmt.Errorf("hopper: extend lease of job %d: %w", job.ID, ErrLeaseLost)
	}
	return nil
}

// AckTx acknowledges the running job inside the handler's own transaction
// tx, so the job's effects and its completion commit together (or roll
// back together: the job is then retried). The worker does not ack it
// again. It returns ErrLeaseLost when the job is no longer this worker's:
// roll back then.
func AckTx[T any](ctx context.Context, tx db.DBTX, job *jobs.Job[T]) error {
	f, err := inflightFrom(ctx, job.ID)
	if err != nil {
		return err
	}
	ids, err := db.New(tx).AckBatch(ctx, db.AckBatchParams{Ids: []int64{f.id}, Attempts: []int32{f.attempt}})
	if err != nil {
		return fmt.Errorf("hopper: ack job %d in transaction: %w", job.ID, err)
	}
	if len(ids) == 0 {
		return fmt.Errorf("hopper: ack job %d in transaction: %w", job.ID, ErrLeaseLost)
	}
	f.ackedInTx.Store(true)
	return nil
}
