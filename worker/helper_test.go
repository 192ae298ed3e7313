package worker_test

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// A worker in a process of its own: the test binary run again with
// helperEnv set. It handles kind "blocking" by blocking until cancelled,
// and stops on SIGTERM.
const helperEnv = "HOPPER_WORKER_HELPER_URL"

func runHelper() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv(helperEnv))
	if err != nil {
		return 2
	}
	defer pool.Close()
	w, err := worker.New(pool, worker.Config{
		ID:            os.Getenv("HOPPER_WORKER_HELPER_ID"),
		LeaseDuration: time.Second,
		// Room for the release at shutdown (its reserve is a quarter of
		// this) on a busy CI machine: with 100ms it was missed once.
		ShutdownTimeout: 2 * time.Second,
		PollInterval:    50 * time.Millisecond,
		Logger:          quiet,
	})
	if err != nil {
		return 3
	}
	blocking := jobs.MustDefine[Task]("blocking")
	if worker.Handle(w, blocking, func(ctx context.Context, _ *jobs.Job[Task]) error {
		<-ctx.Done()
		return ctx.Err()
	}) != nil {
		return 4
	}
	if err := w.Run(ctx); err != nil {
		return 5
	}
	return 0
}

// startHelper starts a worker process on the test's schema.
func startHelper(t *testing.T, b *bundle, id string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+b.URL, "HOPPER_WORKER_HELPER_ID="+id)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}
