package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/testbed/wirefault"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// citusCommitFailed is what Citus's coordinator answers when a worker
// node's commit failed after the node may have committed (SQLSTATE XX000).
const citusCommitFailed = "could not commit transaction for shard 102008 on at least one active node"

// TestCommitOutcomeUnknown: a claim, or a batch of results, commits on the
// server and its answer is lost (the connection cut right after the
// commit's reply left the server) or replaced by Citus's "could not commit
// transaction" error. The worker must tell that from a refusal: the jobs a
// claim took are run at once, not after their leases; an acknowledgement
// that took effect is reported done, never refused, and not sent again as
// if it had not.
//
// The faulty worker is alone, with a 10 minute lease and no sweeps: only
// its own handlers can complete a job before the test's 90 s wait ends,
// so every job completing proves that none waited for its lease. Every job
// must run exactly once, on its first attempt, and be reported done
// exactly once.
func TestCommitOutcomeUnknown(t *testing.T) {
	const wfDequeueLimited = "-- name: DequeueLimited :many"
	type fault func(p *wirefault.Proxy, marker string)
	cut := func(p *wirefault.Proxy, marker string) { p.CutAfterReply(marker, 1) }
	citus := func(p *wirefault.Proxy, marker string) { p.FailAfterReply(marker, 1, "XX000", citusCommitFailed) }
	for _, tc := range []struct {
		name   string
		marker string
		fault  fault
		flow   bool // the queue is flow controlled: its claim runs under the claim lock
	}{
		{"claim/connection cut after its commit", wfDequeue, cut, false},
		{"claim/Citus's failed remote commit", wfDequeue, citus, false},
		{"limited claim/connection cut after its commit", wfDequeueLimited, cut, true},
		{"limited claim/Citus's failed remote commit", wfDequeueLimited, citus, true},
		{"ack batch/connection cut after its commit", wfAck, cut, false},
		{"ack batch/Citus's failed remote commit", wfAck, citus, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newWF(t) // in parallel (the test bed's setup), two scenarios at once
			quick := kind(t, "wf.quick")
			const total = 40
			h.enqueue(t, quick, total)

			p := h.proxy(t)
			tc.fault(p, tc.marker)
			cfg := worker.Config{
				Queues:        map[string]int{"default": 16},
				LeaseDuration: 10 * time.Minute,
				SweepInterval: time.Hour, // nothing but its own handlers completes a job
			}
			if tc.flow {
				cfg.FlowControl = map[string]worker.FlowControl{"default": {KeyLimit: 100}}
			}
			faulty := h.run(t, h.proxiedPool(t, p), "faulty", cfg, wfKinds{quick: wfQuick})
			h.waitFired(t, p, tc.marker, 1)
			testdb.WaitFor(t, "every job completed, their 10 minute leases far from over", func() bool { return h.live(t) == 0 })
			h.waitReported(t)
			faulty.stop(t)

			led := h.verify(t, nil)
			h.logFigures(t, led, p, tc.marker)
			wfCheckRuns(t, led, "faulty", func(wfKey, string) []string { return []string{string(worker.OutcomeDone)} })
			require.Equal(t, total, led.byWorker["faulty"][string(worker.OutcomeDone)], "every job done once, by the worker that claimed it")
			require.Equal(t, map[string]int{string(worker.OutcomeDone): total}, led.byWorker["faulty"], "nothing but done reported")
			require.Len(t, led.runs, total, "every job ran exactly once")
			for k := range led.runs {
				require.Equal(t, int32(1), k.attempt, "job %d ran on its first attempt: never swept", k.id)
			}
		})
	}
}

// ExtendLease sends an extension whose commit's outcome is unknown once
// more (an extension never shortens a lease), and returns
// ErrCommitUnknown only when the second one's outcome is unknown too. The
// lease is extended either way: the server committed every try.
func TestExtendLeaseAfterAnUnknownOutcome(t *testing.T) {
	for _, tc := range []struct {
		name    string
		unknown int   // extensions answered with Citus's commit error
		want    error // what ExtendLease returns
	}{
		{"one unknown outcome: sent again", 1, nil},
		{"two in a row", 2, worker.ErrCommitUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newWF(t)
			slow := kind(t, "wf.extends")
			h.enqueue(t, slow, 1)
			p := h.proxy(t)
			got, extended := make(chan error, 1), make(chan bool, 1)
			extend := func(ctx context.Context, j *jobs.Job[Task]) error {
				p.FailAfterReply(wfExtendStall, tc.unknown, "XX000", citusCommitFailed)
				got <- worker.ExtendLease(ctx, j, 20*time.Minute)
				var far bool
				err := h.b.Pool.QueryRow(ctx, "SELECT lease_until > now() + interval '15 minutes' FROM hopper_jobs WHERE id = $1", j.ID).Scan(&far)
				extended <- err == nil && far
				return nil
			}
			faulty := h.run(t, h.proxiedPool(t, p), "faulty", worker.Config{
				Queues:        map[string]int{"default": 1},
				LeaseDuration: 10 * time.Minute, // its own extension does not come during the test
				SweepInterval: time.Hour,
			}, wfKinds{slow: extend})
			var err error
			select {
			case err = <-got:
			case <-time.After(testdb.WaitLimit):
				require.FailNow(t, "the handler did not run")
			}
			require.Equal(t, tc.unknown, p.Fired(wfExtendStall), "every fault fired")
			require.True(t, <-extended, "the lease runs 20 minutes: the server committed the extension")
			if tc.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tc.want)
			}
			testdb.WaitFor(t, "the job completed", func() bool { return h.live(t) == 0 })
			faulty.stop(t)
		})
	}
}
