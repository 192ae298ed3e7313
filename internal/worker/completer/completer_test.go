package completer

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/passbed"
	"github.com/hopperq/hopper/internal/testbed/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// testJob is a claim as the worker's held job shows it to the completer.
type testJob struct {
	id         int64
	attempt    int32
	leaseUntil time.Time // the lease certainly holds until then
	txAck      TxAck

	mu      sync.Mutex
	readied int // ReadyAgain's calls
}

func (j *testJob) ID() int64                    { return j.id }
func (j *testJob) Attempt() int32               { return j.attempt }
func (j *testJob) Kind() string                 { return "k" }
func (j *testJob) TxAck() *TxAck                { return &j.txAck }
func (j *testJob) LeaseHeldAt(t time.Time) bool { return t.Before(j.leaseUntil) }
func (j *testJob) ReadyAgain() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.readied++
}

// completerBed is a completer on a test schema, with the outcomes it
// settled, by job.
type completerBed struct {
	*passbed.Bed
	cp *Completer

	mu      sync.Mutex
	settled map[int64]Outcome
}

func newCompleterBed(t *testing.T, batch int) *completerBed {
	return newCompleterBedWith(t, batch, 10*time.Millisecond, context.Background())
}

// newCompleterBedWith is a completer bed that flushes a batch flushEvery
// after its first result, and whose hard deadline ends with hard.
func newCompleterBedWith(t *testing.T, batch int, flushEvery time.Duration, hard context.Context) *completerBed {
	t.Helper()
	b := &completerBed{Bed: passbed.New(t), settled: map[int64]Outcome{}}
	var err error
	b.cp, err = New(Config{Queries: b.Q, Log: b.Log, BatchSize: batch, FlushEvery: flushEvery,
		StatementTimeout: time.Minute, ReadOnly: func(error) bool { return false }, Hard: hard,
		Report: func(res Completion, o Outcome) {
			b.mu.Lock()
			defer b.mu.Unlock()
			_, twice := b.settled[res.Job.ID()]
			require.False(t, twice, "job %d settled twice", res.Job.ID())
			b.settled[res.Job.ID()] = o
		}})
	require.NoError(t, err)
	return b
}

// claim enqueues n (at most 10) jobs and claims them as worker "w",
// returning them held.
func (b *completerBed) claim(t *testing.T, n int) []*testJob {
	t.Helper()
	for range n {
		b.Enqueue(time.Now().Add(-time.Second))
	}
	sent := time.Now()
	rows := b.Claim("w", 60_000)
	require.Len(t, rows, n)
	held := make([]*testJob, n)
	for i, r := range rows {
		held[i] = &testJob{id: r.ID, attempt: r.Attempt, leaseUntil: sent.Add(time.Minute)}
	}
	return held
}

func (b *completerBed) outcomes() map[int64]Outcome {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[int64]Outcome, len(b.settled))
	for id, o := range b.settled {
		out[id] = o
	}
	return out
}

// A Config missing what the completer works with is refused at New.
func TestCompleterConfig(t *testing.T) {
	t.Parallel()
	whole := Config{Queries: db.New(nil), Log: slog.Default(), BatchSize: 1, FlushEvery: time.Millisecond,
		StatementTimeout: time.Second, Report: func(Completion, Outcome) {}, ReadOnly: func(error) bool { return false },
		Hard: context.Background()}
	_, err := New(whole)
	require.NoError(t, err)
	for name, edit := range map[string]func(*Config){
		"no queries": func(c *Config) { c.Queries = nil }, "no log": func(c *Config) { c.Log = nil },
		"no report": func(c *Config) { c.Report = nil }, "no read-only guard": func(c *Config) { c.ReadOnly = nil },
		"no hard deadline": func(c *Config) { c.Hard = nil }, "no batch": func(c *Config) { c.BatchSize = 0 },
		"no flush interval": func(c *Config) { c.FlushEvery = 0 }, "no statement timeout": func(c *Config) { c.StatementTimeout = 0 },
	} {
		cfg := whole
		edit(&cfg)
		_, err := New(cfg)
		require.Error(t, err, name)
	}
}

