package producer

import (
	"errors"
	"fmt"
	"time"
)

// Flow is a queue's flow control as the claim needs it: the worker's
// public FlowControl, checked by the worker's own validation, with its
// rate group spelled as the claim statement takes it.
type Flow struct {
	KeyLimit      int           // the most jobs of one concurrency key running at once; 0: none
	Fair          bool          // keys served round-robin
	PriorityAging time.Duration // 0: none
	Rate          Rate
}

// Rate is a rate limit: no more than Limit jobs claimed in any window of
// length Per, counted by By. The zero value is none.
type Rate struct {
	Limit int
	Per   time.Duration
	// By is what the limit counts: RateByQueue ("" too), RateByKind or
	// RateByKey.
	By string
	// Local keeps the count in this process's memory (only by queue).
	Local bool
	// ExactStarts counts a claim from its last handler start (RateClaim).
	ExactStarts bool
}

// The groups a rate limit counts by, as the claim statement names them.
const (
	RateByQueue = "queue"
	RateByKind  = "kind"
	RateByKey   = "key"
)

func (r Rate) set() bool { return r != Rate{} }

// validate refuses a flow the claim cannot run. The worker checks its
// users' FlowControl with its own bounds first: this only guards what the
// claim itself relies on.
func (f *Flow) validate() error {
	switch {
	case f.KeyLimit < 0:
		return fmt.Errorf("Flow.KeyLimit %d is negative", f.KeyLimit)
	case f.PriorityAging < 0:
		return fmt.Errorf("Flow.PriorityAging %v is negative", f.PriorityAging)
	}
	r := f.Rate
	if !r.set() {
		return nil
	}
	switch r.By {
	case "", RateByQueue, RateByKind, RateByKey:
	default:
		return fmt.Errorf("Flow.Rate.By %q is not one of %q, %q, %q", r.By, RateByQueue, RateByKind, RateByKey)
	}
	switch {
	case r.Limit < 1 || r.Per < time.Millisecond:
		return fmt.Errorf("Flow.Rate: %d jobs per %v: need at least 1 job per millisecond or more", r.Limit, r.Per)
	case r.Local && r.By != "" && r.By != RateByQueue:
		return fmt.Errorf("Flow.Rate: a local rate counts the whole queue only, not by %s", r.By)
	case r.Local && r.ExactStarts:
		return errors.New("Flow.Rate: a local rate counts claims only, not ExactStarts")
	}
	return nil
}

// queueFlow is a queue's flow control as its claim loop uses it.
type queueFlow struct {
	Flow
	local     *localRate // Rate.Local's window; nil: none
	afterKey  string     // the next round of keys starts after this one
	nextAging time.Time  // when this worker next tries to age priorities
}

func newQueueFlow(f Flow) *queueFlow {
	qf := &queueFlow{Flow: f}
	if f.Rate.Local {
		qf.local = newLocalRate(f.Rate.Limit, f.Rate.Per)
	}
	return qf
}

// global reports whether the rate is kept in the database.
func (f *queueFlow) global() bool { return f.Rate.set() && !f.Rate.Local }

func (f *queueFlow) rateBy() string {
	if f.Rate.By == "" {
		return RateByQueue
	}
	return f.Rate.By
}
