package worker_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// outcomesOf is every outcome the worker settled for the job's first
// attempts, in order.
func outcomesOf(o *outcomes, id int64) []string {
	var all []string
	for attempt := int32(1); attempt <= 3; attempt++ {
		all = append(all, o.of(id, attempt)...)
	}
	return all
}

// TestAckTxInSavepoints: AckTx inside savepoints (pgx's nested Begin),
// each released or rolled back, the outer transaction committed or
// rolled back. A delete undone by a savepoint's rollback left the outer
// transaction committed, and the job was reported done while its row
// stayed running, unextended, until the sweep made it dead. The row's
// fate decides now: gone, the job is done whatever the handler returned;
// still there, the handler's return value decides. Every case runs one
// job with a single attempt, so a job wrongly left running would die.
func TestAckTxInSavepoints(t *testing.T) {
	type step int
	const (
		release step = iota
		rollback
	)
	for _, tc := range []struct {
		name       string
		savepoints []step // innermost first; AckTx runs in the innermost
		commit     bool   // the outer transaction
		fail       bool   // the handler returns an error
		want       string // the outcome
		wantDead   bool
	}{
		{"savepoint rolled back, outer committed, nil", []step{rollback}, true, false, "done", false},
		{"savepoint rolled back, outer committed, error", []step{rollback}, true, true, "dead", true},
		{"savepoint released, outer committed, error", []step{release}, true, true, "done", false},
		{"savepoint released, outer rolled back, nil", []step{release}, false, false, "done", false},
		{"savepoint released, outer rolled back, error", []step{release}, false, true, "dead", true},
		{"inner released into an outer rolled back, committed, nil", []step{release, rollback}, true, false, "done", false},
		{"inner released into an outer rolled back, committed, error", []step{release, rollback}, true, true, "dead", true},
		{"inner rolled back, outer released, committed, error", []step{rollback, release}, true, true, "dead", true},
		{"both released, committed, error", []step{release, release}, true, true, "done", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			k := kind(t, "savepoint")
			res, err := k.Enqueue(b.Ctx, b.Pool, Task{}, jobs.MaxAttempts(1))
			require.NoError(t, err)
			var seen *outcomes
			start(t, b, worker.Config{}, func(w *worker.Worker) {
				seen = observe(w)
				require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
					tx, err := b.Pool.Begin(ctx)
					if err != nil {
						return err
					}
					defer tx.Rollback(context.WithoutCancel(ctx))
					txs := []pgx.Tx{tx}
					for range tc.savepoints {
						sp, err := txs[len(txs)-1].Begin(ctx)
						if err != nil {
							return err
						}
						txs = append(txs, sp)
					}
					if err := worker.AckTx(ctx, txs[len(txs)-1], j); err != nil {
						return err
					}
					for i, s := range tc.savepoints {
						sp := txs[len(txs)-1-i]
						if s == release {
							err = sp.Commit(ctx)
						} else {
							err = sp.Rollback(ctx)
						}
						if err != nil {
							return err
						}
					}
					if tc.commit {
						if err := tx.Commit(ctx); err != nil {
							return err
						}
					}
					if tc.fail {
						return errors.New("the handler's error")
					}
					return nil
				}))
			})
			testdb.WaitFor(t, "the job's outcome", func() bool { return len(outcomesOf(seen, res.ID)) > 0 })
			live, dead := b.Totals(t)
			require.Equal(t, []string{tc.want}, outcomesOf(seen, res.ID))
			require.Zero(t, live, "the job's row is gone when its outcome is reported")
			require.Equal(t, tc.wantDead, dead == 1)
		})
	}
}

// TestAckTxLostInAFailover: a handler's AckTx transaction lost with the
// old primary leaves the job's row live on the new timeline (simulated:
// the ack's timeline moved, the transaction rolled back). Its effects
// are gone, so the handler's nil does not complete the job: it runs
// again, uncharged (its one attempt is still there), and completes.
// Committed, the same move changes nothing: the row is gone, the job is
// done.
func TestAckTxLostInAFailover(t *testing.T) {
	for _, commit := range []bool{false, true} {
		t.Run(map[bool]string{false: "lost", true: "committed"}[commit], func(t *testing.T) { ackTxLostInAFailover(t, commit) })
	}
}

