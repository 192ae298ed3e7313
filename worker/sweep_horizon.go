package worker

import (
	"sync"
	"time"
)

// fullSweepEvery is how often a sweep looks at every expired lease rather
// than only those that expired since the last complete sweep.
const fullSweepEvery = time.Minute

// sweepMargin covers the time between the worker reading its clock and the
// sweep statement reading the database's (a pool wait, the network).
const sweepMargin = 2 * time.Second

// sweepHorizon bounds how far back a sweep looks. The lease index's first
// entries belong to jobs finished long ago: dead, but kept until vacuum
// runs, and kept however long any session holds an older snapshot open, so
// a sweep that starts at the oldest lease walks all of them. After a sweep
// that found every expired lease (its last batch was not full), the next
// one looks only at leases that expired since that sweep began. Leases it
// skipped (SKIP LOCKED: locked by a transaction that then rolled back) are
// found by the full sweep every fullSweepEvery, as after any failure.
type sweepHorizon struct {
	mu       sync.Mutex
	complete time.Time // when the last complete sweep began; zero: none
	lastFull time.Time // when the last complete full sweep began
}

// window returns how far back a sweep statement sent now, in a sweep that
// began at start, must look; 0 means all the way (a full sweep).
func (h *sweepHorizon) window(start, now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.complete.IsZero() || start.Sub(h.lastFull) >= fullSweepEvery {
		return 0
	}
	return now.Sub(h.complete) + sweepMargin
}

// done records how a sweep that began at start ended: complete when every
// batch succeeded and the last was not full; full when every batch looked
// all the way back.
func (h *sweepHorizon) done(start time.Time, complete, full bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !complete {
		h.complete = time.Time{}
		return
	}
	if h.complete.Before(start) {
		h.complete = start
	}
	if full && h.lastFull.Before(start) {
		h.lastFull = start
	}
}
