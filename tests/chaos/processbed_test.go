package chaos

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// processBed is a fresh schema and the worker processes a test runs
// against it. A worker process is this test binary run again, with
// environment variables that make TestMain run a worker instead of the
// tests; every process still running is killed when the test ends.
type processBed struct {
	t       *testing.T
	ctx     context.Context
	db      *testdb.DB
	workers map[string]*exec.Cmd
	// explain, if set, says what the tables show when a wait fails.
	explain func() string
}

// newProcessBed makes the schema, runs setup (the test's own tables and
// triggers) in it, and bounds the whole test by limit.
func newProcessBed(t *testing.T, limit time.Duration, setup ...string) *processBed {
	t.Helper()
	d := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	for _, stmt := range setup {
		_, err := d.Pool.Exec(ctx, stmt)
		require.NoError(t, err)
	}
	b := &processBed{t: t, ctx: ctx, db: d, workers: map[string]*exec.Cmd{}}
	t.Cleanup(func() {
		for _, cmd := range b.workers {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return b
}

// spawn starts worker id with env added to the test's environment.
func (b *processBed) spawn(id string, env ...string) {
	b.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	require.NoError(b.t, cmd.Start())
	b.workers[id] = cmd
}

// stop signals worker id and waits for it to exit; after SIGTERM it must
// exit cleanly.
func (b *processBed) stop(id string, sig syscall.Signal) {
	b.t.Helper()
	cmd := b.workers[id]
	require.NoError(b.t, cmd.Process.Signal(sig))
	err := cmd.Wait()
	if sig == syscall.SIGTERM {
		require.NoError(b.t, err, "worker %s exits cleanly on SIGTERM", id)
	}
	delete(b.workers, id)
}

func (b *processBed) count(query string, args ...any) int64 {
	b.t.Helper()
	var n int64
	require.NoError(b.t, b.db.Pool.QueryRow(b.ctx, query, args...).Scan(&n))
	return n
}

// waitWithin polls cond from the test's goroutine (count calls require, so
// this is no require.Eventually) until it holds, and fails the test after
// limit: the limit catches a stuck run, not a slow one, so it is generous.
func (b *processBed) waitWithin(what string, limit time.Duration, cond func() bool) {
	b.t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			state := ""
			if b.explain != nil {
				state = " (" + b.explain() + ")"
			}
			b.t.Fatalf("%s: not within %v%s", what, limit, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFor is waitWithin two minutes.
func (b *processBed) waitFor(what string, cond func() bool) {
	b.t.Helper()
	b.waitWithin(what, 2*time.Minute, cond)
}
