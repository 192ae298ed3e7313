// Package passbed is a test schema for one component driven directly, for
// the tests of the components' packages only: its statements, an announcer
// that records what each pass announced, metrics that record what the pass
// counted, and helpers that enqueue and claim.
package passbed

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/worker/announce"
)

// Bed is one test's schema and what its passes announced and counted.
type Bed struct {
	T       *testing.T
	Ctx     context.Context
	DB      *testdb.DB
	Q       *db.Queries
	Log     *slog.Logger
	Metrics *Metrics

	announcer announce.Announcer
	mu        sync.Mutex
	announced map[string][]int64 // by the pass that announced: the ids
}

// New makes a bed on a fresh schema, its context ending with the test.
func New(t *testing.T) *Bed {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	tdb := testdb.New(t)
	b := &Bed{T: t, Ctx: ctx, DB: tdb, Q: db.New(tdb.Pool), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics: &Metrics{}, announced: map[string][]int64{}}
	b.announcer = announce.NewAnnouncer(b.Q, b.Log)
	return b
}

// Announce records what a pass announced, then sends it.
func (b *Bed) Announce(ctx context.Context, s *announce.Set, after string) {
	b.mu.Lock()
	b.announced[after] = append(b.announced[after], s.IDs()...)
	b.mu.Unlock()
	b.announcer.Announce(ctx, s, after)
}

// Announced are the ids the passes named after announced.
func (b *Bed) Announced(after string) []int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.announced[after]
}

// Enqueue adds a job of kind k to queue default, due at runAt.
func (b *Bed) Enqueue(runAt time.Time) int64 {
	b.T.Helper()
	r, err := b.Q.Enqueue(b.Ctx, db.EnqueueParams{Queue: "default", Kind: "k", Version: 1,
		Payload: json.RawMessage(`{}`), RunAt: runAt, MaxAttempts: 3})
	require.NoError(b.T, err)
	return r.ID
}

// Claim claims up to 10 jobs of queue default for owner.
func (b *Bed) Claim(owner string, leaseMs int64) []db.HopperJob {
	b.T.Helper()
	rows, err := b.Q.Dequeue(b.Ctx, db.DequeueParams{Owner: owner, LeaseMs: leaseMs, Queue: "default",
		AfterPriority: -1, Kinds: []string{"k"}, MaxVersions: []int32{1}, MaxJobs: 10})
	require.NoError(b.T, err)
	return rows
}

// State is the state of job id.
func (b *Bed) State(id int64) string {
	b.T.Helper()
	j, err := b.Q.GetJob(b.Ctx, id)
	require.NoError(b.T, err)
	return j.State
}

// Metrics records what the passes counted.
type Metrics struct {
	mu       sync.Mutex
	dead     map[string]int
	released map[[2]string]int
	fired    map[string]int // jobs enqueued, by schedule
	failed   map[string]int // fires failed, by schedule
}

// JobDead counts a job of queue gone dead.
func (m *Metrics) JobDead(queue string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead == nil {
		m.dead = map[string]int{}
	}
	m.dead[queue]++
}

// JobReleased counts a job of queue handed back for reason.
func (m *Metrics) JobReleased(queue, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.released == nil {
		m.released = map[[2]string]int{}
	}
	m.released[[2]string{queue, reason}]++
}

// Dead is how many jobs of queue went dead.
func (m *Metrics) Dead(queue string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dead[queue]
}

// Released is how many jobs of queue were handed back for reason.
func (m *Metrics) Released(queue, reason string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.released[[2]string{queue, reason}]
}

// ScheduleFired counts the jobs a fire of the schedule name enqueued.
func (m *Metrics) ScheduleFired(name string, jobs int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fired == nil {
		m.fired = map[string]int{}
	}
	m.fired[name] += jobs
}

// ScheduleFailed counts a failed fire of the schedule name.
func (m *Metrics) ScheduleFailed(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failed == nil {
		m.failed = map[string]int{}
	}
	m.failed[name]++
}

// Fired is how many jobs the fires of the schedule name enqueued.
func (m *Metrics) Fired(name string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fired[name]
}

// Failed is how many fires of the schedule name failed.
func (m *Metrics) Failed(name string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failed[name]
}
