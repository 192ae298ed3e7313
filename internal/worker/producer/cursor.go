package producer

import (
	"sync"
	"time"

	"github.com/hopperq/hopper/db"
)

// Key is a job's place in the order claims take ready jobs: the ready
// index's (priority, run_at, id). A wake-up carries one, and a held job
// its own, to move the cursor back (Producer.Wake).
type Key struct {
	Priority int16
	RunAt    time.Time
	ID       int64
}

// FromStart is before every job (priorities start at 0): a cursor there
// scans the whole ready index.
var FromStart = Key{Priority: -1}

func (k Key) less(o Key) bool {
	if k.Priority != o.Priority {
		return k.Priority < o.Priority
	}
	if !k.RunAt.Equal(o.RunAt) {
		return k.RunAt.Before(o.RunAt)
	}
	return k.ID < o.ID
}

// justBefore is the cursor from which k itself is claimed again.
func (k Key) justBefore() Key {
	if k.Priority < 0 {
		return FromStart
	}
	k.ID--
	return k
}

// KeyOf is row's place in the ready order.
func KeyOf(row db.HopperJob) Key {
	return Key{Priority: row.Priority, RunAt: row.RunAt, ID: row.ID}
}

// scanCursor is where a queue's next claim starts scanning the ready
// index: just past the last job it claimed. Everything before it was
// claimed already, and its index entries, dead but kept while any
// snapshot older than them is open, are not walked again.
//
// A job can become ready behind the cursor: its transaction committed
// after later jobs were claimed, it was released, swept or promoted, or a
// claim that locked it rolled back. The wake-up announcing it carries its
// place and moves the cursor back (rewind); the listener being down makes
// the cursor unusable until it is back (and has rewound everything, since
// wake-ups were missed); and a scan from the start every fullScan finds
// whatever no wake-up announced (a job a crashed worker's claim had locked,
// a row changed by hand).
//
// A claim in flight while a rewind arrives must not move the cursor past
// it when it returns: rewinds are kept aside for the duration of a claim
// and win over its answer.
type scanCursor struct {
	mu       sync.Mutex
	pos      Key
	claiming bool
	// rewound: a rewind arrived during the claim in flight, back to rewindTo.
	rewound  bool
	rewindTo Key
	fullScan time.Duration
	lastFull time.Time
}

func newScanCursor(fullScan time.Duration) *scanCursor {
	return &scanCursor{pos: FromStart, fullScan: fullScan}
}

// begin starts a claim and returns where it scans from: the cursor, or the
// start when wake-ups cannot reach it (usable false) or a full scan is due.
func (c *scanCursor) begin(now time.Time, usable bool) Key {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.claiming, c.rewound = true, false
	if !usable || now.Sub(c.lastFull) >= c.fullScan {
		c.pos = FromStart
	}
	if c.pos.Priority < 0 {
		c.lastFull = now
	}
	return c.pos
}

// claimed ends a claim that answered: the cursor moves past the furthest
// job it claimed, unless a rewind arrived meanwhile. A claim that found
// nothing leaves the cursor where it was.
func (c *scanCursor) claimed(rows []db.HopperJob) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, row := range rows {
		if k := KeyOf(row); c.pos.less(k) {
			c.pos = k
		}
	}
	c.end()
}

// claimedWithin ends a claim under flow control: as claimed, but the
// cursor does not pass headEnd, the last job the claim's head considered
// (priority -1: none), since a round of keys may have taken jobs far
// beyond it, past ready jobs no one considered.
func (c *scanCursor) claimedWithin(rows []db.HopperJob, headEnd Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, row := range rows {
		k := KeyOf(row)
		if headEnd.Priority >= 0 && headEnd.less(k) {
			k = headEnd
		}
		if c.pos.less(k) {
			c.pos = k
		}
	}
	c.end()
}

// failed ends a claim without an answer. Whatever it locked is pending
// again if it rolled back, so the next claim scans from the start.
func (c *scanCursor) failed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pos = FromStart
	c.end()
}

func (c *scanCursor) end() {
	if c.rewound && c.rewindTo.less(c.pos) {
		c.pos = c.rewindTo
	}
	c.claiming, c.rewound = false, false
}

// rewind moves the cursor back so that the job at k is claimed again.
func (c *scanCursor) rewind(k Key) {
	back := k.justBefore()
	c.mu.Lock()
	defer c.mu.Unlock()
	if back.less(c.pos) {
		c.pos = back
	}
	if c.claiming && (!c.rewound || back.less(c.rewindTo)) {
		c.rewound, c.rewindTo = true, back
	}
}

// at reports the cursor (tests).
func (c *scanCursor) at() Key {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pos
}
