package wirefault_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hopperq/hopper/internal/testbed/wirefault"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// insertSQL carries an sqlc-style marker, as Hopper's queries do.
const (
	marker    = "-- name: InsertEvent :exec"
	insertSQL = marker + "\nINSERT INTO %s (id, note) VALUES ($1, $2)"
)

var (
	serverOnce           sync.Once
	serverDSN, upstream  string
	serverErr, serverTCP error
)

// db finds the PostgreSQL to proxy: HOPPER_TEST_DATABASE_URL, DATABASE_URL,
// else root@127.0.0.1:5432/test. Without one the test skips, or fails in CI.
func db(t *testing.T) (dsn, upstreamAddr string) {
	t.Helper()
	serverOnce.Do(func() {
		serverDSN = "postgres://root@127.0.0.1:5432/test"
		for _, env := range []string{"HOPPER_TEST_DATABASE_URL", "DATABASE_URL"} {
			if v := os.Getenv(env); v != "" {
				serverDSN = v
				break
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, serverDSN)
		if err != nil {
			serverErr = err
			return
		}
		defer conn.Close(ctx)
		serverErr = conn.Ping(ctx)
		// Proxy to the address pgx actually reached, after any fallbacks.
		addr := conn.PgConn().Conn().RemoteAddr()
		if addr.Network() != "tcp" {
			serverTCP = fmt.Errorf("PostgreSQL reached over %s, the proxy needs TCP", addr.Network())
		}
		upstream = addr.String()
	})
	if err := serverErr; err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no PostgreSQL for tests (CI is set, so this fails): %v", err)
		}
		t.Skipf("no PostgreSQL for tests: %v", err)
	}
	if serverTCP != nil {
		t.Skip(serverTCP)
	}
	return serverDSN, upstream
}

// scratch gives the test a table of its own in a fresh schema and a proxy.
func scratch(t *testing.T) (p *wirefault.Proxy, dsn, table string) {
	t.Helper()
	dsn, up := db(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "wirefault_" + hex.EncodeToString(b)
	table = schema + ".events"
	direct := connect(t, dsn)
	_, err := direct.Exec(t.Context(), "CREATE SCHEMA "+schema+"; CREATE TABLE "+table+" (id bigint PRIMARY KEY, note text)")
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, dsn); err == nil {
			_, _ = conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
			_ = conn.Close(ctx)
		}
	})
	return wirefault.Start(t, up), dsn, table
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func exists(t *testing.T, dsn, table string, id int) bool {
	t.Helper()
	var n int
	require.NoError(t, connect(t, dsn).QueryRow(t.Context(), "SELECT count(*) FROM "+table+" WHERE id = $1", id).Scan(&n))
	return n == 1
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

var modes = []pgx.QueryExecMode{
	pgx.QueryExecModeCacheStatement, // pgx's default: named statement, Parse once
	pgx.QueryExecModeCacheDescribe,
	pgx.QueryExecModeDescribeExec,
	pgx.QueryExecModeExec, // unnamed statement, Parse+Bind+Execute+Sync at once
	pgx.QueryExecModeSimpleProtocol,
}

func TestForwardsEveryQueryMode(t *testing.T) {
	t.Parallel()
	p, dsn, table := scratch(t)
	pool, err := pgxpool.New(t.Context(), p.URL(dsn))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ctx := timeout(t, 30*time.Second)

	for i, mode := range modes {
		for run := range 2 { // the second run reuses pgx's caches
			id := 10*i + run
			_, err := pool.Exec(ctx, fmt.Sprintf(insertSQL, table), mode, id, mode.String())
			require.NoError(t, err, mode)
			var note string
			require.NoError(t, pool.QueryRow(ctx, "SELECT note FROM "+table+" WHERE id = $1", mode, id).Scan(&note))
			require.Equal(t, mode.String(), note)
		}
	}
	batch := &pgx.Batch{}
	batch.Queue(fmt.Sprintf(insertSQL, table), 100, "batch")
	batch.Queue("SELECT count(*) FROM " + table).QueryRow(func(r pgx.Row) error {
		var n int
		if err := r.Scan(&n); err != nil {
			return err
		}
		if n != 2*len(modes)+1 {
			return fmt.Errorf("count %d", n)
		}
		return nil
	})
	require.NoError(t, pool.SendBatch(ctx, batch).Close())
	require.Zero(t, p.Fired(marker))
}

func TestCutAfterReplyCommitsButBreaksTheClient(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			p, dsn, table := scratch(t)
			ctx := timeout(t, 30*time.Second)
			insert := fmt.Sprintf(insertSQL, table)

			// On a connection whose statement is already prepared and cached.
			conn := connect(t, p.URL(dsn))
			_, err := conn.Exec(ctx, insert, mode, 1, "before")
			require.NoError(t, err)
			p.CutAfterReply(marker, 1)
			_, err = conn.Exec(ctx, insert, mode, 2, "cut")
			require.Error(t, err)
			require.True(t, conn.IsClosed())
			require.Equal(t, 1, p.Fired(marker))
			require.True(t, exists(t, dsn, table, 2), "the cut statement must have committed")

			// On a fresh connection, where pgx prepares first: the fault
			// must wait for the execution, not fire on the Parse.
			p.CutAfterReply(marker, 1)
			_, err = connect(t, p.URL(dsn)).Exec(ctx, insert, mode, 3, "cut fresh")
			require.Error(t, err)
			require.Equal(t, 2, p.Fired(marker))
			require.True(t, exists(t, dsn, table, 3))

			// Disarmed once n executions fired.
			_, err = connect(t, p.URL(dsn)).Exec(ctx, insert, mode, 4, "after")
			require.NoError(t, err)
			require.Equal(t, 2, p.Fired(marker))
		})
	}
	t.Run("batch", func(t *testing.T) {
		t.Parallel()
		p, dsn, table := scratch(t)
		ctx := timeout(t, 30*time.Second)
		conn := connect(t, p.URL(dsn))
		p.CutAfterReply(marker, 1)
		// One Sync ends the whole batch: it commits as one implicit
		// transaction, and the cut comes after its single ReadyForQuery.
		batch := &pgx.Batch{}
		batch.Queue(fmt.Sprintf(insertSQL, table), 1, "a")
		batch.Queue(fmt.Sprintf(insertSQL, table), 2, "b")
		batch.Queue("INSERT INTO "+table+" (id, note) VALUES ($1, 'c')", 3)
		require.Error(t, conn.SendBatch(ctx, batch).Close())
		require.Equal(t, 1, p.Fired(marker))
		for id := 1; id <= 3; id++ {
			require.True(t, exists(t, dsn, table, id), id)
		}
	})
}

