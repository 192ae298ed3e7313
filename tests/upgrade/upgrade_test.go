package upgrade

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/worker"
)

// noopJob is the payload of the benchmark's no-op kind, which the previous
// build's `hopper bench --role worker` runs.
type noopJob struct {
	Pad string `json:"pad,omitempty"`
}

var noop = jobs.MustDefine[noopJob]("bench.noop")

// failing is the benchmark's kind that fails for good on its first run
// (the soak's dead jobs), which the previous build's worker runs too.
var failing = jobs.MustDefine[noopJob]("bench.fail")

// failEvery is how many jobs of a producer's batch of 50 there are per
// failing one.
const failEvery = 50

// TestUpgradeUnderLoad: the newest migrations, applied by this build to a
// schema at the version before them while the workers of the build before
// them (the commit before the migrations were added, built from git) work
// a steady stream of jobs: under the build before the newest commit that
// added migrations, and under the one before the commit before that (more
// migrations under the older build). The migration waits for locks no longer than its lock
// timeout; the old workers go on working on the new schema; then this
// build's workers run beside them. Every no-op job enqueued completes
// exactly once (each leaves one history row), every failing one is dead
// once (moved there by either build, before, during or after the
// migrations), no worker logs an error and the old worker process stops
// cleanly.
func TestUpgradeUnderLoad(t *testing.T) {
	testdb.Slow(t, "builds the previous Hopper from git and upgrades under its workers")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	// The two newest commits that added migrations, each from the oldest
	// migration it added: a commit may add several (19 to 21 came
	// together), and its previous build ran on the version before them all.
	vs := schema.Versions()
	var firsts []uint
	var last string
	for i := len(vs) - 1; i >= 0; i-- {
		c := addedIn(ctx, t, root, vs[i])
		if c != last {
			if len(firsts) == 2 {
				break
			}
			firsts = append(firsts, vs[i])
			last = c
		} else {
			firsts[len(firsts)-1] = vs[i]
		}
	}
	for _, added := range firsts {
		t.Run(fmt.Sprintf("under the build before migration %d", added), func(t *testing.T) {
			upgradeUnderLoad(t, added)
		})
	}
}

// upgradeUnderLoad migrates a schema at the version before migration
// added to the latest under the workers of the build before added.
func upgradeUnderLoad(t *testing.T, added uint) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	vs := schema.Versions()
	latest := vs[len(vs)-1]
	prev := vs[slices.Index(vs, added)-1]
	oldBin := buildBefore(ctx, t, root, added)
	var newDone atomic.Int64 // jobs this build's worker ran

	d := testdb.NewAtVersion(t, prev)
	old := startOldWorker(ctx, t, oldBin, d.URL)

	// Producers through the SQL API, which every build since migration
	// 12 offers: 50 jobs a statement, as fast as the workers keep up.
	var enqueued, enqueuedFailing atomic.Int64
	prodCtx, stopProducing := context.WithCancel(ctx)
	var pwg sync.WaitGroup
	perr := make(chan error, 2)
	batch := "[" + strings.Repeat(`{"kind": "bench.noop", "payload": {}},`, failEvery-1) + `{"kind": "bench.fail", "payload": {}}` + "]"
	for range 2 {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for prodCtx.Err() == nil {
				if enqueued.Load()-old.completed.Load()-newDone.Load() > 2000 {
					time.Sleep(5 * time.Millisecond) // a backlog, not a flood
					continue
				}
				var n int64
				err := d.Pool.QueryRow(context.WithoutCancel(prodCtx), "SELECT count(*) FROM hopper_enqueue_many($1::jsonb)", batch).Scan(&n)
				if err != nil {
					perr <- err
					return
				}
				enqueued.Add(n - n/failEvery)
				enqueuedFailing.Add(n / failEvery)
			}
		}()
	}
	waitFor(ctx, t, "the old workers work", func() bool { return old.completed.Load() >= 1000 })

	var logs bytes.Buffer
	var logMu sync.Mutex
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(&logs, format+"\n", args...)
	}
	mg, err := schema.NewMigrator(ctx, d.Pool, schema.LockTimeout(500*time.Millisecond, 20), schema.Logf(logf))
	require.NoError(t, err)
	began := time.Now()
	require.NoError(t, mg.Up(ctx))
	took := time.Since(began)
	v, dirty, err := mg.Version()
	require.NoError(t, err)
	require.Equal(t, latest, v)
	require.False(t, dirty)
	require.NoError(t, mg.Close())
	atMigration := old.completed.Load()
	waitFor(ctx, t, "the old workers work on the new schema", func() bool { return old.completed.Load() >= atMigration+1000 })

	// This build's workers beside the old ones.
	logBuf := &syncBuffer{}
	w, err := worker.New(d.Pool, worker.Config{Queues: map[string]int{jobs.DefaultQueue: 50},
		KeepHistoryByQueue: map[string]time.Duration{jobs.DefaultQueue: time.Hour},
		// Dead jobs' partitions, into which the old workers' failures go too.
		DeadRetention: time.Hour, SweepInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, noop, func(context.Context, *jobs.Job[noopJob]) error { newDone.Add(1); return nil }))
	require.NoError(t, worker.Handle(w, failing, func(context.Context, *jobs.Job[noopJob]) error {
		return worker.Permanent(errors.New("fails on purpose"))
	}))
	runCtx, stopNew := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(runCtx) }()
	beside := old.completed.Load()
	waitFor(ctx, t, "both builds work side by side", func() bool {
		return newDone.Load() >= 1000 && old.completed.Load() >= beside+1000
	})

	stopProducing()
	pwg.Wait()
	select {
	case err := <-perr:
		require.NoError(t, err, "a producer")
	default:
	}
	waitFor(ctx, t, "every job worked", func() bool {
		var live int64
		require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM hopper_jobs").Scan(&live))
		return live == 0
	})
	stopNew()
	require.NoError(t, <-runErr)
	old.stop(t)

	var history, distinct, dead, deadDistinct, deadKinds int64
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT id) FROM hopper_job_history").Scan(&history, &distinct))
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT id), count(DISTINCT kind) FROM hopper_dead_jobs").Scan(&dead, &deadDistinct, &deadKinds))
	require.Equal(t, enqueued.Load(), history, "every no-op job enqueued completed, kept once in the history")
	require.Equal(t, history, distinct)
	require.Equal(t, enqueuedFailing.Load(), dead, "every failing job is dead")
	require.Equal(t, dead, deadDistinct)
	require.EqualValues(t, 1, deadKinds, "and only those")
	var deadInParts int64
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM hopper_dead_jobs WHERE partition_at IS NOT NULL").Scan(&deadInParts))
	require.Equal(t, enqueued.Load(), old.completed.Load()+newDone.Load()+old.unconfirmed.Load(), "each job reported done once, by one build")
	require.NotContains(t, logBuf.String(), "level=ERROR", "this build's worker logged an error")
	t.Logf("migrations %d to %d applied under load in %v (%d lock timeouts retried); %d jobs: %d by the previous build (%d after the migration), %d by this one; %d dead, %d of them in time partitions",
		prev+1, latest, took.Round(time.Millisecond), strings.Count(logs.String(), "waited lock_timeout"), enqueued.Load(),
		old.completed.Load(), old.completed.Load()-atMigration, newDone.Load(), dead, deadInParts)
}

