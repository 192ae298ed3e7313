package failover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/hacluster"
	"github.com/hopperq/hopper/internal/testbed/wirefault"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// Order is the payload of the keyed enqueues: the order's key is the
// job's unique key.
type Order struct {
	Key string `json:"key"`
}

var keyedOrder = jobs.MustDefine[Order]("failover.keyed")

// TestKeyedEnqueueAcrossFailover: the recipe of docs/high-availability.md
// for a commit whose outcome is unknown. Producers place orders, each a
// transaction that inserts the order's row (ON CONFLICT DO NOTHING) and
// enqueues its job with the order's key as unique key, held for an hour
// (UniquePeriod: a retry must not enqueue again once the job has
// completed, and a worker completes them within milliseconds here); on
// any error the whole transaction runs again with the same key. Through
// commits whose answer the proxy discards after the server committed
// them, a planned switchover and a primary killed, every key placed ends
// with exactly one order row and exactly one job, live or completed.
func TestKeyedEnqueueAcrossFailover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f, observe := formation(t, ctx)
	_, err := observe.Exec(ctx, `CREATE TABLE ko_orders (key text PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp())`)
	require.NoError(t, err)

	// A worker on the nodes directly, keeping history, so that every job
	// a key produced can be counted, and so that jobs complete between a
	// lost answer and its retry.
	w, err := worker.New(observe, worker.Config{Queues: map[string]int{jobs.DefaultQueue: 4}, LeaseDuration: lease,
		KeepHistoryByQueue: map[string]time.Duration{jobs.DefaultQueue: time.Hour}, Logger: quiet()})
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, keyedOrder, func(context.Context, *jobs.Job[Order]) error { return nil }))
	wctx, cancelWorker := context.WithCancel(ctx)
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(wctx) }()
	stopWorker := sync.OnceValue(func() error { cancelWorker(); return <-workerDone })
	defer stopWorker() //nolint:errcheck // the test's end: stopped already, or failed

	// The producers reach the nodes through proxies, which can discard a
	// commit's answer.
	proxies := map[string]*wirefault.Proxy{}
	byAddr := map[string]*hacluster.Node{}
	var hosts []string
	for _, n := range f.Nodes() {
		p := wirefault.Start(t, n.Addr())
		proxies[n.Name] = p
		byAddr[p.Addr()] = n
		hosts = append(hosts, p.Addr())
	}
	pcfg, err := pgxpool.ParseConfig("postgres://postgres@" + strings.Join(hosts, ",") +
		"/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=5&pool_max_conns=12")
	require.NoError(t, err)
	hopper.DetectSilentPeers(&pcfg.ConnConfig.Config)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	defer pool.Close()

	ps := startPlacing(ctx, pool, byAddr, 8)
	defer ps.halt()
	primary, err := f.Stable(ctx)
	require.NoError(t, err)
	ps.waitPlaced(t, primary, time.Now(), 100)
	t.Logf("keyed: orders placed on %s", primary.Name)

	// Commits that the server made but whose answer never came.
	const commit = "commit" // what pgx's Tx.Commit sends
	proxies[primary.Name].CutAfterReply(commit, 3)
	require.NoError(t, proxies[primary.Name].WaitFired(ctx, commit, 3))
	t.Logf("keyed: three commits' answers discarded")

	at := time.Now()
	require.NoError(t, f.Switchover(ctx))
	next, err := f.Stable(ctx)
	require.NoError(t, err)
	require.NotEqual(t, primary.Name, next.Name)
	switchover := ps.waitPlaced(t, next, at, 20).Sub(at)
	t.Logf("keyed: switched over to %s", next.Name)

	at = time.Now()
	require.NoError(t, f.Kill(next))
	last, err := f.Writable(ctx, next)
	require.NoError(t, err)
	killed := ps.waitPlaced(t, last, at, 20).Sub(at)
	t.Logf("keyed: %s killed, %s primary", next.Name, last.Name)

	ps.halt()
	require.NoError(t, stopWorker())

	// The verdict: every key placed has one order and one job; no other.
	ps.mu.Lock()
	defer ps.mu.Unlock()
	orders := map[string]int{}
	rows, err := observe.Query(ctx, `SELECT key FROM ko_orders`)
	require.NoError(t, err)
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		orders[k]++
	}
	require.NoError(t, rows.Err())
	jobsByKey := map[string]int{}
	rows, err = observe.Query(ctx, `SELECT unique_key FROM hopper_jobs WHERE kind = $1
		UNION ALL SELECT unique_key FROM hopper_job_history WHERE kind = $1
		UNION ALL SELECT unique_key FROM hopper_dead_jobs WHERE kind = $1`, keyedOrder.Name())
	require.NoError(t, err)
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		jobsByKey[k]++
	}
	require.NoError(t, rows.Err())
	for _, p := range ps.placed {
		require.Equal(t, 1, orders[p.key], "order %s: one row", p.key)
		require.Equal(t, 1, jobsByKey[p.key], "order %s: one job", p.key)
	}
	require.Len(t, orders, len(ps.placed), "no order row without a key placed")
	require.Len(t, jobsByKey, len(ps.placed), "no job without a key placed")

	var unknown, committed, notCommitted, completedFirst, retried int
	for _, p := range ps.placed {
		if p.tries > 1 {
			retried++
		}
		if !p.unknown {
			continue
		}
		unknown++
		if p.outcome == jobs.EnqueueKept {
			committed++
			if p.holderDoneBeforeRetry {
				completedFirst++
			}
		} else {
			notCommitted++
		}
	}
	t.Logf("keyed enqueues: %d orders placed, %d retried; %d commits with an unknown outcome: %d had committed (the retry kept the job; %d of those jobs had completed before the retry: a live-only key would have doubled them), %d had not (the retry inserted it); switchover: first commit on the new primary %v after it began; primary killed: %v",
		len(ps.placed), retried, unknown, committed, completedFirst, notCommitted, switchover.Round(10*time.Millisecond), killed.Round(10*time.Millisecond))
	require.GreaterOrEqual(t, committed, 3, "the commits whose answer the proxy discarded had committed, and their retries said so")
}

