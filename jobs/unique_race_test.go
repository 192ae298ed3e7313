package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/jobs"
)

// moveSQL ends a live job as a worker or an operator would, in one
// statement: into the history as completed, or among the dead as dead or
// cancelled. The test's stand-in for a worker and the cancel command.
const moveSQL = `
WITH gone AS (
    DELETE FROM hopper_jobs WHERE id = ANY ($1::bigint[]) AND state <> 'running' OR id = ANY ($1::bigint[]) AND $3::boolean
    RETURNING *
), kept AS (
    INSERT INTO hopper_job_history (id, queue, kind, version, payload, priority, attempt, max_attempts, unique_key,
                                    errors, run_at, created_at, keep_until, meta, concurrency_key)
    SELECT id, queue, kind, version, payload, priority, greatest(attempt, 1), max_attempts, unique_key,
           errors, run_at, created_at, now() + interval '1 day', meta, concurrency_key
    FROM gone WHERE $2::text = 'completed'
)
INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt, max_attempts, unique_key,
                              errors, reason, created_at, state, run_at, meta, concurrency_key)
SELECT id, queue, kind, version, payload, priority, attempt, max_attempts, unique_key,
       errors, 'test', created_at, $2::text, run_at, meta, concurrency_key
FROM gone WHERE $2::text <> 'completed'`

