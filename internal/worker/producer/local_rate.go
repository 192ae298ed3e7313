package producer

import (
	"sync"
	"time"
)

// localRate is a sliding-window log in memory: no more than limit jobs
// taken in any window of length per, counted by this process alone
// (Rate.Local). It keeps one entry per take, as the database's window
// keeps one row per claim.
type localRate struct {
	mu    sync.Mutex
	limit int
	per   time.Duration
	log   []localTake
	used  int
}

type localTake struct {
	at   time.Time
	jobs int
}

func newLocalRate(limit int, per time.Duration) *localRate {
	return &localRate{limit: limit, per: per}
}

// take reserves up to want jobs at now and returns how many it may claim,
// or, when none, how long until the window gives some back.
func (r *localRate) take(now time.Time, want int) (int, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expire(now)
	n := min(want, r.limit-r.used)
	if n <= 0 {
		return 0, r.log[0].at.Add(r.per).Sub(now)
	}
	r.log = append(r.log, localTake{at: now, jobs: n})
	r.used += n
	return n, 0
}

// giveBack returns jobs reserved at the last take but not claimed.
func (r *localRate) giveBack(n int) {
	if n <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	last := len(r.log) - 1
	if last < 0 {
		return
	}
	n = min(n, r.log[last].jobs)
	r.log[last].jobs -= n
	r.used -= n
	if r.log[last].jobs == 0 {
		r.log = r.log[:last]
	}
}

func (r *localRate) expire(now time.Time) {
	i := 0
	for i < len(r.log) && !r.log[i].at.Add(r.per).After(now) {
		r.used -= r.log[i].jobs
		i++
	}
	r.log = r.log[i:]
}