// addedIn is the commit that added migration version's file; it skips the
// test where the repository's history is missing or the file is not
// committed yet.
func addedIn(ctx context.Context, t *testing.T, root string, version uint) string {
	t.Helper()
	if out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--is-shallow-repository").Output(); err != nil || strings.TrimSpace(string(out)) != "false" {
		t.Skipf("the previous build comes from the repository's history, which this checkout lacks (a shallow clone or no git): %v", err)
	}
	files, err := filepath.Glob(filepath.Join(root, "schema", fmt.Sprintf("%06d_*.up.sql", version)))
	require.NoError(t, err)
	require.Len(t, files, 1, "migration %d's file", version)
	// Any file of the version's number, the oldest first: a migration
	// renamed before its release (33 was) began with its first name, and
	// the build before it is the one before that.
	pattern := ":(glob)schema/" + fmt.Sprintf("%06d_*.up.sql", version)
	out, err := exec.CommandContext(ctx, "git", "-C", root, "log", "--format=%H", "--diff-filter=A", "--", pattern).Output()
	require.NoError(t, err)
	commits := strings.Fields(string(out))
	added := ""
	if len(commits) > 0 {
		added = commits[len(commits)-1]
	}
	if added == "" {
		t.Skipf("migration %d is not committed yet: no build before it to take from git", version)
	}
	return added
}

// buildBefore builds the hopper command as it was just before migration
// version was added: the parent of the commit that added its file, read
// from git (git archive) into a temporary directory.
func buildBefore(ctx context.Context, t *testing.T, root string, version uint) string {
	t.Helper()
	added := addedIn(ctx, t, root, version)
	dir := t.TempDir()
	archive := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2^" | tar -x -C "$3"`, "sh", root, added, dir)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s^: %v\n%s", added, err, out)
	}
	bin := filepath.Join(dir, "hopper-previous")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/hopper")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the hopper of %s^: %v\n%s", added, err, out)
	}
	t.Logf("previous build: %s^ (before migration %d)", added[:12], version)
	return bin
}

// oldWorker is the previous build's benchmark worker process, which runs
// bench.noop jobs and reports its counters on stdout.
type oldWorker struct {
	cmd                    *exec.Cmd
	stderr                 *syncBuffer
	completed, unconfirmed atomic.Int64
	exited                 chan struct{}
}

func startOldWorker(ctx context.Context, t *testing.T, bin, url string) *oldWorker {
	t.Helper()
	cmd := exec.Command(bin, "bench", "--role", "worker", "--workers", "2", "--concurrency", "50", "--keep-history", "1h")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	o := &oldWorker{cmd: cmd, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = o.stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-o.exited
	})
	ready := make(chan struct{})
	go func() {
		defer close(o.exited)
		s := bufio.NewScanner(out)
		for s.Scan() {
			if s.Text() == "ready" {
				close(ready)
				continue
			}
			var done, unconfirmed int64
			// The previous build's report; a newer one adds fields after these.
			if _, err := fmt.Sscanf(s.Text(), "completed %d unconfirmed %d", &done, &unconfirmed); err == nil {
				o.completed.Store(done)
				o.unconfirmed.Store(unconfirmed)
			}
		}
	}()
	select {
	case <-ready:
	case <-o.exited:
		t.Fatalf("the previous build's worker exited at start: %s", o.stderr.String())
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	return o
}

// stop ends the old worker with SIGTERM: it must exit cleanly, having
// reported its last counters.
func (o *oldWorker) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, o.cmd.Process.Signal(syscall.SIGTERM))
	<-o.exited
	err := o.cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Fatalf("the previous build's worker exited with %v: %s", err, o.stderr.String())
	}
	require.NoError(t, err)
}

// waitFor polls cond until it holds, failing the test when ctx ends.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not before the test's deadline", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// syncBuffer is a bytes.Buffer for several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
