// Package announce announces jobs that became pending other than by an
// insert (a release, a sweep, a promotion) to every worker.
package announce

import (
	"context"
	"log/slog"
	"time"

	"github.com/hopperq/hopper/db"
)

// Set collects jobs that became pending other than by an insert, to
// announce them to every worker with one Notify: their queues wake, and
// cursors that moved past them move back. The zero Set is empty.
type Set struct{ p db.NotifyParams }

// Add adds a job that became pending.
func (s *Set) Add(queue string, priority int16, runAt time.Time, id int64) {
	s.p.Queues = append(s.p.Queues, queue)
	s.p.Priorities = append(s.p.Priorities, priority)
	s.p.RunAts = append(s.p.RunAts, runAt)
	s.p.Ids = append(s.p.Ids, id)
}

// IDs are the jobs added, in order.
func (s *Set) IDs() []int64 { return s.p.Ids }

// Func sends the wake-ups a pass collected; after names the pass (sweep,
// promotion, release) in the log.
type Func func(ctx context.Context, s *Set, after string)

// Announcer sends the wake-ups a pass collected to every worker, the
// announcing one's notifier included.
type Announcer struct {
	q   *db.Queries
	log *slog.Logger
}

// NewAnnouncer announces with q, logging a failure to log.
func NewAnnouncer(q *db.Queries, log *slog.Logger) Announcer {
	return Announcer{q: q, log: log}
}

// Announce sends the wake-ups collected, if any. A failure costs latency
// only: workers poll, and scan from the start periodically.
func (a Announcer) Announce(ctx context.Context, s *Set, after string) {
	if len(s.p.Queues) == 0 {
		return
	}
	if err := a.q.Notify(ctx, s.p); err != nil {
		a.log.Warn("wake-up after "+after+" failed; workers will poll", "error", err)
	}
}
