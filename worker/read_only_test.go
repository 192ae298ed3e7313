package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// Only a read-only server's refusal is one (a standby, a demoted
// primary); other errors, of the session or of the statement, are not.
func TestReadOnlyError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err      error
		readOnly bool
	}{
		{nil, false},
		{errors.New("broken pipe"), false},
		{&pgconn.PgError{Code: "22021"}, false}, // character not in repertoire
		{&pgconn.PgError{Code: "25006"}, true},  // read-only: a standby, a demoted primary
		{&pgconn.PgError{Code: "08006"}, false},
	} {
		require.Equal(t, tc.readOnly, readOnlyError(tc.err), "%v", tc.err)
	}
}

// A write refused as read-only resets the pool, once however many
// components meet it at once: the next statement runs on a new session.
// Other errors leave the pool alone.
func TestReadOnlyGuardResetsThePool(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tdb := testdb.New(t)
	pcfg, err := pgxpool.ParseConfig(tdb.URL)
	require.NoError(t, err)
	pcfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on" // as a standby answers
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	defer pool.Close()
	var logs lockedBuffer
	// An hour between resets: the burst below is one, however slow the
	// machine.
	g := newReadOnlyGuard(pool, slog.New(slog.NewTextHandler(&logs, nil)), time.Hour, nil)
	backend := func() uint32 {
		t.Helper()
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer c.Release()
		return c.Conn().PgConn().PID()
	}

	before := backend()
	require.False(t, g.check(errors.New("connection reset")))
	require.False(t, g.check(nil))
	require.Equal(t, before, backend(), "other errors keep the session")

	_, err = db.New(pool).Enqueue(ctx, db.EnqueueParams{Queue: "default", Kind: "k", Version: 1,
		Payload: json.RawMessage(`{}`), RunAt: time.Now(), MaxAttempts: 3})
	require.True(t, readOnlyError(err), "%v", err)
	var wg sync.WaitGroup
	for range 8 { // every component at once
		wg.Add(1)
		go func() { defer wg.Done(); require.True(t, g.check(err)) }()
	}
	wg.Wait()
	after := backend()
	require.NotEqual(t, before, after, "a new session")
	require.Equal(t, 1, strings.Count(logs.String(), "replacing the pool's sessions"), "one reset, said once")
	require.True(t, g.check(err))
	require.Equal(t, after, backend(), "not again within the guard's interval")
}

// lockedBuffer is a log destination several goroutines write to.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