// placing is the producers: each places orders one after another, each
// with a key of its own, until halted; an order in progress is finished
// (its retries run to the end) before halt returns.
type placing struct {
	pool   *pgxpool.Pool
	byAddr map[string]*hacluster.Node
	stop   context.CancelFunc
	done   sync.WaitGroup

	mu     sync.Mutex
	placed []placed
}

// placed is one order, as its producer saw it.
type placed struct {
	key     string
	node    string    // the node whose commit was acknowledged
	at      time.Time // when
	tries   int
	unknown bool // some commit of it failed: its outcome was unknown
	outcome jobs.EnqueueOutcome
	// holderDoneBeforeRetry: the retry found the job completed already.
	holderDoneBeforeRetry bool
}

func startPlacing(ctx context.Context, pool *pgxpool.Pool, byAddr map[string]*hacluster.Node, n int) *placing {
	stopCtx, stop := context.WithCancel(ctx)
	ps := &placing{pool: pool, byAddr: byAddr, stop: stop}
	for g := range n {
		ps.done.Add(1)
		go func() {
			defer ps.done.Done()
			for i := 0; stopCtx.Err() == nil; i++ {
				p, err := ps.place(ctx, fmt.Sprintf("ko-%d-%d", g, i))
				if err != nil {
					return // the test's context ended
				}
				ps.mu.Lock()
				ps.placed = append(ps.placed, p)
				ps.mu.Unlock()
				select {
				case <-stopCtx.Done():
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
	}
	return ps
}

func (ps *placing) halt() {
	ps.stop()
	ps.done.Wait()
}

// waitPlaced waits for n orders acknowledged by node since since, and
// returns when the first of them was.
func (ps *placing) waitPlaced(t *testing.T, node *hacluster.Node, since time.Time, n int) time.Time {
	t.Helper()
	var first time.Time
	require.Eventually(t, func() bool {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		first = time.Time{}
		count := 0
		for _, p := range ps.placed {
			if p.node == node.Name && p.at.After(since) {
				if count++; count == 1 || p.at.Before(first) {
					first = p.at
				}
			}
		}
		return count >= n
	}, 2*time.Minute, 20*time.Millisecond, "%d orders placed on %s", n, node.Name)
	return first
}

// place is the recipe: the order's transaction, run again on any error
// until it commits, with the same key. A retry of a transaction that did
// commit finds the order's row (DO NOTHING) and the job holding the key
// (Result.Outcome() is EnqueueKept); of one that did not, it inserts both.
func (ps *placing) place(ctx context.Context, key string) (placed, error) {
	p := placed{key: key}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		p.tries++
		res, node, retryAt, err := ps.placeOnce(ctx, key)
		if err == nil {
			p.node, p.at, p.outcome = node, time.Now(), res.Outcome()
			if p.unknown && p.outcome == jobs.EnqueueKept {
				p.holderDoneBeforeRetry = ps.completedBefore(ctx, res.ID, retryAt)
			}
			return p, nil
		}
		var unsure *commitError
		if errors.As(err, &unsure) {
			p.unknown = true
		}
		select {
		case <-ctx.Done():
			return p, fmt.Errorf("order %s: %w (last error %v)", key, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// placeOnce runs the order's transaction once; every statement gets 5 s,
// so that a session on a silent server fails and the retry dials anew. A
// failed COMMIT is a commitError: the outcome is unknown.
func (ps *placing) placeOnce(ctx context.Context, key string) (jobs.Result, string, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	started := time.Now()
	tx, err := ps.pool.Begin(ctx)
	if err != nil {
		return jobs.Result{}, "", started, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	node := ""
	if n := ps.byAddr[tx.Conn().PgConn().Conn().RemoteAddr().String()]; n != nil {
		node = n.Name
	}
	if _, err := tx.Exec(ctx, `INSERT INTO ko_orders (key) VALUES ($1) ON CONFLICT (key) DO NOTHING`, key); err != nil {
		return jobs.Result{}, node, started, err
	}
	res, err := keyedOrder.Enqueue(ctx, tx, Order{Key: key}, jobs.UniqueKey(key), jobs.UniquePeriod(time.Hour))
	if err != nil {
		return jobs.Result{}, node, started, err
	}
	if err := tx.Commit(ctx); err != nil {
		return jobs.Result{}, node, started, &commitError{err}
	}
	return res, node, started, nil
}

// completedBefore reports whether job id had completed before t: its
// history row says when (the database's clock; the same machine's).
func (ps *placing) completedBefore(ctx context.Context, id int64, t time.Time) bool {
	var done bool
	err := ps.pool.QueryRow(ctx, `SELECT finished_at < $2 FROM hopper_job_history WHERE id = $1`, id, t).Scan(&done)
	return err == nil && done
}
