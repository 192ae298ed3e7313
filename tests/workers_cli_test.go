package tests

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
	"github.com/hopperq/hopper/jobs"
)

// workersBed is a schema with a registry of workers written as the test
// needs them (testfactory.Worker), and jobs they hold.
type workersBed struct {
	t      *testing.T
	ctx    context.Context
	d      *testdb.DB
	client *hopper.Client
}

func newWorkersBed(t *testing.T) *workersBed {
	t.Helper()
	t.Parallel()
	d := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &workersBed{t: t, ctx: ctx, d: d, client: hopper.NewClient(d.Pool)}
}

func (b *workersBed) worker(opts testfactory.WorkerOpts) {
	b.t.Helper()
	testfactory.Worker(b.ctx, b.t, b.d.Pool, &opts)
}

// held writes a running job that owner holds, on its last attempt or not.
func (b *workersBed) held(owner string, lastAttempt bool) int64 {
	b.t.Helper()
	maxAttempts := int32(3)
	if lastAttempt {
		maxAttempts = 1
	}
	return testfactory.Job(b.ctx, b.t, b.d.Pool, &testfactory.JobOpts{
		State: testfactory.Running, LeaseOwner: owner, MaxAttempts: maxAttempts}).ID
}

func (b *workersBed) state(id int64) jobs.State {
	b.t.Helper()
	row, err := b.client.GetJob(b.ctx, id)
	require.NoError(b.t, err)
	return row.State
}

func (b *workersBed) run(stdin string, args ...string) result {
	b.t.Helper()
	return runHopper(b.t, b.d.URL, stdin, args...)
}

// TestCLIWorkersList: hopper workers list shows every worker of the
// registry, live and gone, with its host, pid, queues, the jobs it holds,
// its last beat and its state; --json prints the same with snake_case
// keys, durations in seconds.
func TestCLIWorkersList(t *testing.T) {
	b := newWorkersBed(t)
	r := b.run("", "workers", "list")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "(no workers)\n", r.stdout)
	r = b.run("", "workers", "list", "--json")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "[]\n", r.stdout)

	b.worker(testfactory.WorkerOpts{ID: "gone-1", Host: "node-a", PID: 11, Queues: []string{"email", "default"},
		StaleAfter: time.Second, LastBeatAgo: 5 * time.Minute})
	b.worker(testfactory.WorkerOpts{ID: "live-1", Host: "node-b", PID: 22, StaleAfter: time.Hour})
	b.worker(testfactory.WorkerOpts{ID: "sched-1", Host: "node-c", PID: 33, Queues: []string{}, StaleAfter: time.Hour})
	b.held("gone-1", false)
	b.held("gone-1", true)
	b.held("live-1", false)

	r = b.run("", "workers", "list")
	require.Zero(t, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4, r.stdout)
	require.Regexp(t, `^ID\s+HOST\s+PID\s+QUEUES\s+JOBS HELD\s+LAST BEAT\s+STATE$`, lines[0])
	require.Regexp(t, `^gone-1\s+node-a\s+11\s+email,default\s+2\s+5m\d\ds ago\s+gone$`, lines[1])
	require.Regexp(t, `^live-1\s+node-b\s+22\s+default\s+1\s+\d+s ago\s+alive$`, lines[2])
	require.Regexp(t, `^sched-1\s+node-c\s+33\s+\(none: schedules only\)\s+0\s+\d+s ago\s+alive$`, lines[3])

	r = b.run("", "workers", "list", "--json")
	require.Zero(t, r.code, r.stderr)
	seen := requireSnakeCase(t, "workers list", r.stdout)
	for _, k := range []string{"[].id", "[].host", "[].pid", "[].version", "[].queues", "[].gone", "[].jobs_held",
		"[].started_at", "[].last_beat_at", "[].since_beat_seconds", "[].stale_after_seconds"} {
		require.True(t, seen[k], "no %s in %v", k, seen)
	}
	var rows []struct {
		ID                string   `json:"id"`
		Host              string   `json:"host"`
		PID               int      `json:"pid"`
		Queues            []string `json:"queues"`
		Gone              bool     `json:"gone"`
		JobsHeld          int      `json:"jobs_held"`
		SinceBeatSeconds  float64  `json:"since_beat_seconds"`
		StaleAfterSeconds float64  `json:"stale_after_seconds"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rows))
	require.Len(t, rows, 3)
	require.Equal(t, "gone-1", rows[0].ID)
	require.Equal(t, "node-a", rows[0].Host)
	require.Equal(t, 11, rows[0].PID)
	require.Equal(t, []string{"email", "default"}, rows[0].Queues)
	require.True(t, rows[0].Gone)
	require.Equal(t, 2, rows[0].JobsHeld)
	require.GreaterOrEqual(t, rows[0].SinceBeatSeconds, 300.0)
	require.Equal(t, 1.0, rows[0].StaleAfterSeconds)
	require.False(t, rows[1].Gone)
	require.Equal(t, 1, rows[1].JobsHeld)
	require.Equal(t, 3600.0, rows[1].StaleAfterSeconds)
	require.Equal(t, []string{}, rows[2].Queues, "an empty list, not null")
}

// TestCLIStatsQueueWorkers: the registry records a worker's queues, not
// its kinds, so stats labels its count as the queue's workers and says a
// kind no worker handles still shows them: a row must not look served.
func TestCLIStatsQueueWorkers(t *testing.T) {
	b := newWorkersBed(t)
	b.worker(testfactory.WorkerOpts{ID: "live-1", Queues: []string{"email"}, StaleAfter: time.Hour})
	for _, kind := range []string{"mail", "unhandled"} {
		r := b.run("", "enqueue", "--kind", kind, "--queue", "email")
		require.Zero(t, r.code, r.stderr)
	}
	r := b.run("", "stats")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?m)^\s*QUEUE\s+KIND\s+READY\s.*\sRETRY RATE\s+QUEUE STATE\s+QUEUE WORKERS$`, r.stdout)
	require.Regexp(t, `(?m)^\s*email\s+unhandled\s+1\s.*\sactive\s+1 worker$`, r.stdout)
	require.Contains(t, r.stdout, "\nQUEUE WORKERS: live workers claiming from the queue, whatever kinds they handle; "+
		"a kind none of them handles still shows them (its READY and CLAIM LAG grow)\n")
}