// FailAfterReply: the statement commits, the client gets the error given
// instead of its reply, and its connection goes on, as after a refusal.
func TestFailAfterReplyCommitsButRefuses(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			p, dsn, table := scratch(t)
			ctx := timeout(t, 30*time.Second)
			insert := fmt.Sprintf(insertSQL, table)
			conn := connect(t, p.URL(dsn))
			_, err := conn.Exec(ctx, insert, mode, 1, "before")
			require.NoError(t, err)

			const msg = "could not commit transaction for shard 102008 on at least one active node"
			p.FailAfterReply(marker, 1, "XX000", msg)
			_, err = conn.Exec(ctx, insert, mode, 2, "failed")
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			require.Equal(t, "XX000", pgErr.Code)
			require.Equal(t, msg, pgErr.Message)
			require.Equal(t, 1, p.Fired(marker))
			require.True(t, exists(t, dsn, table, 2), "the failed statement must have committed")

			require.False(t, conn.IsClosed(), "the connection goes on")
			_, err = conn.Exec(ctx, insert, mode, 3, "after")
			require.NoError(t, err)
			require.True(t, exists(t, dsn, table, 3))
		})
	}
}

func TestStallAfterRequest(t *testing.T) {
	t.Parallel()
	p, dsn, table := scratch(t)
	insert := fmt.Sprintf(insertSQL, table)

	// Held until the client's deadline: it fails though the row committed.
	conn := connect(t, p.URL(dsn))
	p.StallAfterRequest(marker, 1)
	_, err := conn.Exec(timeout(t, 300*time.Millisecond), insert, 1, "held")
	require.Error(t, err)
	require.True(t, conn.IsClosed())
	require.NoError(t, p.WaitFired(timeout(t, 10*time.Second), marker, 1))
	require.True(t, exists(t, dsn, table, 1))
	p.Release()

	// Held, then released: the client gets the reply late but intact.
	conn = connect(t, p.URL(dsn))
	p.StallAfterRequest(marker, 1)
	done := make(chan error, 1)
	ctx := timeout(t, 30*time.Second)
	go func() {
		_, err := conn.Exec(ctx, insert, 2, "released")
		done <- err
	}()
	require.NoError(t, p.WaitFired(timeout(t, 10*time.Second), marker, 2))
	select {
	case err := <-done:
		t.Fatalf("reply got through while held: %v", err)
	default:
	}
	p.Release()
	require.NoError(t, <-done)
	var n int
	require.NoError(t, conn.QueryRow(timeout(t, 10*time.Second), "SELECT count(*) FROM "+table).Scan(&n))
	require.Equal(t, 2, n)
}

