// Package horizon bounds how far back a sweep (expired leases), a
// promotion (scheduled jobs fallen due) or a prune of the history looks.
package horizon

import (
	"sync"
	"time"
)

// FullScanEvery is how often a sweep or promotion looks at everything due
// rather than only what fell due since the last complete one.
const FullScanEvery = time.Minute

// Margin covers the time between the worker reading its clock and the
// statement reading the database's (a pool wait, the network).
const Margin = 2 * time.Second

// Horizon bounds how far back a pass looks. The first entries of the
// lease and scheduled indexes belong to jobs finished or promoted long
// ago: dead, but kept until vacuum runs, and kept however long any session
// holds an older snapshot open, so a scan from the oldest entry walks all
// of them. After a pass that found everything due (its last batch was not
// full), the next one looks only at what fell due since that pass began.
// What it misses (a row SKIP LOCKED skipped whose locker then rolled back;
// a scheduled job whose transaction committed after its run_at) is found
// by the full pass every FullScanEvery, as after any failure.
//
// The zero Horizon is ready: its first pass is full.
type Horizon struct {
	mu       sync.Mutex
	complete time.Time // when the last complete pass began; zero: none
	lastFull time.Time // when the last complete full pass began
}

// Window returns how far back a statement sent now, in a pass that began
// at start, must look; 0 means all the way (a full pass).
func (h *Horizon) Window(start, now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.complete.IsZero() || start.Sub(h.lastFull) >= FullScanEvery {
		return 0
	}
	return now.Sub(h.complete) + Margin
}

// Done records how a pass that began at start ended: complete when every
// batch succeeded and the last was not full; full when every batch looked
// all the way back.
func (h *Horizon) Done(start time.Time, complete, full bool) {
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
