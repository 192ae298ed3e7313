package producer

import (
	"context"
	"sync"

	"github.com/hopperq/hopper/db"
)

// ClaimBatch lets a worker's plain queues (those without flow control)
// claim together: while one claim statement is in flight, the claims that
// other queues ask for meanwhile wait, and go out as one DequeueQueues
// statement for all of them — a group commit of claims. A worker with one
// busy queue claims as before (one Dequeue at a time); a worker with 200
// queues of 10 slots sends one statement for every queue that wants jobs,
// not 200, so a job's share of the round trips and of the statement's
// fixed cost does not grow as the slots are split over more queues.
//
// No goroutine of its own: the first claim to find none in flight leads,
// runs a batch, answers it, and hands the lead to the first claim that
// queued meanwhile, which runs the next batch with everything queued by
// then. So a producer never waits behind more than one batch, and nothing
// needs starting or stopping with the worker.
//
// Invariants (under mu): leading is true from the moment a claim takes the
// lead until a leader finds the queue empty; every queued claim is either
// answered by a batch that took it or woken to lead.
type ClaimBatch struct {
	q *db.Queries

	mu      sync.Mutex
	leading bool
	queued  []*claimAsk
}

// claimAsk is one producer's claim: its parameters, and, once a batch ran,
// its jobs or the batch's error.
type claimAsk struct {
	params db.DequeueParams
	wake   chan struct{} // answered, or asked to lead
	// Set before wake is signalled, read after.
	answered bool
	rows     []db.HopperJob
	err      error
}

// NewClaimBatch batches the claims of the producers given it (their
// Config.Claims) into statements on q.
func NewClaimBatch(q *db.Queries) *ClaimBatch { return &ClaimBatch{q: q} }

// dequeue claims as Dequeue with p does, batched with the claims other
// queues of the worker ask for at the same moment. It waits for its answer
// whatever ctx does once its claim is queued: a claim that was sent may
// have committed, and its jobs must reach their producer (see
// claimAnswerWait); the statement itself runs under the leader's ctx,
// which every producer of a worker derives the same way.
func (b *ClaimBatch) dequeue(ctx context.Context, p db.DequeueParams) ([]db.HopperJob, error) {
	ask := &claimAsk{params: p, wake: make(chan struct{}, 1)}
	b.mu.Lock()
	b.queued = append(b.queued, ask)
	if b.leading {
		b.mu.Unlock()
		<-ask.wake
		if ask.answered {
			return ask.rows, ask.err
		}
		b.mu.Lock() // asked to lead: leading stayed true for us
	}
	b.leading = true
	batch := b.queued
	b.queued = nil
	b.mu.Unlock()

	b.run(ctx, batch)

	b.mu.Lock()
	if len(b.queued) > 0 {
		b.queued[0].wake <- struct{}{} // the lead passes on; leading stays true
	} else {
		b.leading = false
	}
	b.mu.Unlock()
	return ask.rows, ask.err
}

// run claims for every ask of batch and answers them all.
func (b *ClaimBatch) run(ctx context.Context, batch []*claimAsk) {
	defer func() {
		for _, a := range batch {
			a.answered = true
			a.wake <- struct{}{}
		}
	}()
	if len(batch) == 1 {
		// One queue asking: the single-queue statement, whose plan the
		// hot path has always had.
		a := batch[0]
		a.rows, a.err = b.q.Dequeue(ctx, a.params)
		return
	}
	first := batch[0].params
	p := db.DequeueQueuesParams{Owner: first.Owner, LeaseMs: first.LeaseMs, Kinds: first.Kinds, MaxVersions: first.MaxVersions}
	byQueue := make(map[string]*claimAsk, len(batch))
	for _, a := range batch {
		byQueue[a.params.Queue] = a
		p.Queues = append(p.Queues, a.params.Queue)
		p.MaxJobs = append(p.MaxJobs, a.params.MaxJobs)
		p.AfterPriorities = append(p.AfterPriorities, a.params.AfterPriority)
		p.AfterRunAts = append(p.AfterRunAts, a.params.AfterRunAt)
		p.AfterIds = append(p.AfterIds, a.params.AfterID)
	}
	rows, err := b.q.DequeueQueues(ctx, p)
	for _, a := range batch {
		a.err = err
	}
	for _, r := range rows {
		a := byQueue[r.Queue]
		a.rows = append(a.rows, r)
	}
}
