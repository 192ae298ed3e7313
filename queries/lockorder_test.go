package queries_test

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
)

// TestStatementsNeverDeadlock runs every statement that touches held
// claims — Extend (the heartbeat), AckBatch and AckBatchKeep, NackBatch,
// Release, and an operator's Cancel, each given the ids in a different
// order — on the same rows at the same time,
// round after round. The waiting statements lock rows in id order and
// Extend skips locked rows, so PostgreSQL must never report a deadlock.
// With the statements as they were (each locking in the order it was
// given), this failed within a few rounds.
func TestStatementsNeverDeadlock(t *testing.T) {
	b := setup(t)
	const rounds, jobs = 12, 200
	for round := range rounds {
		for range jobs {
			b.enqueue(t, jobSpec{maxAttempts: 10})
		}
		claimed := b.claim(t, "w", jobs)
		require.Len(t, claimed, jobs)
		asc := ids(claimed)
		slices.Sort(asc)
		desc := slices.Clone(asc)
		slices.Reverse(desc)
		shuffled := slices.Clone(asc)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		ones := func(n int) []int32 {
			a := make([]int32, n)
			for i := range a {
				a[i] = claimed[0].Attempt
			}
			return a
		}
		half := len(shuffled) / 2
		nack := db.NackBatchParams{Ids: desc[:half], Attempts: ones(half), Messages: make([]string, half),
			Actions: repeat("retry", half), BackoffsMs: make([]int64, half), Reasons: make([]string, half)}
		steps := []func() error{
			func() error {
				_, err := b.Queries.Extend(b.Ctx, db.ExtendParams{Ids: desc, Attempts: ones(jobs), LeaseMs: 60_000})
				return err
			},
			func() error {
				_, err := b.Queries.Extend(b.Ctx, db.ExtendParams{Ids: shuffled, Attempts: ones(jobs), LeaseMs: 60_000})
				return err
			},
			func() error {
				_, err := b.Queries.AckBatch(b.Ctx, db.AckBatchParams{Ids: shuffled[:half], Attempts: ones(half)})
				return err
			},
			func() error {
				_, err := b.Queries.AckBatch(b.Ctx, db.AckBatchParams{Ids: desc, Attempts: ones(jobs)})
				return err
			},
			func() error {
				_, err := b.Queries.NackBatch(b.Ctx, nack)
				return err
			},
			func() error {
				_, err := b.Queries.Release(b.Ctx, db.ReleaseParams{Ids: shuffled, Attempts: ones(jobs)})
				return err
			},
			func() error {
				_, err := b.Queries.AckBatchKeep(b.Ctx, db.AckBatchKeepParams{Ids: desc[half:], Attempts: ones(jobs - half),
					KeepMs: repeat(int64(60_000), jobs-half), Results: make([]json.RawMessage, jobs-half)})
				return err
			},
			func() error {
				// An operator cancels some of the same jobs meanwhile.
				_, err := b.Queries.Cancel(b.Ctx, desc[half/2:half+half/2])
				return err
			},
		}
		errs := make(chan error, len(steps))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, step := range steps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs <- step()
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
				t.Fatalf("round %d: deadlock between the worker's own statements: %v", round, err)
			}
			require.NoError(t, err, "round %d", round)
		}
		// Clear what is left for the next round.
		_, err := b.Pool.Exec(b.Ctx, "DELETE FROM hopper_jobs")
		require.NoError(t, err)
		_, err = b.Pool.Exec(b.Ctx, "DELETE FROM hopper_job_history")
		require.NoError(t, err)
	}
}
