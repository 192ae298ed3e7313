package worker

import (
	"fmt"
	"time"
)

// FlowControl shapes how a queue's jobs are claimed: at most KeyLimit jobs
// of one concurrency key running at once, at most Rate's limit claimed per
// interval, and, with Fair, keys served round-robin. The rules are decided
// by the claim statement in the database, so they hold across every worker
// process and through crashes; every worker serving the queue must be
// given the same FlowControl (a worker without it claims by the plain
// rules; each worker records its own in hopper_queues as it starts, and
// logs a warning when another worker's record differs). The zero value is
// no flow control.
type FlowControl struct {
	// KeyLimit is the most jobs of one concurrency key (jobs.ConcurrencyKey,
	// jobs.KeyBy) that may run at once in the queue, across all workers; 0
	// means no limit. A kind's own limit (the KeyLimit handle option)
	// overrides it for that kind's jobs. A job counts as running from its
	// claim until its result is recorded, or its expired lease is swept.
	KeyLimit int
	// Rate caps how many jobs are claimed per interval.
	Rate Rate
	// Fair claims round-robin across concurrency keys, so that a flood of
	// jobs under one key does not hold the others back: each claim takes
	// the next keys with ready jobs (one index descent per key), a share of
	// each one's first jobs, and orders them by their rank within their key,
	// then by priority. Jobs without a key count as one more key, but are
	// only seen among the queue's first ready jobs: give every job of a fair
	// queue a key. Off, the order is strict: priority, run_at, id.
	Fair bool
	// PriorityAging, when positive, moves every ready job that has waited
	// longer than this one priority step up (its number down by one) per
	// interval waited, so that low priorities cannot starve behind a steady
	// stream of higher ones: a job enqueued at 9 runs as 0 after nine
	// intervals. The workers age a queue at most once per interval between
	// them, in bounded batches. The stored priority changes.
	PriorityAging time.Duration
}

// Rate is a rate limit: no more than Limit jobs claimed in any window of
// length Per. The zero value is none.
type Rate struct {
	Limit int
	Per   time.Duration
	// By says what the limit counts: the whole queue (RateByQueue, the
	// default), each kind apart (RateByKind), or each concurrency key apart
	// (RateByKey; jobs without a key share one budget).
	By RateGroup
	// Local keeps the count in this worker's memory instead of the
	// database: the limit is then per worker process, and costs no database
	// work. Only with RateByQueue.
	Local bool
	// ExactStarts counts each claim in the window from the moment the last
	// of its handlers started, not from the claim itself: then no window of
	// length Per holds more than Limit handler starts either, which is what
	// an API that counts calls sees. Without it only claims are exact: one
	// claim's handlers that start late (the claim's own duration, dispatch)
	// and the next claim's that start early can share a window, up to twice
	// the limit by handler start. Each window then lasts longer by the time
	// from a claim to its last handler start (tens of milliseconds under
	// load), so the rate achieved is lower by that share. Not with Local.
	ExactStarts bool
}

// RateGroup is what a Rate counts jobs by.
type RateGroup string

// The groups a rate limit counts by.
const (
	RateByQueue RateGroup = "queue"
	RateByKind  RateGroup = "kind"
	RateByKey   RateGroup = "key"
)

// Bounds of a rate limit's window: shorter than a millisecond cannot be
// measured by the claim; longer than a day is almost certainly a mistake
// (and keeps a day of claims in the rate table).
const (
	MinRatePer = time.Millisecond
	MaxRatePer = 24 * time.Hour
	// MaxKeyLimit bounds KeyLimit: a larger limit is no limit.
	MaxKeyLimit = 1 << 20
	// Bounds of PriorityAging.
	MinPriorityAging = 100 * time.Millisecond
	MaxPriorityAging = 7 * 24 * time.Hour
)

func (r Rate) set() bool { return r != Rate{} }

func (r Rate) validate() error {
	if !r.set() {
		return nil
	}
	if r.Limit < 1 || r.Limit > 1<<30 {
		return fmt.Errorf("rate limit %d jobs is outside 1 to %d", r.Limit, 1<<30)
	}
	if r.Per < MinRatePer || r.Per > MaxRatePer {
		return fmt.Errorf("rate window %v is outside %v to %v", r.Per, MinRatePer, MaxRatePer)
	}
	switch r.By {
	case "", RateByQueue, RateByKind, RateByKey:
	default:
		return fmt.Errorf("rate group %q is not one of %q, %q, %q", r.By, RateByQueue, RateByKind, RateByKey)
	}
	if r.Local && r.By != "" && r.By != RateByQueue {
		return fmt.Errorf("a local rate limit counts the whole queue only, not by %s", r.By)
	}
	if r.Local && r.ExactStarts {
		return fmt.Errorf("a local rate limit counts claims only: ExactStarts needs the database's count")
	}
	return nil
}

func validateKeyLimit(n int) error {
	if n < 0 || n > MaxKeyLimit {
		return fmt.Errorf("key limit %d is outside 0 (none) to %d", n, MaxKeyLimit)
	}
	return nil
}

func (f FlowControl) validate() error {
	if err := validateKeyLimit(f.KeyLimit); err != nil {
		return err
	}
	if a := f.PriorityAging; a != 0 && (a < MinPriorityAging || a > MaxPriorityAging) {
		return fmt.Errorf("priority aging %v is outside %v to %v (0: none)", a, MinPriorityAging, MaxPriorityAging)
	}
	return f.Rate.validate()
}

// validateFlow checks Config.FlowControl against the queues served.
func validateFlow(flow map[string]FlowControl, queues map[string]int) error {
	for q, f := range flow {
		if _, ok := queues[q]; !ok {
			return fmt.Errorf("%w: flow control for queue %q, which this worker does not serve (Queues)", ErrInvalidConfig, q)
		}
		if err := f.validate(); err != nil {
			return fmt.Errorf("%w: queue %q: %w", ErrInvalidConfig, q, err)
		}
	}
	return nil
}