// racePool is a pool of its own with enough connections for the racing
// goroutines to meet in the database, not in the pool's queue.
func racePool(t *testing.T, b *bundle, conns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(b.URL)
	require.NoError(t, err)
	cfg.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(b.Ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// Fifty goroutines enqueue the same keys at once, in every mode, through
// the pool and inside transactions that commit or roll back, one job or a
// batch at a time; for the modes where finished jobs hold the key, another
// goroutine cancels the live jobs all along. Each mode's answers are
// exact: one job per key, every committed answer names it, and with
// replace the job carries the payload of the last committed enqueue.
func TestUniqueRace(t *testing.T) {
	b := setup(t)
	pool := racePool(t, b, 20)
	const goroutines, rounds = 50, 4
	keys := []string{"a", "b", "c"}
	for _, mode := range []struct {
		name     string
		opts     []jobs.EnqueueOption
		cancel   bool // cancel live jobs meanwhile: the key must stay held
		replaces bool
		txOnly   bool // every enqueue in a transaction, to know the commit order
		derived  bool // the key comes from the payload (UniqueBy), not UniqueKey
	}{
		{name: "live", opts: nil},
		{name: "period", opts: []jobs.EnqueueOption{jobs.UniquePeriod(time.Hour)}, cancel: true},
		{name: "states", opts: []jobs.EnqueueOption{jobs.UniqueStates(jobs.StateCancelled, jobs.StateDead)}, cancel: true},
		{name: "replace", opts: []jobs.EnqueueOption{jobs.ReplaceWaiting()}, replaces: true, txOnly: true},
		{name: "debounce", opts: []jobs.EnqueueOption{jobs.Debounce(time.Hour)}, replaces: true, txOnly: true},
		{name: "payload", opts: []jobs.EnqueueOption{jobs.UniquePeriod(time.Hour)}, cancel: true, derived: true},
	} {
		kind := jobs.MustDefine[Note]("race."+mode.name,
			jobs.UniqueBy(func(n Note) string {
				k, _, ok := strings.Cut(n.Text, "|")
				if !ok {
					return "" // no key
				}
				return k
			}))
		key := func(k string) string { return mode.name + "/" + k }
		if mode.derived { // the key UniqueBy derives from the payload's key(k)|...
			key = func(k string) string { return kind.Name() + ":" + mode.name + "/" + k }
		}
		var mu sync.Mutex
		order := map[string][]string{} // per key, the payloads of committed enqueues, in commit order
		var committed []jobs.Result
		record := func(payloads []string, ks []string, results []jobs.Result) {
			mu.Lock()
			defer mu.Unlock()
			committed = append(committed, results...)
			for i, r := range results {
				if r.Outcome() != jobs.EnqueueKept {
					order[ks[i]] = append(order[ks[i]], payloads[i])
				}
			}
		}
		enqueue := func(ctx context.Context, g, round int) error {
			k := keys[(g+round)%len(keys)]
			payload := fmt.Sprintf("%s/%s|g%d-r%d", mode.name, k, g, round)
			way := (g + round) % 5
			if mode.txOnly && way == 0 {
				way = 1
			}
			opts := append([]jobs.EnqueueOption{jobs.UniqueKey(key(k))}, mode.opts...)
			if mode.derived {
				opts = mode.opts
			}
			many := way >= 3
			do := func(dbtx jobs.DBTX) ([]jobs.Result, error) {
				if !many {
					r, err := kind.Enqueue(ctx, dbtx, Note{Text: payload}, opts...)
					return []jobs.Result{r}, err
				}
				r, err := kind.EnqueueMany(ctx, dbtx, []jobs.Item[Note]{{Payload: Note{Text: payload}, Options: opts}, {Payload: Note{Text: "free"}}})
				if err != nil {
					return nil, err
				}
				return r.Results[:1], nil
			}
			switch way {
			case 0: // the pool: its own implicit transaction
				res, err := do(pool)
				if err == nil {
					record([]string{payload}, []string{k}, res)
				}
				return err
			default:
				tx, err := pool.Begin(ctx)
				if err != nil {
					return err
				}
				defer tx.Rollback(ctx) //nolint:errcheck
				res, err := do(tx)
				if err != nil {
					return err
				}
				if way == 2 || way == 4 { // rolled back: frees whatever it took
					return tx.Rollback(ctx)
				}
				// Still holding the key's lock: the next holder comes after.
				record([]string{payload}, []string{k}, res)
				return tx.Commit(ctx)
			}
		}

		ctx, stop := context.WithCancel(b.Ctx)
		var cancelled sync.WaitGroup
		if mode.cancel {
			cancelled.Add(1)
			go func() {
				defer cancelled.Done()
				for ctx.Err() == nil {
					_, _ = pool.Exec(ctx, moveSQL, allLive(ctx, pool, kind.Name()), "cancelled", false)
				}
			}()
		}
		errs := make(chan error, goroutines)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for round := range rounds {
					if err := enqueue(ctx, g, round); err != nil {
						errs <- fmt.Errorf("goroutine %d round %d: %w", g, round, err)
						return
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		stop()
		cancelled.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err, mode.name)
		}

		// One job per key in all three tables, and every committed answer
		// is that job: inserted once, the others kept or replaced.
		ids := map[int64]string{}
		rows, err := b.Pool.Query(b.Ctx, `SELECT id, unique_key FROM hopper_jobs WHERE kind = $1
			UNION ALL SELECT id, unique_key FROM hopper_dead_jobs WHERE kind = $1
			UNION ALL SELECT id, unique_key FROM hopper_job_history WHERE kind = $1`, kind.Name())
		require.NoError(t, err)
		perKey := map[string]int{}
		for rows.Next() {
			var id int64
			var k *string
			require.NoError(t, rows.Scan(&id, &k))
			if k != nil {
				ids[id] = *k
				perKey[*k]++
			}
		}
		require.NoError(t, rows.Err())
		for _, k := range keys {
			require.Equal(t, 1, perKey[key(k)], "%s: key %s has one job", mode.name, k)
		}
		inserted := 0
		for _, r := range committed {
			if r.Outcome() == jobs.EnqueueInserted {
				inserted++
			}
			if mode.name == "live" && r.ID == 0 {
				continue // a holder not yet visible to the statement: see Result.ID
			}
			require.Contains(t, ids, r.ID, "%s: a committed answer names the key's job: %+v", mode.name, r)
			if mode.replaces {
				require.NotEqual(t, jobs.EnqueueKept, r.Outcome(), "%s: a waiting job is replaced: %+v", mode.name, r)
			} else {
				require.NotEqual(t, jobs.EnqueueReplaced, r.Outcome(), "%s: %+v", mode.name, r)
			}
		}
		require.Equal(t, len(keys), inserted, "%s: one insert per key", mode.name)
		if mode.replaces {
			for _, k := range keys {
				var raw json.RawMessage
				require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT payload FROM hopper_jobs WHERE unique_key = $1", key(k)).Scan(&raw))
				var n Note
				require.NoError(t, json.Unmarshal(raw, &n))
				seen := order[k]
				require.NotEmpty(t, seen)
				require.Equal(t, seen[len(seen)-1], n.Text, "%s: key %s carries the last committed payload", mode.name, k)
			}
		}
		t.Logf("%s: %d committed answers, %d inserted", mode.name, len(committed), inserted)
	}
}

// allLive lists a kind's live jobs.
func allLive(ctx context.Context, pool *pgxpool.Pool, kind string) []int64 {
	rows, _ := pool.Query(ctx, "SELECT id FROM hopper_jobs WHERE kind = $1", kind)
	ids, _ := pgx.CollectRows(rows, pgx.RowTo[int64])
	return ids
}