func ackTxLostInAFailover(t *testing.T, commit bool) {
	{
		b := setup(t)
		_, err := b.Pool.Exec(b.Ctx, "CREATE TABLE effects (job_id bigint, attempt int)")
		require.NoError(t, err)
		k := kind(t, "lost")
		res, err := k.Enqueue(b.Ctx, b.Pool, Task{}, jobs.MaxAttempts(1))
		require.NoError(t, err)
		var seen *outcomes
		var mu sync.Mutex
		runs := 0
		start(t, b, worker.Config{}, func(w *worker.Worker) {
			seen = observe(w)
			require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
				mu.Lock()
				runs++
				first := runs == 1
				mu.Unlock()
				tx, err := b.Pool.Begin(ctx)
				if err != nil {
					return err
				}
				defer tx.Rollback(context.WithoutCancel(ctx))
				if _, err := tx.Exec(ctx, "INSERT INTO effects VALUES ($1, $2)", j.ID, j.Attempt); err != nil {
					return err
				}
				if err := worker.AckTx(ctx, tx, j); err != nil {
					return err
				}
				if first {
					if err := worker.MoveAckTxTimeline(ctx, j.ID); err != nil {
						return err
					}
					if !commit {
						return nil // the deferred rollback: the transaction is lost
					}
				}
				return tx.Commit(ctx)
			}))
		})
		want := []string{"snoozed", "done"}
		if commit {
			want = []string{"done"}
		}
		testdb.WaitFor(t, "the job's outcomes", func() bool { return len(outcomesOf(seen, res.ID)) == len(want) })
		require.Equal(t, want, outcomesOf(seen, res.ID), "committed: %v", commit)
		live, dead := b.Totals(t)
		require.Zero(t, live)
		require.Zero(t, dead)
		var effects int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT count(*) FROM effects").Scan(&effects))
		require.Equal(t, 1, effects, "the effects committed once")
		mu.Lock()
		require.Equal(t, len(want), runs)
		mu.Unlock()
	}
}

// TestAckTxRolledBackThenEndedByAnotherRun: a handler's AckTx rolls back,
// and while the handler lingers its job is taken from it (its lease
// ended, swept) and ended by another run. When the handler returns nil at
// last, the row is gone, but not by its ack: its transaction aborted. Its
// run is not reported done (the lease was lost: refused), since done
// would count the job's end twice and credit it to a run whose effects
// rolled back.
func TestAckTxRolledBackThenEndedByAnotherRun(t *testing.T) {
	b := setup(t)
	k := kind(t, "acktx_rolled_back_taken")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{})
	require.NoError(t, err)
	rolledBack, release := make(chan struct{}), make(chan struct{})
	var seen *outcomes
	start(t, b, worker.Config{Logger: quiet}, func(w *worker.Worker) {
		seen = observe(w)
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			tx, err := b.Pool.Begin(context.Background())
			if err != nil {
				return err
			}
			if err := worker.AckTx(ctx, tx, j); err != nil {
				return err
			}
			if err := tx.Rollback(context.Background()); err != nil {
				return err
			}
			close(rolledBack)
			<-release
			return nil
		}))
	})
	<-rolledBack
	b.takeAway(t, b.job(t, res.ID))
	// The other run's end, as an ack deletes the row.
	_, err = b.Pool.Exec(b.Ctx, "DELETE FROM hopper_jobs WHERE id = $1", res.ID)
	require.NoError(t, err)
	close(release)
	testdb.WaitFor(t, "the run's outcome reported", func() bool { return len(seen.of(res.ID, 1)) > 0 })
	require.Equal(t, []string{string(worker.OutcomeRefused)}, seen.of(res.ID, 1))
}