// TestCLIWorkersRelease: hopper workers release hands back a gone worker's
// jobs at once and says how many were requeued and how many went dead; a
// live worker's jobs only with --force, after a question (skipped by
// --yes) that says what it risks; an unknown id is a clear error.
func TestCLIWorkersRelease(t *testing.T) {
	b := newWorkersBed(t)
	b.worker(testfactory.WorkerOpts{ID: "gone-1", Host: "node-a", PID: 11, StaleAfter: time.Second, LastBeatAgo: time.Minute})
	b.worker(testfactory.WorkerOpts{ID: "live-1", Host: "node-b", PID: 22, StaleAfter: time.Hour})
	b.worker(testfactory.WorkerOpts{ID: "idle-1", Host: "node-c", PID: 33, StaleAfter: time.Hour})
	b.worker(testfactory.WorkerOpts{ID: "gone-2", Host: "node-d", PID: 44, StaleAfter: time.Second, LastBeatAgo: time.Minute})
	again, last := b.held("gone-1", false), b.held("gone-1", true)
	live := []int64{b.held("live-1", false), b.held("live-1", false)}
	id := func(n int64) string { return strconv.FormatInt(n, 10) }

	r := b.run("", "workers", "release", "gone-1")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "worker gone-1: released 2 jobs: 1 requeued, 1 dead\n"+
		"  requeued (ready to run again, the attempt charged): "+id(again)+"\n"+
		"  dead (that was their last attempt; hopper dead retry ID runs one again): "+id(last)+"\n", r.stdout)
	require.Empty(t, r.stderr)
	require.Equal(t, jobs.StatePending, b.state(again))
	require.Equal(t, jobs.StateDead, b.state(last))
	r = b.run("", "workers", "release", "gone-1")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "worker gone-1 holds no jobs: nothing to release\n", r.stdout)

	// --force on a gone worker asks nothing: there is nothing to force.
	gone2 := b.held("gone-2", false)
	r = b.run("", "workers", "release", "gone-2", "--force")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "worker gone-2: released 1 job: 1 requeued, 0 dead\n"+
		"  requeued (ready to run again, the attempt charged): "+id(gone2)+"\n", r.stdout)

	// A live worker: refused without --force, saying what --force risks.
	r = b.run("", "workers", "release", "live-1")
	requireFailure(t, r, 1, "hopper workers: worker live-1 is alive (last beat ")
	require.Regexp(t, `^hopper workers: worker live-1 is alive \(last beat \d+s ago on host node-b, pid 22; 2 jobs held\): nothing released\. `+
		`Its jobs go back by themselves once it misses its beats \(it is gone 1h0m0s after its last beat\); `+
		`pass --force only if you know its process is dead: if it still runs, each of its jobs may run twice at once\n$`, r.stderr)
	require.Empty(t, r.stdout)

	// --force asks first; no answer, or another than y, releases nothing.
	question := regexp.QuoteMeta("Worker live-1 is alive (last beat ") + `\d+s` + regexp.QuoteMeta(" ago on host node-b, pid 22). Release its 2 jobs anyway? "+
		"If it still runs, it keeps running them until its next lease check while they run again elsewhere: each may run twice at once. [y/N] ")
	r = b.run("", "workers", "release", "live-1", "--force")
	require.Equal(t, 1, r.code, r.stderr)
	require.Regexp(t, "^"+question+"\n$", r.stdout)
	require.Equal(t, "hopper workers: not confirmed: no answer on stdin; nothing released (pass --yes to skip the question)\n", r.stderr)
	r = b.run("n\n", "workers", "release", "--force", "live-1")
	require.Equal(t, 1, r.code, r.stderr)
	require.Regexp(t, "^"+question+"$", r.stdout)
	require.Equal(t, "hopper workers: not confirmed; nothing released (pass --yes to skip the question)\n", r.stderr)
	for _, j := range live {
		require.Equal(t, jobs.StateRunning, b.state(j), "refused: nothing released")
	}

	r = b.run("y\n", "workers", "release", "live-1", "--force")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, "^"+question+regexp.QuoteMeta("worker live-1: released 2 jobs: 2 requeued, 0 dead\n"+
		"  requeued (ready to run again, the attempt charged): "+id(live[0])+", "+id(live[1])+"\n")+"$", r.stdout)
	for _, j := range live {
		require.Equal(t, jobs.StatePending, b.state(j))
	}

	// --yes skips the question.
	more := b.held("live-1", true)
	r = b.run("", "workers", "release", "live-1", "--force", "--yes")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "worker live-1: released 1 job: 0 requeued, 1 dead\n"+
		"  dead (that was their last attempt; hopper dead retry ID runs one again): "+id(more)+"\n", r.stdout)
	require.Equal(t, jobs.StateDead, b.state(more))

	runErrorCases(t, []errorCase{
		{name: "a live worker holding nothing", url: b.d.URL, args: []string{"workers", "release", "idle-1", "--force"},
			stdout: "worker idle-1 is alive and holds no jobs: nothing to release\n"},
		{name: "unknown id", url: b.d.URL, args: []string{"workers", "release", "nobody"}, code: 1,
			stderr: `hopper workers: no worker "nobody" in the registry: it never started, stopped cleanly, or was gone so long its row was pruned (hopper workers list shows the workers)`},
		{name: "unknown id, forced", url: b.d.URL, args: []string{"workers", "release", "nobody", "--force", "--yes"}, code: 1,
			stderr: `hopper workers: no worker "nobody" in the registry: it never started, stopped cleanly, or was gone so long its row was pruned (hopper workers list shows the workers)`},
		{name: "no id", url: b.d.URL, args: []string{"workers", "release"}, code: 2,
			stderr: "hopper workers: release takes one worker id (hopper workers list shows them) (run hopper workers --help)"},
		{name: "two ids", url: b.d.URL, args: []string{"workers", "release", "a", "b"}, code: 2,
			stderr: "hopper workers: release takes one worker id (hopper workers list shows them) (run hopper workers --help)"},
		{name: "a flag of release given to list", url: b.d.URL, args: []string{"workers", "list", "--force"}, code: 2,
			stderr: "hopper workers: --force is for release, not list (run hopper workers --help)"},
		{name: "--json given to release", url: b.d.URL, args: []string{"workers", "release", "gone-1", "--json"}, code: 2,
			stderr: "hopper workers: --json is for list, not release (run hopper workers --help)"},
		{name: "no action", url: b.d.URL, args: []string{"workers"}, code: 2,
			stderr: "hopper workers: say list or release (run hopper workers --help)"},
	})
}
