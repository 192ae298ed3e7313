package hopper_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

var (
	stopPlain   = jobs.MustDefine[Email]("poolstop.plain")
	stopDurable = jobs.MustDefine[Email]("poolstop.durable")
	stopAckTx   = jobs.MustDefine[Email]("poolstop.acktx")
)

// stallConn is a connection whose writes, some of them, return only a
// while after the bytes went out: the writing goroutine descheduled on a
// loaded machine. pgconn starts its background reader when a write takes
// longer than 15 ms (pgconn.go, enterPotentialWriteReadDeadlock); the
// reader then takes the server's answer while the write is still "in
// progress", which is the window the stall widens.
type stallConn struct {
	net.Conn
	stall func() time.Duration
}

func (c *stallConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if d := c.stall(); d > 0 {
		time.Sleep(d)
	}
	return n, err
}

// TestWorkerStopLeavesPoolUsable (issue 61): a worker sharing the user's
// pool is stopped at a random moment, its statements (claims, heartbeats,
// acks, durable steps, AckTx transactions, handlers' own queries)
// cancelled wherever they are; then every connection of that pool must
// answer the client's queries. With pgx up to v5.11, a statement whose
// context was cancelled after its answer had been read in the background
// (a slow write) succeeded but left the reader's "i/o timeout" buffered
// on the connection, which went back to the pool healthy: the next query
// on it failed with "failed to deallocate cached statement(s): timeout:
// read tcp ...: i/o timeout" or a bare "timeout: read tcp ...".
//
// Seen poisoned that way: the heartbeat's own connection (BeatWorker) and
// the promoter's (Promote), both statements that succeeded as the stop
// cancelled them.
//
// Three in four of the pool's writes stall 20-40 ms (stallConn), as on a
// loaded machine; the stop points and the stalls are drawn from a seed, printed, that
// HOPPER_POOL_STOP_SEED repeats (the goroutines' interleaving is not).
func TestWorkerStopLeavesPoolUsable(t *testing.T) {
	b := setup(t)
	seed := propertySeed(t, "HOPPER_POOL_STOP_SEED")
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	draw := func(n int) int {
		mu.Lock()
		defer mu.Unlock()
		return rng.IntN(n)
	}
	var stalls atomic.Int64
	cfg, err := pgxpool.ParseConfig(b.URL)
	require.NoError(t, err)
	cfg.MaxConns = 4 // few connections: every one serves the worker in turn
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &stallConn{Conn: c, stall: func() time.Duration {
			if draw(4) == 0 {
				return 0
			}
			stalls.Add(1)
			return time.Duration(20+draw(20)) * time.Millisecond
		}}, nil
	}
	pool, err := pgxpool.NewWithConfig(b.Ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	client := hopper.NewClient(pool)
	_, err = b.Pool.Exec(b.Ctx, "CREATE TABLE poolstop_effects (job_id bigint, attempt int)")
	require.NoError(t, err)

	rounds := testdb.Rounds(8)
	for round := range rounds {
		var ran atomic.Int64
		var ids []int64
		for range 20 {
			for _, k := range []*jobs.Kind[Email]{stopPlain, stopDurable, stopAckTx} {
				res, err := k.Enqueue(b.Ctx, b.Pool, Email{To: "x"})
				require.NoError(t, err)
				ids = append(ids, res.ID)
			}
		}
		w, err := worker.New(pool, worker.Config{
			Queues:       map[string]int{"default": 8},
			PollInterval: 10 * time.Millisecond, BeatInterval: 20 * time.Millisecond,
			// Handlers still running 300 ms into the stop are cancelled.
			ShutdownTimeout: 400 * time.Millisecond,
			RetryBackoff:    worker.Backoff{Base: time.Millisecond, Max: time.Millisecond},
			Logger:          quiet,
		})
		require.NoError(t, err)
		require.NoError(t, worker.Handle(w, stopPlain, func(ctx context.Context, j *jobs.Job[Email]) error {
			ran.Add(1)
			for range 3 {
				if _, err := client.GetJob(ctx, j.ID); err != nil {
					return err
				}
			}
			return nil
		}))
		require.NoError(t, worker.Handle(w, stopDurable, func(ctx context.Context, j *jobs.Job[Email]) error {
			ran.Add(1)
			if _, err := worker.Step(ctx, j, "one", func(context.Context) (int, error) { return 1, nil }); err != nil {
				return err
			}
			_, err := worker.StepTx(ctx, j, "two", func(ctx context.Context, tx pgx.Tx) (int, error) {
				_, err := tx.Exec(ctx, "INSERT INTO poolstop_effects VALUES ($1, $2)", j.ID, j.Attempt)
				return 2, err
			})
			return err
		}))
		require.NoError(t, worker.Handle(w, stopAckTx, func(ctx context.Context, j *jobs.Job[Email]) error {
			ran.Add(1)
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(context.WithoutCancel(ctx))
			if _, err := tx.Exec(ctx, "INSERT INTO poolstop_effects VALUES ($1, $2)", j.ID, j.Attempt); err != nil {
				return err
			}
			if err := worker.AckTx(ctx, tx, j); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}))
		ctx, cancel := context.WithCancel(b.Ctx)
		errc := make(chan error, 1)
		go func() { errc <- w.Run(ctx) }()
		testdb.WaitFor(t, "handlers running", func() bool { return ran.Load() > 0 })
		stopAfter := time.Duration(draw(300)) * time.Millisecond
		time.Sleep(stopAfter)
		cancel()
		select {
		case err := <-errc:
			require.NoError(t, err, "round %d", round)
		case <-time.After(time.Minute):
			t.Fatalf("round %d: the worker did not stop", round)
		}

		// Every connection the pool holds answers, one by one: a poisoned
		// one fails its first statement.
		conns := pool.AcquireAllIdle(b.Ctx)
		if len(conns) == 0 {
			// The stop's cancellations closed every connection it held
			// (a cancelled statement's connection is closed, not
			// returned): the pool's next one is a new one, which must
			// answer too.
			c, err := pool.Acquire(b.Ctx)
			require.NoError(t, err, "round %d", round)
			conns = []*pgxpool.Conn{c}
		}
		errs := make([]error, len(conns))
		for i, c := range conns {
			_, err := client.ListQueuesTx(b.Ctx, c)
			if err == nil {
				if _, err = client.GetJobTx(b.Ctx, c, ids[0]); errors.Is(err, hopper.ErrNotFound) {
					err = nil // done and gone
				}
			}
			if err == nil {
				_, err = client.GetStatsTx(b.Ctx, c)
			}
			errs[i] = err
		}
		for _, c := range conns {
			c.Release()
		}
		for i, err := range errs {
			require.NoError(t, err, "round %d (stopped %v after the first handler ran): connection %d of %d after the worker stopped",
				round, stopAfter, i+1, len(conns))
		}
		// And through the pool, as a caller would.
		_, err = client.ListQueues(b.Ctx)
		require.NoError(t, err, "round %d", round)
		_, err = client.GetStats(b.Ctx)
		require.NoError(t, err, "round %d", round)
		if _, err := client.GetJob(b.Ctx, ids[len(ids)-1]); err != nil && !errors.Is(err, hopper.ErrNotFound) {
			require.NoError(t, err, "round %d", round)
		}
	}
	t.Logf("%d rounds, %d stalled writes", rounds, stalls.Load())
}