// The completer records a mixed batch in its statements and settles each
// result with what the database did: acked jobs are gone, a retried one
// waits for its backoff, a dead one is dead, and a result for an attempt
// the worker no longer holds is refused.
func TestCompleterRecordsOutcomesExactly(t *testing.T) {
	t.Parallel()
	b := newCompleterBed(t, 3) // the five results take two batches
	held := b.claim(t, 5)
	// An attempt the database never gave this worker.
	stale := &testJob{id: held[4].id, attempt: held[4].attempt + 1}

	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); b.cp.Run(stop) }()
	require.True(t, b.cp.Push(Completion{Job: held[0], Action: ActionAck}))
	require.True(t, b.cp.Push(Completion{Job: held[1], Action: ActionAck}))
	require.True(t, b.cp.Push(Completion{Job: held[2], Action: ActionRetry, Message: "boom", Backoff: time.Hour}))
	require.True(t, b.cp.Push(Completion{Job: held[3], Action: ActionDead, Message: "bad", DeadReason: "permanent"}))
	require.True(t, b.cp.Push(Completion{Job: stale, Action: ActionAck}))
	testdb.WaitFor(t, "every result settled", func() bool { return len(b.outcomes()) == 5 })
	close(stop)
	<-done
	require.False(t, b.cp.Push(Completion{Job: held[0], Action: ActionAck}), "a stopped completer takes no result")

	got := b.outcomes()
	require.Equal(t, OutcomeDone, got[held[0].id])
	require.Equal(t, OutcomeDone, got[held[1].id])
	require.Equal(t, OutcomeFailed, got[held[2].id])
	require.Equal(t, OutcomeDead, got[held[3].id])
	require.Equal(t, OutcomeRefused, got[held[4].id])

	for _, c := range held[:2] {
		_, err := b.Q.GetJob(b.Ctx, c.id)
		require.ErrorIs(t, err, pgx.ErrNoRows, "acked job %d is deleted", c.id)
	}
	retried, err := b.Q.GetJob(b.Ctx, held[2].id)
	require.NoError(t, err)
	require.Equal(t, "scheduled", retried.State)
	require.True(t, retried.RunAt.After(time.Now().Add(50*time.Minute)), "it waits for its backoff")
	dead, err := b.Q.GetDead(b.Ctx, held[3].id)
	require.NoError(t, err)
	require.Equal(t, "dead", dead.State)
	_, err = b.Q.GetJob(b.Ctx, held[3].id)
	require.ErrorIs(t, err, pgx.ErrNoRows, "the dead job left hopper_jobs")
	still, err := b.Q.GetJob(b.Ctx, held[4].id)
	require.NoError(t, err)
	require.Equal(t, "running", still.State, "the refused result changed nothing")
}

// Results still waiting when stop closes are recorded before Run returns.
func TestCompleterFlushesAtStop(t *testing.T) {
	t.Parallel()
	b := newCompleterBedWith(t, 100, time.Hour, context.Background()) // nothing is flushed before the stop
	held := b.claim(t, 3)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); b.cp.Run(stop) }()
	for _, c := range held {
		require.True(t, b.cp.Push(Completion{Job: c, Action: ActionAck}))
	}
	close(stop)
	<-done
	got := b.outcomes()
	require.Len(t, got, 3)
	for _, c := range held {
		require.Equal(t, OutcomeDone, got[c.id])
	}
}

// Past the hard deadline nothing is sent: a result no try was made for is
// unrecorded, and one whose earlier try may have committed is unconfirmed.
func TestCompleterGivesUpAfterTheHardDeadline(t *testing.T) {
	t.Parallel()
	hard, end := context.WithCancel(context.Background())
	b := newCompleterBedWith(t, 10, 10*time.Millisecond, hard)
	held := b.claim(t, 2)
	end()
	b.cp.flush([]Completion{{Job: held[0], Action: ActionAck}, {Job: held[1], Action: ActionAck, ambiguous: true}})
	got := b.outcomes()
	require.Equal(t, OutcomeUnrecorded, got[held[0].id])
	require.Equal(t, OutcomeUnconfirmed, got[held[1].id])
	for _, c := range held {
		j, err := b.Q.GetJob(b.Ctx, c.id)
		require.NoError(t, err)
		require.Equal(t, "running", j.State, "nothing was sent")
	}
}

// An ack that matches no row settles from what the row became: done when
// an earlier try may have deleted it while the lease held (its reply
// lost), refused when this was the only try ever sent.
func TestCompleterResolvesAnEarlierTry(t *testing.T) {
	t.Parallel()
	b := newCompleterBed(t, 10)
	held := b.claim(t, 2)
	// The earlier try: both rows deleted by the worker's own claims.
	_, err := b.Q.AckBatch(b.Ctx, db.AckBatchParams{Ids: []int64{held[0].id, held[1].id},
		Attempts: []int32{held[0].attempt, held[1].attempt}})
	require.NoError(t, err)
	b.cp.flush([]Completion{{Job: held[0], Action: ActionAck, ambiguous: true}, {Job: held[1], Action: ActionAck}})
	got := b.outcomes()
	require.Equal(t, OutcomeDone, got[held[0].id], "an earlier try took effect")
	require.Equal(t, OutcomeRefused, got[held[1].id], "the only try matched nothing: it had no effect")
}

// A batch the server refuses for what one result carries is split: the
// others are recorded as they are, and the bad one's message is stored as
// plain ASCII.
func TestCompleterSplitsARefusedBatch(t *testing.T) {
	t.Parallel()
	b := newCompleterBed(t, 10)
	held := b.claim(t, 3)
	b.cp.flush([]Completion{
		{Job: held[0], Action: ActionRetry, Message: "fine", Backoff: time.Hour},
		{Job: held[1], Action: ActionRetry, Message: "bad\x00byte", Backoff: time.Hour}, // text cannot hold a NUL
		{Job: held[2], Action: ActionRetry, Message: "fine too", Backoff: time.Hour},
	})
	got := b.outcomes()
	for i, c := range held {
		require.Equal(t, OutcomeFailed, got[c.id], "result %d", i)
		j, err := b.Q.GetJob(b.Ctx, c.id)
		require.NoError(t, err)
		require.Equal(t, "scheduled", j.State)
	}
	bad, err := b.Q.GetJob(b.Ctx, held[1].id)
	require.NoError(t, err)
	require.Contains(t, string(bad.Errors), "bad?byte")
}
