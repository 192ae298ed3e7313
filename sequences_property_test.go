package hopper_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

// TestSequenceProperty: goroutines do random things to a few sequences at
// once, each in transactions of its own, while the others do theirs:
// enqueue batches over several keys (some rolled back), acknowledge
// heads in batches (as the completer does, or a handler's AckTx at any
// isolation level: only READ COMMITTED may pass a turn), kill heads to the dead table
// under both policies, cancel or delete jobs wherever they stand, retry
// dead jobs, skip blocked sequences, enqueue through the SQL API, purge
// dead jobs (retention), edit the payload of a kind keyed by its payload
// (an edit to another key is refused). After every round of operations, and
// at the end, no key may be stranded: a key with waiting jobs has a head
// or a block, and never two heads (the unique index would have refused
// the statement, which fails the test), and no job's payload names
// another key than the one it waits in. The acknowledged heads of each
// key must come in id order, whatever the interleaving (a retried dead job
// aside: it rejoins at its old id, behind the head of the moment). The seed is
// printed; HOPPER_SEQUENCE_SEED repeats a run's plan (not its timing).
func TestSequenceProperty(t *testing.T) {
	seed := propertySeed(t, "HOPPER_SEQUENCE_SEED")
	b := setup(t)
	const keys, actors = 6, 6
	rounds := testdb.Rounds(60)
	key := func(r *rand.Rand) string { return fmt.Sprintf("p%d", r.IntN(keys)) }

	var mu sync.Mutex
	acked := map[string][]int64{} // per key, the heads acknowledged, in commit order
	retried := map[int64]bool{}   // dead jobs retried: they rejoin at their old id, behind the head
	noteRetried := func(ids ...int64) {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			retried[id] = true
		}
	}
	ack := func(ctx context.Context, r *rand.Rand) error {
		// At any isolation level, as a handler's own transaction with
		// AckTx may be: only READ COMMITTED may pass a turn.
		level := isolationLevels[r.IntN(len(isolationLevels))]
		tx, err := b.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		// A batch of heads, locked and deleted in id order, as AckBatch does.
		rows, err := tx.Query(ctx, `DELETE FROM hopper_jobs WHERE id = ANY (ARRAY(
			SELECT id FROM hopper_jobs WHERE state IN ('pending', 'scheduled') AND meta ? 'hopper.sequence'
			ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)) RETURNING id, meta ->> 'hopper.sequence'`, 1+r.IntN(3))
		if err != nil {
			return err
		}
		type done struct {
			ID  int64
			Key string
		}
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[done])
		if level != pgx.ReadCommitted {
			return wantIsolationRefused(err, int64(len(got)))
		}
		if err != nil {
			return err
		}
		mu.Lock() // held through the commit, so that the log's order is the commits'
		defer mu.Unlock()
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		for _, d := range got {
			acked[d.Key] = append(acked[d.Key], d.ID)
		}
		return nil
	}
	ops := []func(ctx context.Context, r *rand.Rand) error{
		func(ctx context.Context, r *rand.Rand) error { // a batch over several keys, sometimes rolled back
			items := make([]jobs.Item[Email], 1+r.IntN(4))
			for i := range items {
				items[i] = jobs.Item[Email]{Payload: Email{To: "x"}, Options: []jobs.EnqueueOption{jobs.Sequence(key(r)), jobs.MaxAttempts(1)}}
				if r.IntN(3) == 0 {
					items[i].Options = append(items[i].Options, jobs.SequenceOnDead(jobs.SequenceContinue))
				}
			}
			tx, err := b.Pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := email.EnqueueMany(ctx, tx, items); err != nil {
				return err
			}
			if r.IntN(5) == 0 {
				return tx.Rollback(ctx)
			}
			return tx.Commit(ctx)
		},
		func(ctx context.Context, r *rand.Rand) error { // the SQL API, one job or a batch, in the caller's transaction
			tx, err := b.Pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if r.IntN(2) == 0 {
				_, err = tx.Exec(ctx, `SELECT hopper_enqueue('sql', '{}', max_attempts => 1, meta => jsonb_build_object('hopper.sequence', $1::text))`, key(r))
			} else {
				_, err = tx.Exec(ctx, `SELECT * FROM hopper_enqueue_many(jsonb_build_array(
					jsonb_build_object('kind', 'sql', 'payload', '{}'::jsonb, 'max_attempts', 1, 'meta', jsonb_build_object('hopper.sequence', $1::text)),
					jsonb_build_object('kind', 'sql', 'payload', '{}'::jsonb, 'max_attempts', 1, 'meta', jsonb_build_object('hopper.sequence', $2::text))))`, key(r), key(r))
			}
			if err != nil {
				return err
			}
			return tx.Commit(ctx)
		},
		func(ctx context.Context, r *rand.Rand) error { // a kind keyed by its payload (SequenceBy), then its payload edited
			if r.IntN(2) == 0 {
				_, err := posting.Enqueue(ctx, b.Pool, Posting{Account: key(r)}, jobs.MaxAttempts(1))
				return err
			}
			var id int64
			err := b.Pool.QueryRow(ctx, `SELECT id FROM hopper_jobs WHERE kind = 'posting' AND state = 'waiting' ORDER BY random() LIMIT 1`).Scan(&id)
			if err == pgx.ErrNoRows {
				return nil
			}
			if err != nil {
				return err
			}
			_, err = b.client.UpdateJob(ctx, id, hopper.JobUpdate{Payload: hopper.PayloadOf(posting, Posting{Account: key(r), N: r.IntN(100)})})
			if err != nil && !errors.Is(err, hopper.ErrPayloadMismatch) && !isEditRace(err) {
				return err
			}
			return nil
		},
		func(ctx context.Context, r *rand.Rand) error { // retention: purge a dead job of a key
			var id int64
			err := b.Pool.QueryRow(ctx, `SELECT id FROM hopper_dead_jobs WHERE meta ->> 'hopper.sequence' = $1 ORDER BY random() LIMIT 1`, key(r)).Scan(&id)
			if err == pgx.ErrNoRows {
				return nil
			}
			if err != nil {
				return err
			}
			_, err = b.client.PurgeDeadJobs(ctx, hopper.DeadFilter{IDs: []int64{id}, States: []jobs.State{jobs.StateDead, jobs.StateCancelled}})
			return err
		},
		ack, ack,
		func(ctx context.Context, r *rand.Rand) error { // a head dies, as a failed last attempt does
			_, err := b.Pool.Exec(ctx, `WITH gone AS (
				DELETE FROM hopper_jobs WHERE id = (SELECT id FROM hopper_jobs WHERE state IN ('pending', 'scheduled')
					AND meta ->> 'hopper.sequence' = $1 FOR UPDATE SKIP LOCKED) RETURNING *)
				INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt, max_attempts, unique_key, errors,
					reason, created_at, run_at, state, meta, concurrency_key)
				SELECT id, queue, kind, version, payload, priority, attempt, max_attempts, unique_key, errors,
					'property', created_at, run_at, 'dead', meta, concurrency_key FROM gone`, key(r))
			return err
		},
		func(ctx context.Context, r *rand.Rand) error { // cancel any live job of a key
			var id int64
			err := b.Pool.QueryRow(ctx, `SELECT id FROM hopper_jobs WHERE meta ->> 'hopper.sequence' = $1 ORDER BY random() LIMIT 1`, key(r)).Scan(&id)
			if err == pgx.ErrNoRows {
				return nil
			}
			if err != nil {
				return err
			}
			_, err = b.client.CancelJobs(ctx, id)
			return err
		},
		func(ctx context.Context, r *rand.Rand) error { // delete a waiting job
			var id int64
			err := b.Pool.QueryRow(ctx, `SELECT id FROM hopper_jobs WHERE meta ->> 'hopper.sequence' = $1 AND state = 'waiting' ORDER BY random() LIMIT 1`, key(r)).Scan(&id)
			if err == pgx.ErrNoRows {
				return nil
			}
			if err != nil {
				return err
			}
			_, err = b.client.DeleteJob(ctx, id)
			if err != nil && !isEditRace(err) {
				return err
			}
			return nil
		},
		func(ctx context.Context, r *rand.Rand) error { // the operator: retry or skip a blocked key
			k := key(r)
			var err error
			if r.IntN(2) == 0 {
				var id int64
				id, err = b.client.RetrySequence(ctx, k)
				noteRetried(id)
			} else {
				_, err = b.client.SkipSequence(ctx, k)
			}
			if err != nil && !isEditRace(err) {
				return err
			}
			return nil
		},
		func(ctx context.Context, r *rand.Rand) error { // retry any dead job of a key
			var id int64
			err := b.Pool.QueryRow(ctx, `SELECT id FROM hopper_dead_jobs WHERE meta ->> 'hopper.sequence' = $1 ORDER BY random() LIMIT 1`, key(r)).Scan(&id)
			if err == pgx.ErrNoRows {
				return nil
			}
			if err != nil {
				return err
			}
			noteRetried(id)
			_, err = b.client.RetryDeadJobs(ctx, hopper.DeadFilter{IDs: []int64{id}, States: []jobs.State{jobs.StateDead, jobs.StateCancelled}})
			return err
		},
	}

	stranded := func() []string {
		rows, err := b.Pool.Query(b.Ctx, `SELECT k FROM (SELECT DISTINCT meta ->> 'hopper.sequence' AS k FROM hopper_jobs WHERE state = 'waiting') AS w
			WHERE NOT EXISTS (SELECT FROM hopper_jobs AS h WHERE h.meta ->> 'hopper.sequence' = w.k AND h.state <> 'waiting')
			  AND NOT EXISTS (SELECT FROM hopper_sequence_blocks AS b WHERE b.sequence_key = w.k)`)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return out
	}
	for round := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, actors)
		for a := range actors {
			r := rand.New(rand.NewPCG(seed, uint64(round*actors+a)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 4 {
					if err := ops[r.IntN(len(ops))](b.Ctx, r); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err, "round %d (seed %d)", round, seed)
		}
		require.Empty(t, stranded(), "round %d (seed %d): keys with waiting jobs and neither head nor block", round, seed)
		var misplaced []int64
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT coalesce(array_agg(id), '{}') FROM hopper_jobs
			WHERE kind = 'posting' AND payload ->> 'account' IS DISTINCT FROM meta ->> 'hopper.sequence'`).Scan(&misplaced))
		require.Empty(t, misplaced, "round %d (seed %d): jobs whose payload names another key than the sequence they wait in", round, seed)
	}
	for k, ids := range acked {
		var firstRuns []int64 // a retried job runs again where its id falls among the waiting
		for _, id := range ids {
			if !retried[id] {
				firstRuns = append(firstRuns, id)
			}
		}
		require.IsIncreasing(t, firstRuns, "key %s: heads acknowledged out of id order (seed %d)", k, seed)
	}
}

// isEditRace reports an operator's call that found its job or sequence
// changed by another actor meanwhile: a refusal, not a fault.
func isEditRace(err error) bool {
	for _, e := range []error{hopper.ErrNotBlocked, hopper.ErrNotFound, hopper.ErrFinished, hopper.ErrRunning} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
