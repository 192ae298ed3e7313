package worker_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
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
// and stops on SIGTERM. Run's error ErrWorkerIDInUse exits with
// helperIDInUse.
const (
	helperEnv = "HOPPER_WORKER_HELPER_URL"
	// helperLookAlikeEnv, "host:pid", makes the helper record that host
	// and pid in the registry (worker.LookAlike).
	helperLookAlikeEnv = "HOPPER_WORKER_HELPER_LOOKALIKE"
	// helperBeatEnv sets the helper's BeatInterval (a Go duration),
	// and its lease to ten beats.
	helperBeatEnv = "HOPPER_WORKER_HELPER_BEAT"
	helperIDInUse = 6
)

func runHelper() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv(helperEnv))
	if err != nil {
		return 2
	}
	defer pool.Close()
	if host, pid, ok := strings.Cut(os.Getenv(helperLookAlikeEnv), ":"); ok {
		n, err := strconv.Atoi(pid)
		if err != nil {
			return 2
		}
		worker.LookAlike(host, n)
	}
	cfg := worker.Config{
		ID:            os.Getenv("HOPPER_WORKER_HELPER_ID"),
		LeaseDuration: time.Second,
		// Room for the release at shutdown (its reserve is a quarter of
		// this) on a busy CI machine: with 100ms it was missed once.
		ShutdownTimeout: 2 * time.Second,
		PollInterval:    50 * time.Millisecond,
		Logger:          quiet,
	}
	if beat := os.Getenv(helperBeatEnv); beat != "" {
		d, err := time.ParseDuration(beat)
		if err != nil {
			return 2
		}
		cfg.BeatInterval, cfg.LeaseDuration = d, 10*d
	}
	w, err := worker.New(pool, cfg)
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
	if err := w.Run(ctx); errors.Is(err, worker.ErrWorkerIDInUse) {
		return helperIDInUse
	} else if err != nil {
		return 5
	}
	return 0
}

// startHelper starts a worker process on the test's schema; env adds to
// its environment (helperLookAlikeEnv, helperBeatEnv).
func startHelper(t *testing.T, b *bundle, id string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+b.URL, "HOPPER_WORKER_HELPER_ID="+id)
	cmd.Env = append(cmd.Env, env...)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// startWatchedHelper is startHelper whose exit code the test can wait
// for: it arrives on the channel once the process ends.
func startWatchedHelper(t *testing.T, b *bundle, id string, env ...string) (*exec.Cmd, <-chan int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+b.URL, "HOPPER_WORKER_HELPER_ID="+id)
	cmd.Env = append(cmd.Env, env...)
	require.NoError(t, cmd.Start())
	exited, done := make(chan int, 1), make(chan struct{})
	go func() {
		defer close(done)
		_ = cmd.Wait()
		exited <- cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	return cmd, exited
}