func TestStallAndUnstall(t *testing.T) {
	t.Parallel()
	p, dsn, _ := scratch(t)
	pool, err := pgxpool.New(t.Context(), p.URL(dsn))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(timeout(t, 10*time.Second), "SELECT 1")
	require.NoError(t, err)
	held := connect(t, p.URL(dsn))

	p.Stall()
	_, err = pool.Exec(timeout(t, 300*time.Millisecond), "SELECT 1")
	require.Error(t, err)
	_, err = pgx.Connect(timeout(t, 300*time.Millisecond), p.URL(dsn))
	require.Error(t, err, "new connections get nothing while stalled")

	done := make(chan error, 1)
	ctx := timeout(t, 30*time.Second)
	go func() {
		var n int
		err := held.QueryRow(ctx, "SELECT $1::int", 7).Scan(&n)
		if err == nil && n != 7 {
			err = fmt.Errorf("got %d", n)
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("query answered while stalled: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	p.Unstall()
	require.NoError(t, <-done, "what was held goes through after Unstall")
	_, err = pool.Exec(timeout(t, 10*time.Second), "SELECT 1")
	require.NoError(t, err)
}

func TestRefuse(t *testing.T) {
	t.Parallel()
	p, dsn, _ := scratch(t)
	open := connect(t, p.URL(dsn))

	p.Refuse(true)
	_, err := pgx.Connect(timeout(t, 10*time.Second), p.URL(dsn))
	require.Error(t, err)
	_, err = open.Exec(timeout(t, 10*time.Second), "SELECT 1")
	require.NoError(t, err, "open connections are unaffected")

	p.Refuse(false)
	_, err = connect(t, p.URL(dsn)).Exec(timeout(t, 10*time.Second), "SELECT 1")
	require.NoError(t, err)
}

func TestCutAll(t *testing.T) {
	t.Parallel()
	p, dsn, _ := scratch(t)
	a, b := connect(t, p.URL(dsn)), connect(t, p.URL(dsn))

	p.CutAll()
	for _, conn := range []*pgx.Conn{a, b} {
		_, err := conn.Exec(timeout(t, 10*time.Second), "SELECT 1")
		require.Error(t, err)
	}
	_, err := connect(t, p.URL(dsn)).Exec(timeout(t, 10*time.Second), "SELECT 1")
	require.NoError(t, err)
}

func TestCloseWhileStalledAndHolding(t *testing.T) {
	t.Parallel()
	p, dsn, table := scratch(t)
	holding, stalled := connect(t, p.URL(dsn)), connect(t, p.URL(dsn))
	p.StallAfterRequest(marker, 1)
	errs := make(chan error, 2)
	ctx := timeout(t, time.Minute)
	go func() {
		_, err := holding.Exec(ctx, fmt.Sprintf(insertSQL, table), 1, "held")
		errs <- err
	}()
	require.NoError(t, p.WaitFired(timeout(t, 10*time.Second), marker, 1))
	p.Stall()
	go func() {
		_, err := stalled.Exec(ctx, "SELECT 1")
		errs <- err
	}()

	require.NoError(t, p.Close())
	require.Error(t, <-errs)
	require.Error(t, <-errs)
	require.NoError(t, p.Close(), "Close is idempotent")
	require.Error(t, p.WaitFired(t.Context(), marker, 2))
}

func TestURL(t *testing.T) {
	t.Parallel()
	p := wirefault.Start(t, "127.0.0.1:1")
	host, port, err := net.SplitHostPort(p.Addr())
	require.NoError(t, err)
	for _, tc := range []struct{ dsn, want string }{
		{"", "host=" + host + " port=" + port + " sslmode=disable"},
		{"host=db user=root sslmode=require", "host=db user=root sslmode=require host=" + host + " port=" + port + " sslmode=disable"},
		{"postgres://root@db:5433/test?sslmode=require", "postgres://root@" + p.Addr() + "/test?sslmode=disable"},
		{"postgresql://a,b:6/test?host=c&search_path=s", "postgresql://" + p.Addr() + "/test?search_path=s&sslmode=disable"},
	} {
		require.Equal(t, tc.want, p.URL(tc.dsn), tc.dsn)
	}
	// The keyword/value result must mean the proxy to pgx too.
	cfg, err := pgconn.ParseConfig(p.URL("host=db port=1 user=root sslmode=verify-full"))
	require.NoError(t, err)
	require.Equal(t, host, cfg.Host)
	require.Equal(t, port, strconv.Itoa(int(cfg.Port)))
	require.Nil(t, cfg.TLSConfig)
}
