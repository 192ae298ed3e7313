package chaos

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// TestWorkerStoppedAtOnceWarnsNothing: a worker stopped right after it
// started (a deploy that rolls back, a test, Ctrl-C) shuts down; nothing
// failed, so it logs no warning, though its wake-up listener may still be
// connecting when the shutdown cancels it.
func TestWorkerStoppedAtOnceWarnsNothing(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	// The listener's connect races the shutdown: a few runs make sure one
	// stops it while it connects.
	for i := range 10 {
		var logs testdb.Buffer
		w, err := worker.New(d.Pool, worker.Config{
			Logger:          slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			ShutdownTimeout: time.Second,
		})
		require.NoError(t, err)
		require.NoError(t, worker.Handle(w, jobs.MustDefine[Chore]("stop.at.once"), func(context.Context, *jobs.Job[Chore]) error { return nil }))
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- w.Run(ctx) }()
		testdb.WaitFor(t, "the worker started", func() bool { return strings.Contains(logs.String(), "hopper worker started") })
		cancel()
		require.NoError(t, <-errc)
		require.Contains(t, logs.String(), "hopper worker stopped")
		require.NotContains(t, logs.String(), "level=WARN", "run %d: a shutdown is no failure:\n%s", i, logs.String())
		require.NotContains(t, logs.String(), "level=ERROR", "run %d:\n%s", i, logs.String())
	}
}
