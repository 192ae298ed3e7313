package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Crash recovery with the default settings (worker.Config{} but for its
// queues): no stable ID, a 30s lease, a 1s heartbeat. A worker that stops
// beating is gone after three beats, and the next beat of a live worker
// hands its jobs back, fenced: the tests check the jobs ran again before
// their lease would have let them (the registry did it, not the lease),
// none twice while its first run could still ack, none lost.

// held is a claim a worker process holds, read from the database.
type held struct {
	id         int64
	attempt    int32
	leaseUntil time.Time
}

// workerID is the worker ID of the process name runs, from the registry.
func (b *chaosBed) workerID(name string) string {
	b.t.Helper()
	var id string
	b.waitFor(name+" registered", func() bool {
		err := b.db.Pool.QueryRow(b.ctx, "SELECT id FROM hopper_workers WHERE pid = $1", b.workers[name].Process.Pid).Scan(&id)
		return err == nil
	})
	return id
}

// heldBy lists the claims worker id holds now.
func (b *chaosBed) heldBy(id string) []held {
	b.t.Helper()
	rows, err := b.db.Pool.Query(b.ctx, "SELECT id, attempt, lease_until FROM hopper_jobs WHERE state = 'running' AND lease_owner = $1", id)
	require.NoError(b.t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (held, error) {
		var h held
		return h, r.Scan(&h.id, &h.attempt, &h.leaseUntil)
	})
	require.NoError(b.t, err)
	return out
}

// rerunAt is when each claim's job started again (a run of a later
// attempt), once every claim is settled; ok is false while some are not.
// A claim whose own run completed is settled without a rerun: the killed
// worker's last COMMIT can reach the server and commit after the process
// is gone, while the claim still read as running.
func (b *chaosBed) rerunAt(claims []held) (at []time.Time, ok bool) {
	b.t.Helper()
	for _, c := range claims {
		var t *time.Time
		require.NoError(b.t, b.db.Pool.QueryRow(b.ctx,
			"SELECT min(at) FROM chaos_runs WHERE job_id = $1 AND attempt > $2", c.id, c.attempt).Scan(&t))
		switch {
		case t != nil:
			at = append(at, *t)
		case b.count("SELECT count(*) FROM chaos_ledger WHERE job_id = $1 AND attempt = $2", c.id, c.attempt) > 0:
			at = append(at, time.Time{}) // completed by its own run
		default:
			return nil, false
		}
	}
	return at, true
}

// dbNow is the database's clock, which stamps the runs.
func (b *chaosBed) dbNow() time.Time {
	b.t.Helper()
	var now time.Time
	require.NoError(b.t, b.db.Pool.QueryRow(b.ctx, "SELECT clock_timestamp()").Scan(&now))
	return now
}

// recovered waits until every claim ran again and returns how long after
// since the last one did; every rerun came before the claim's lease would
// have let it.
func (b *chaosBed) recovered(claims []held, since time.Time) time.Duration {
	b.t.Helper()
	var at []time.Time
	b.waitFor(fmt.Sprintf("the %d jobs of the stopped worker ran again", len(claims)), func() bool {
		var ok bool
		at, ok = b.rerunAt(claims)
		return ok
	})
	last := since
	for i, c := range claims {
		if at[i].IsZero() {
			continue
		}
		require.True(b.t, at[i].Before(c.leaseUntil),
			"job %d ran again at %v, not before its lease ended (%v): the lease recovered it, not the registry", c.id, at[i], c.leaseUntil)
		if at[i].After(last) {
			last = at[i]
		}
	}
	return last.Sub(since)
}

// waitHolding waits until worker id holds at least one job.
func (b *chaosBed) waitHolding(id string) []held {
	b.t.Helper()
	var claims []held
	b.waitFor(id+" holds jobs", func() bool {
		claims = b.heldBy(id)
		return len(claims) > 0
	})
	return claims
}

// TestRecoveryWorkerKilled: three worker processes at default settings;
// again and again one is SIGKILLed while it holds jobs, and restarted
// (under a new made-up ID, as a Deployment's pod would be). Every job it
// held runs again before its lease would have expired, none is lost, no
// stale result is accepted. The recovery times are printed.
func TestRecoveryWorkerKilled(t *testing.T) {
	testdb.Slow(t, "worker processes killed, stalled and stopped under load")
	kills, n := 6, 6000
	if chaosFull() {
		kills, n = 20, 20000
	}
	b := newChaosBed(t, "HOPPER_CHAOS_DEFAULTS=1", "HOPPER_CHAOS_WORK=300ms")
	b.enqueue(n)
	names := []string{"r1", "r2", "r3"}
	for _, name := range names {
		b.start(name)
	}
	var took []time.Duration
	for range kills {
		victim := names[rand.IntN(len(names))]
		id := b.workerID(victim)
		b.waitHolding(id)
		b.stop(victim, syscall.SIGKILL)
		killedAt := b.dbNow()
		// Read after the kill: every claim it held then, none it could
		// still make.
		claims := b.heldBy(id)
		took = append(took, b.recovered(claims, killedAt))
		b.start(victim)
	}
	b.waitDone(n, 3*time.Minute)
	b.verdict("worker killed", n, 0)
	slices.Sort(took)
	t.Logf("recovery after SIGKILL over %d kills: p50 %v, max %v (gone after 3 beats of 1s; the lease is 30s)",
		len(took), took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
}

// TestRecoveryStalledWorker: a worker process stopped (SIGSTOP) for longer
// than its stale window is taken to be gone and its jobs run elsewhere;
// resumed, it learns so at its next beat: its late results are refused
// (reported as such to its outcome hooks), and every job completed once.
func TestRecoveryStalledWorker(t *testing.T) {
	testdb.Slow(t, "worker processes killed, stalled and stopped under load")
	n := 600
	b := newChaosBed(t, "HOPPER_CHAOS_DEFAULTS=1", "HOPPER_CHAOS_WORK=2s")
	b.enqueue(n)
	for _, name := range []string{"s1", "s2", "s3"} {
		b.start(name)
	}
	id := b.workerID("s1")
	b.waitHolding(id)
	require.NoError(t, b.workers["s1"].Process.Signal(syscall.SIGSTOP))
	stoppedAt := b.dbNow()
	claims := b.heldBy(id)
	took := b.recovered(claims, stoppedAt)
	// Those whose own run had not committed (see rerunAt) ran again.
	claims = slices.DeleteFunc(claims, func(c held) bool {
		return b.count("SELECT count(*) FROM chaos_ledger WHERE job_id = $1 AND attempt = $2", c.id, c.attempt) > 0
	})
	require.NotEmpty(t, claims)
	b.waitFor("the stalled worker's jobs completed elsewhere", func() bool {
		for _, c := range claims {
			if b.count("SELECT count(*) FROM chaos_ledger WHERE job_id = $1 AND attempt > $2", c.id, c.attempt) == 0 {
				return false
			}
		}
		return true
	})
	require.NoError(t, b.workers["s1"].Process.Signal(syscall.SIGCONT))
	b.waitFor("the resumed worker reported its late results refused", func() bool {
		for _, c := range claims {
			if b.count("SELECT count(*) FROM chaos_outcomes WHERE job_id = $1 AND attempt = $2", c.id, c.attempt) == 0 {
				return false
			}
		}
		return true
	})
	for _, c := range claims {
		require.EqualValues(t, 1, b.count("SELECT count(*) FROM chaos_outcomes WHERE job_id = $1 AND attempt = $2 AND outcome = 'refused'", c.id, c.attempt),
			"job %d: the stalled run's result is refused", c.id)
		require.Zero(t, b.count("SELECT count(*) FROM chaos_ledger WHERE job_id = $1 AND attempt = $2", c.id, c.attempt),
			"job %d: the stalled run's ack did not commit", c.id)
	}
	b.waitDone(n, 3*time.Minute)
	b.verdict("stalled worker", n, took)
}

// TestRecoveryShutdownUnderLoad: SIGTERM to a worker process whose every
// slot runs a long handler (one that ignores cancellation), with the
// default ShutdownTimeout (20s): the process exits inside it, well inside
// Kubernetes' 30s, leaving no job running in its name.
func TestRecoveryShutdownUnderLoad(t *testing.T) {
	testdb.Slow(t, "worker processes killed, stalled and stopped under load")
	b := newChaosBed(t, "HOPPER_CHAOS_DEFAULTS=1", "HOPPER_CHAOS_WORK=1m")
	b.enqueue(100)
	b.start("t1")
	id := b.workerID("t1")
	b.waitFor("every slot busy", func() bool { return len(b.heldBy(id)) == 16 })
	began := time.Now()
	b.stop("t1", syscall.SIGTERM)
	took := time.Since(began)
	t.Logf("SIGTERM with 16 handlers that ignore cancellation: exited after %v (ShutdownTimeout 20s)", took.Round(time.Millisecond))
	// The bound is Run's own deadline; the slack covers a loaded
	// machine starting and reaping a process, and stays under 30s.
	require.Less(t, took, 28*time.Second, "the process outlived its shutdown deadline")
	require.Empty(t, b.heldBy(id), "every job it held was given back")
	require.Zero(t, b.count("SELECT count(*) FROM hopper_workers WHERE id = $1", id), "its row removed at a clean stop")
}
