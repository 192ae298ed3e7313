package tests

import (
	"bytes"
	"context"
	debugbuildinfo "debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/buildinfo"
	"github.com/hopperq/hopper/internal/pgurl"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/queries"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/tests/internal/bed"
)

var hopperBin string

func TestMain(m *testing.M) {
	bin, remove, err := bed.BuildHopper(".")
	if err != nil {
		panic("build hopper: " + err.Error())
	}
	hopperBin = bin
	defer remove()
	testdb.Main(m)
}

// The suites' shared job types and quiet logger (tests/internal/bed).
type (
	Chore = bed.Chore
	Beat  = bed.Beat
)

var quietLog = bed.QuietLog

type result struct {
	stdout, stderr string
	code           int
}

// runHopper runs the binary against url with stdin. The timeout catches a
// hung command; on a loaded machine the demo and bench take several times
// their usual 10-20s.
func runHopper(t *testing.T, url, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, hopperBin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	cmd.Stdin = strings.NewReader(stdin)
	return runCaptured(t, cmd)
}

// runCaptured runs cmd and returns what it printed and its exit code.
func runCaptured(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return result{out.String(), errOut.String(), code}
}

// requireFailure checks the one-line, non-zero failure contract.
func requireFailure(t *testing.T, r result, code int, contains string) {
	t.Helper()
	require.Equal(t, code, r.code, "stdout %q stderr %q", r.stdout, r.stderr)
	require.Contains(t, r.stderr, contains)
	require.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one line: %q", r.stderr)
	require.NotContains(t, r.stderr, "goroutine", "no stack trace")
}

// TestCLIHelpAndUsageErrors: hopper help lists every command, a noun
// with its verbs; each command's --help prints its usage; bad usage fails
// with one line and status 2.
func TestCLIHelpAndUsageErrors(t *testing.T) {
	t.Parallel()
	r := runHopper(t, "", "", "help")
	require.Zero(t, r.code)
	for _, c := range []string{"migrate", "grants", "enqueue", "stats", "keys", "encryption", "jobs", "queues", "schedules", "workers", "events", "patches", "dead", "history", "sql", "ui", "demo", "bench"} {
		require.Regexp(t, `(?m)^  `+c+` `, r.stdout)
		h := runHopper(t, "", "", c, "--help")
		require.Zero(t, h.code, c)
		require.Contains(t, h.stdout, "Usage: hopper "+c, c)
		require.Contains(t, h.stdout, "--database-url", c)
	}
	for c, verbs := range map[string]string{"jobs": "list|show|cancel|edit|delete|wake", "queues": "list|pause|resume|purge",
		"schedules": "list|pause|resume|trigger", "workers": "list|release", "events": "emit", "dead": "list|show|retry|purge", "history": "list|show"} {
		require.Regexp(t, `(?m)^  `+c+` +`+regexp.QuoteMeta(verbs)+` `, r.stdout)
	}
	for _, old := range []string{"queue", "cancel", "purge"} {
		require.NotRegexp(t, `(?m)^  `+old+` `, r.stdout, "the old spellings are gone")
	}
	requireFailure(t, runHopper(t, "", "", "frobnicate"), 2, `unknown command "frobnicate"`)
	requireFailure(t, runHopper(t, "", "", "stats", "--bogus"), 2, "unknown flag --bogus")
	requireFailure(t, runHopper(t, "", "", "migrate", "sideways"), 2, "unknown migrate action")
	requireFailure(t, runHopper(t, "", "", "jobs", "cancel", "abc"), 2, `"abc" is not a job id`)
	requireFailure(t, runHopper(t, "", "", "enqueue", "--kind", "k", "--payload", "{nope"), 2, "not valid JSON")
	requireFailure(t, runHopper(t, "", "", "dead", "purge", "--older-than", "-3h"), 2, "positive duration")
}

func TestCLIUnreachableDatabaseKeepsPasswordSecret(t *testing.T) {
	t.Parallel()
	url := "postgres://alice:s3cretpw@127.0.0.1:1/nowhere?connect_timeout=2"
	for _, args := range [][]string{{"stats"}, {"migrate", "up"}, {"demo", "--duration", "1s"}, {"--database-url", url, "dead", "list"}} {
		r := runHopper(t, url, "", args...)
		requireFailure(t, r, 1, "nothing listens at 127.0.0.1:1")
		require.Contains(t, r.stderr, "apt install postgresql")
		require.NotContains(t, r.stderr+r.stdout, "s3cretpw")
	}
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	d := testdb.NewEmpty(t)
	r := runHopper(t, d.URL, "", "migrate", "version")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "schema version 0")

	r = runHopper(t, d.URL, "", "migrate", "up")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "1/u create_hopper", "a progress line per migration")
	require.Contains(t, r.stdout, "2/u claim_cursor")
	require.Contains(t, r.stdout, "3/u operate")
	require.Contains(t, r.stdout, "4/u schedules")
	require.Contains(t, r.stdout, "6/u flow_control")
	require.Contains(t, r.stdout, "7/u flow_record")
	require.Contains(t, r.stdout, "8/u rate_starts")
	require.Contains(t, r.stdout, "10/u workers")
	require.Contains(t, r.stdout, fmt.Sprintf("schema version %d (this build's latest: %d)", schema.Latest(), schema.Latest()))

	r = runHopper(t, d.URL, "", "migrate", "down", "--all", "--yes")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "10/d workers")
	require.Contains(t, r.stdout, "8/d rate_starts")
	require.Contains(t, r.stdout, "7/d flow_record")
	require.Contains(t, r.stdout, "6/d flow_control")
	require.Contains(t, r.stdout, "4/d schedules")
	require.Contains(t, r.stdout, "3/d operate")
	require.Contains(t, r.stdout, "2/d claim_cursor")
	require.Contains(t, r.stdout, "1/d create_hopper")
	require.Contains(t, r.stdout, "schema version 0")
	require.Zero(t, runHopper(t, d.URL, "", "migrate", "up").code)
	requireFailure(t, runHopper(t, d.URL, "", "migrate", "down", "zero"), 2, "positive number")
}

func TestCLIEnqueueStatsCancelPurge(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	r := runHopper(t, d.URL, "", "enqueue", "--kind", "report", "--payload", `{"day":"monday"}`, "--queue", "ops", "--priority", "3", "--unique-key", "rep-1")
	require.Zero(t, r.code, r.stderr)
	m := regexp.MustCompile(`enqueued job (\d+)`).FindStringSubmatch(r.stdout)
	require.NotNil(t, m, r.stdout)
	id, _ := strconv.ParseInt(m[1], 10, 64)
	row, err := db.New(d.Pool).GetJob(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, "ops", row.Queue)
	require.Equal(t, int16(3), row.Priority)
	require.JSONEq(t, `{"day":"monday"}`, string(row.Payload))

	r = runHopper(t, d.URL, "", "enqueue", "--kind", "report", "--queue", "ops", "--unique-key", "rep-1")
	require.Zero(t, r.code)
	require.Contains(t, r.stdout, "duplicate: job "+m[1])
	requireFailure(t, runHopper(t, d.URL, "", "enqueue", "--kind", "report", "--priority", "12"), 2, "invalid priority")
	require.Zero(t, runHopper(t, d.URL, "", "enqueue", "--kind", "later", "--queue", "ops", "--delay", "1h").code)

	r = runHopper(t, d.URL, "", "stats")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `ops\s+report\s+1\s+0\s+0\s+0`, r.stdout)
	require.Regexp(t, `ops\s+later\s+0\s+1\s+0\s+0`, r.stdout)
	r = runHopper(t, d.URL, "", "stats", "--json")
	require.Zero(t, r.code, r.stderr)
	var report struct {
		Queues []db.StatsRow `json:"queues"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &report))
	require.Len(t, report.Queues, 2)

	// cancel: a pending job goes; an unknown one is reported and fails.
	r = runHopper(t, d.URL, "", "jobs", "cancel", m[1], "999999")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stdout, "job "+m[1]+": cancelled")
	require.Contains(t, r.stdout, "job 999999: no such job")
	require.Contains(t, r.stderr, "1 of 2 jobs not cancelled")

	// purge asks first; no answer means no.
	r = runHopper(t, d.URL, "", "queues", "purge", "ops")
	requireFailure(t, r, 1, "not confirmed")
	require.Contains(t, r.stdout, `Delete 1 job of queue "ops" (0 pending, 1 scheduled`)
	r = runHopper(t, d.URL, "y\n", "queues", "purge", "ops")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "deleted 1 job (pending, scheduled and waiting)")
	require.Zero(t, runHopper(t, d.URL, "", "queues", "purge", "ops", "--yes").code)
}

func TestCLICancelRunningJob(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	require.Zero(t, runHopper(t, d.URL, "", "enqueue", "--kind", "k").code)
	claimed, err := db.New(d.Pool).Dequeue(context.Background(), db.DequeueParams{Queue: "default", Kinds: []string{"k"}, MaxVersions: []int32{1}, MaxJobs: 1, Owner: "w", LeaseMs: 60000})
	require.NoError(t, err)
	id := strconv.FormatInt(claimed[0].ID, 10)
	r := runHopper(t, d.URL, "", "jobs", "cancel", id)
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "job "+id+": cancelled while running")
	r = runHopper(t, d.URL, "", "jobs", "cancel", id)
	requireFailure(t, r, 1, "1 of 1 jobs not cancelled")
	require.Contains(t, r.stdout, "job "+id+": not cancelled: it is cancelled already")
	r = runHopper(t, d.URL, "", "dead", "list", "--state", "cancelled")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, id+`\s+cancelled\s+default\s+k\s+1/25\s+.*cancelled`, r.stdout)
}

func TestCLIStatsWatch(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	cmd := exec.Command(hopperBin, "stats", "--watch", "--json", "--interval", "100ms")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+d.URL)
	var out testdb.Buffer
	cmd.Stdout = &out
	require.NoError(t, cmd.Start())
	require.Eventually(t, func() bool { return strings.Count(out.String(), "\n") >= 3 }, testdb.WaitLimit, 20*time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, cmd.Wait(), "Ctrl-C ends --watch cleanly")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var second map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &second))
	require.Contains(t, second, "finished_per_second", "throughput since the last refresh")
}

func TestCLIDeadTriage(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	q := db.New(d.Pool)
	ctx := context.Background()
	var dead []string
	for i := range 3 {
		kind := "mailer"
		if i == 2 {
			kind = "billing"
		}
		require.Zero(t, runHopper(t, d.URL, "", "enqueue", "--kind", kind, "--max-attempts", "1").code)
		got, err := q.Dequeue(ctx, db.DequeueParams{Queue: "default", Kinds: []string{kind}, MaxVersions: []int32{1}, MaxJobs: 1, Owner: "w-1", LeaseMs: 60000})
		require.NoError(t, err)
		_, err = q.NackBatch(ctx, db.NackBatchParams{Ids: []int64{got[0].ID}, Attempts: []int32{1}, Actions: []string{"retry"}, Messages: []string{"smtp: 550 no such user\nsecond line"}, BackoffsMs: []int64{0}, Reasons: []string{""}})
		require.NoError(t, err)
		dead = append(dead, strconv.FormatInt(got[0].ID, 10))
	}

	r := runHopper(t, d.URL, "", "dead", "list")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, dead[2]+`\s+dead\s+default\s+billing\s+1/1\s+.*out of attempts`, r.stdout)
	r = runHopper(t, d.URL, "", "dead", "list", "--kind", "mailer")
	require.NotContains(t, r.stdout, "billing")

	r = runHopper(t, d.URL, "", "dead", "show", dead[0])
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "reason: out of attempts")
	require.Contains(t, r.stdout, "attempt 1 at")
	require.Contains(t, r.stdout, "by w-1")
	require.Contains(t, r.stdout, "smtp: 550 no such user\n    second line")
	requireFailure(t, runHopper(t, d.URL, "", "dead", "show", "424242"), 1, "no job 424242")

	r = runHopper(t, d.URL, "", "dead", "retry", dead[0], "424242")
	requireFailure(t, r, 1, "not retried")
	require.Contains(t, r.stdout, "retried 1 job\n")
	requireFailure(t, runHopper(t, d.URL, "", "dead", "show", dead[0]), 1, "job "+dead[0]+" is pending, not dead or cancelled")
	r = runHopper(t, d.URL, "", "dead", "retry", "--kind", "mailer")
	require.Zero(t, r.code)
	require.Contains(t, r.stdout, "retried 1 job\n")
	requireFailure(t, runHopper(t, d.URL, "", "dead", "retry"), 2, "say which jobs")

	r = runHopper(t, d.URL, "", "dead", "purge", "--older-than", "1d", "--yes")
	require.Zero(t, r.code)
	require.Contains(t, r.stdout, "purged 0 jobs")
	_, err := d.Pool.Exec(ctx, "UPDATE hopper_dead_jobs SET died_at = now() - interval '3 days'")
	require.NoError(t, err)
	r = runHopper(t, d.URL, "", "dead", "purge", "--older-than", "2d", "--yes")
	require.Zero(t, r.code)
	require.Contains(t, r.stdout, "purged 1 job\n")
}

// TestCLIDeadRetryCancelled: dead retry by id takes a cancelled job as dead
// list shows it, and a filter that matches nothing says so, with the
// cancelled jobs it left alone.
func TestCLIDeadRetryCancelled(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	enqueue := func(kind string) string {
		t.Helper()
		r := runHopper(t, d.URL, "", "enqueue", "--kind", kind)
		require.Zero(t, r.code, r.stderr)
		m := regexp.MustCompile(`enqueued job (\d+)`).FindStringSubmatch(r.stdout)
		require.NotNil(t, m, r.stdout)
		return m[1]
	}
	a, b := enqueue("mailer"), enqueue("mailer")
	require.Zero(t, runHopper(t, d.URL, "", "jobs", "cancel", a, b).code)
	r := runHopper(t, d.URL, "", "dead", "list")
	require.Regexp(t, `(?m)^`+a+`\s+cancelled\s+default\s+mailer`, r.stdout)

	r = runHopper(t, d.URL, "", "dead", "retry", a)
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "retried 1 job\n", r.stdout)
	r = runHopper(t, d.URL, "", "jobs", "show", a)
	require.Contains(t, r.stdout, "job "+a+"  kind mailer  queue default  state pending")

	runErrorCases(t, []errorCase{
		{name: "an id of another state, --state dead", url: d.URL, args: []string{"dead", "retry", b, "--state", "dead"}, code: 1,
			stdout: "retried 0 jobs\n", stderr: "hopper dead: not retried (no such dead job): " + b},
		{name: "an id of neither", url: d.URL, args: []string{"dead", "retry", "424242"}, code: 1,
			stdout: "retried 0 jobs\n", stderr: "hopper dead: not retried (no such dead or cancelled job): 424242"},
		{name: "a kind that matches nothing", url: d.URL, args: []string{"dead", "retry", "--kind", "mailr"},
			stdout: "nothing to retry: no dead job matches --kind mailr\n"},
		{name: "both states", url: d.URL, args: []string{"dead", "retry", "--kind", "mailr", "--state", "dead,cancelled"},
			stdout: "nothing to retry: no dead or cancelled job matches --kind mailr\n"},
		{name: "cancelled jobs left alone", url: d.URL, args: []string{"dead", "retry", "--kind", "mailer"},
			stdout: "nothing to retry: no dead job matches --kind mailer (1 cancelled job does: add --state cancelled)\n"},
		{name: "cancelled jobs left alone, by age", url: d.URL, args: []string{"dead", "retry", "--queue", "default", "--older-than", "1h"},
			stdout: "nothing to retry: no dead job matches --queue default --older-than 1h (cancelled jobs are retried with --state cancelled)\n"},
		{name: "--all", url: d.URL, args: []string{"dead", "retry", "--all"},
			stdout: "nothing to retry: no dead job (1 cancelled job: add --state cancelled)\n"},
	})
	r = runHopper(t, d.URL, "", "dead", "retry", "--kind", "mailer", "--state", "cancelled")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "retried 1 job\n", r.stdout)
}

func TestSQLExport(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := runHopper(t, "", "", "sql", "export", dir)
	require.Zero(t, r.code, r.stderr)
	for sub, files := range map[string]fs.FS{"schema": schema.Files, "queries": queries.Files} {
		entries, err := fs.ReadDir(files, ".")
		require.NoError(t, err)
		require.NotEmpty(t, entries)
		for _, e := range entries {
			want, err := fs.ReadFile(files, e.Name())
			require.NoError(t, err)
			got, err := os.ReadFile(filepath.Join(dir, sub, e.Name()))
			require.NoError(t, err)
			require.Equal(t, string(want), string(got), e.Name())
		}
	}
	licence, err := os.ReadFile(filepath.Join(dir, "LICENSE"))
	require.NoError(t, err)
	require.Equal(t, string(queries.License), string(licence), "the licence goes with the copy")
	require.Contains(t, string(licence), "MIT License")
	requireFailure(t, runHopper(t, "", "", "sql", "import", dir), 2, `unknown sql action "import"; did you mean export?`)
	requireFailure(t, runHopper(t, "", "", "sql", "export"), 2, "say export DIR, check DIR or entry DIR")

	r = runHopper(t, "", "", "sql", "check", dir)
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, fmt.Sprintf("matches this version of Hopper (schema version %d", schema.Latest()))

	// Drift: a changed file, a missing one, one this version does not have.
	stale := filepath.Join(dir, "schema", "000099_stale.up.sql")
	require.NoError(t, os.WriteFile(stale, []byte("-- stale\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "queries", "claim.sql"), []byte("-- edited\n"), 0o644))
	require.NoError(t, os.Remove(filepath.Join(dir, "queries", "sweep.sql")))
	r = runHopper(t, "", "", "sql", "check", dir)
	requireFailure(t, r, 1, "differs from this version of Hopper in 3 files")
	require.Contains(t, r.stdout, "changed: queries/claim.sql")
	require.Contains(t, r.stdout, "missing: queries/sweep.sql")
	require.Contains(t, r.stdout, "extra:   schema/000099_stale.up.sql")

	// An export over its own earlier export replaces it, stale files too.
	r = runHopper(t, "", "", "sql", "export", dir)
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "removed schema/000099_stale.up.sql")
	require.NoFileExists(t, stale)
	require.Zero(t, runHopper(t, "", "", "sql", "check", dir).code)
}

// TestSQLExportIntoAFolderItDidNotWrite: stale .sql files in a folder no
// export wrote are the user's; export removes them only with --clean.
func TestSQLExportIntoAFolderItDidNotWrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "schema"), 0o755))
	mine := filepath.Join(dir, "schema", "000099_mine.up.sql")
	require.NoError(t, os.WriteFile(mine, []byte("-- mine\n"), 0o644))

	r := runHopper(t, "", "", "sql", "export", dir)
	requireFailure(t, r, 1, "holds schema/000099_mine.up.sql, which this version of Hopper does not have, and no export wrote it (no HOPPER_SQL); nothing written (pass --clean to remove such files)")
	require.FileExists(t, mine)
	require.NoFileExists(t, filepath.Join(dir, "HOPPER_SQL"))

	r = runHopper(t, "", "", "sql", "export", "--clean", dir)
	require.Zero(t, r.code, r.stderr)
	require.NoFileExists(t, mine)
	require.Zero(t, runHopper(t, "", "", "sql", "check", dir).code)
	requireFailure(t, runHopper(t, "", "", "sql", "check", t.TempDir()), 1, "holds no schema/*.sql or queries/*.sql")
}

// TestDemo runs the README's first command's program for 10 seconds; its
// summary must account for every job, by the table and by the workers'
// counters. How many jobs a loaded machine gets through is not its
// business.
func TestDemo(t *testing.T) {
	testdb.Slow(t, "the demo runs for 10 s")
	t.Parallel()
	// --reset: on a shared server, hopper_demo may be left by an older demo
	// that did not mark its schema (TestDemoKeepsSchemasItDidNotCreate
	// checks the plain run in a database of its own).
	r := runHopper(t, testdb.Server(t), "", "demo", "--duration", "10s", "--rate", "1000", "--reset")
	require.Zero(t, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)
	count := func(name string) int64 {
		m := regexp.MustCompile(`(?m)^\s+` + name + `\s+(\d+)`).FindStringSubmatch(r.stdout)
		require.NotNil(t, m, "%s in %s", name, r.stdout)
		n, _ := strconv.ParseInt(m[1], 10, 64)
		return n
	}
	enqueued, completed, unconfirmed := count("enqueued"), count("completed"), count("unconfirmed")
	dead, pending, done, lost := count("dead"), count("pending"), count("done"), count("lost")
	require.Zero(t, lost)
	require.Equal(t, enqueued, done+dead+pending)
	// An unconfirmed result may or may not have committed: the table says.
	require.LessOrEqual(t, completed, done, "every reported completion left the table")
	require.LessOrEqual(t, done, completed+unconfirmed, "every job that left the table was reported")
	require.Positive(t, enqueued)
	require.Positive(t, dead, "some jobs exhausted their attempts")
	require.Regexp(t, `retries\s+[1-9]`, r.stdout, "some jobs were retried")
	require.Regexp(t, `(?m)^\s+scheduled\s+[1-9]\d*\s+\(.*; (1 slot ran|[1-9]\d* slots ran, each once, none skipped)\)$`, r.stdout,
		"the demo's schedule fired, each slot once")
}

// TestDemoKeepsSchemasItDidNotCreate: the demo drops and recreates only
// the schema it created itself; a hopper_demo schema of someone else's is
// dropped only with --reset. It runs in a database of its own, so that it
// does not race TestDemo for the schema.
func TestDemoKeepsSchemasItDidNotCreate(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	server := testdb.Server(t)
	admin, err := pgx.Connect(ctx, server)
	require.NoError(t, err)
	defer admin.Close(context.Background())
	name := fmt.Sprintf("hopper_demo_guard_%d", time.Now().UnixNano())
	// DDL takes no bind parameters; the name is generated and quoted.
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	dsn := pgurl.WithDatabase(server, name)
	own, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer own.Close(context.Background())
	_, err = own.Exec(ctx, "CREATE SCHEMA hopper_demo; CREATE TABLE hopper_demo.precious (x int)")
	require.NoError(t, err)

	r := runHopper(t, dsn, "", "demo", "--duration", "1s")
	require.Equal(t, 1, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)
	require.Contains(t, r.stderr, "schema hopper_demo exists and was not created by the demo; pass --reset")
	var tables int
	require.NoError(t, own.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = 'hopper_demo' AND tablename = 'precious'").Scan(&tables))
	require.Equal(t, 1, tables, "nothing was dropped")

	r = runHopper(t, dsn, "", "demo", "--duration", "1s", "--reset")
	require.Zero(t, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "dropped schema hopper_demo as --reset asked")
	r = runHopper(t, dsn, "", "demo", "--duration", "1s")
	require.Zero(t, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "recreated schema hopper_demo, the demo's own from an earlier run")

	// The summary's commands run as printed: the dead jobs are the
	// demo's own, and --drop removes the schema it keeps.
	m := regexp.MustCompile(`(?m)^\s+dead\s+\d+\s+\(the demo's deliberate failures: demo\.doomed always fails, dead after its 3 attempts; hopper (--schema hopper_demo dead list)\)$`).
		FindStringSubmatch(r.stdout)
	require.NotNil(t, m, r.stdout)
	dead := runHopper(t, dsn, "", strings.Fields(m[1])...)
	require.Zero(t, dead.code, dead.stderr)
	require.Contains(t, r.stdout, "\nschema hopper_demo is kept for exploring (hopper --schema hopper_demo stats); "+
		"the next demo drops and recreates it, or drop it now: hopper demo --drop\n")
	r = runHopper(t, dsn, "", "demo", "--drop")
	require.Zero(t, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)
	require.Equal(t, "dropped schema hopper_demo and everything the demo left in it\n", r.stdout)
	var schemas int
	require.NoError(t, own.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = 'hopper_demo'").Scan(&schemas))
	require.Zero(t, schemas)
	r = runHopper(t, dsn, "", "demo", "--drop")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "no schema hopper_demo: nothing to drop\n", r.stdout)
	_, err = own.Exec(ctx, "CREATE SCHEMA hopper_demo")
	require.NoError(t, err)
	requireFailure(t, runHopper(t, dsn, "", "demo", "--drop"), 1,
		"schema hopper_demo was not created by the demo; pass --reset with --drop to drop it and everything in it")
}

// TestCLIHelpAtTheTop: hopper --help and -h print the usage and succeed.
func TestCLIHelpAtTheTop(t *testing.T) {
	t.Parallel()
	for _, flag := range []string{"--help", "-h", "help"} {
		r := runHopper(t, "", "", flag)
		require.Zero(t, r.code, "%s: stderr %s", flag, r.stderr)
		require.Contains(t, r.stdout, "Usage: hopper", flag)
		require.Empty(t, r.stderr, flag)
	}
}

// TestBenchRuns runs every benchmark mode at a tiny size: it checks that
// the benchmark works and reports every figure, never how fast anything is.
func TestBenchRuns(t *testing.T) {
	testdb.Slow(t, "hopper bench runs")
	t.Parallel()
	if _, err := exec.LookPath("pgbench"); err != nil {
		t.Skip("pgbench not installed")
	}
	r := runHopper(t, testdb.Server(t), "", "bench", "--mode", "all", "--baseline", "--json", "--duration", "1s", "--window", "1s",
		"--jobs", "2000", "--batch-size", "500", "--concurrency", "50", "--singles", "20", "--samples", "5", "--scheduled", "1000",
		"--hold-snapshot", "--burst", "500")
	require.Zero(t, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)
	var report map[string]map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &report))
	for section, fields := range map[string][]string{
		"continuous": {"worked_per_second", "enqueued_per_second", "worker_peak_rss_bytes", "worker_cpu_seconds_per_1000_jobs", "backlog_worked_per_second",
			"steady_worked_per_second", "windows_worked_per_second", "window_seconds", "table", "hold_snapshot", "burst"},
		"server":   {"version", "settings"},
		"drain":    {"jobs_per_second"},
		"enqueue":  {"copy_jobs_per_second", "single_p50_ms", "single_p99_ms"},
		"latency":  {"p50_ms", "p95_ms", "p99_ms"},
		"baseline": {"jobs_per_second"},
		"ratios":   {"continuous_to_baseline"},
	} {
		require.Contains(t, report, section)
		for _, f := range fields {
			require.Contains(t, report[section], f, section)
		}
	}
	require.EqualValues(t, 2000, report["drain"]["jobs"])
	require.Positive(t, report["baseline"]["deleted"], "the baseline moved jobs, however starved")
	require.Positive(t, report["continuous"]["worked_per_second"], "the continuous run worked jobs, however starved")
	require.Positive(t, report["continuous"]["steady_worked_per_second"])
	require.EqualValues(t, 500, report["continuous"]["burst"])
	// The settings that decide what the figures mean are in the report, and
	// a server with autovacuum off (the CI server's) gets a loud warning.
	settings, ok := report["server"]["settings"].(map[string]any)
	require.True(t, ok, "server settings: %v", report["server"])
	require.Contains(t, settings, "autovacuum")
	if settings["autovacuum"] == "off" {
		require.Contains(t, r.stderr, "WARNING: autovacuum is off")
	} else {
		require.NotContains(t, r.stderr, "WARNING: autovacuum is off")
	}
	require.Regexp(t, `hopper bench: unknown mode`, runHopper(t, testdb.Server(t), "", "bench", "--mode", "warp").stderr)
}

// TestBenchFlowRuns runs the flow-control modes at a tiny size: every
// figure is reported, and the rate limit held by claim time (a guarantee,
// not a speed).
func TestBenchFlowRuns(t *testing.T) {
	testdb.Slow(t, "hopper bench runs")
	t.Parallel()
	r := runHopper(t, testdb.Server(t), "", "bench", "--mode", "flow", "--json", "--duration", "2s", "--window", "1s",
		"--concurrency", "50", "--batch-size", "500", "--flood", "3000", "--neighbours", "3", "--neighbour-jobs", "20",
		"--keys", "20", "--key-limit", "2", "--rate", "40", "--rate-per", "500ms", "--rate-processes", "2", "--rate-duration", "2s")
	require.Zero(t, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)
	var report struct {
		Noisy struct {
			Off map[string]any `json:"fairness_off"`
			On  map[string]any `json:"fairness_on"`
		} `json:"noisy"`
		Keys map[string]any `json:"keys"`
		Rate struct {
			Limit              int     `json:"limit"`
			Claimed            int     `json:"claimed"`
			AchievedToLimit    float64 `json:"achieved_to_limit"`
			MaxClaimedInWindow int     `json:"max_claimed_in_any_window"`
			MaxStartedInWindow int     `json:"max_started_in_any_window"`
		} `json:"rate"`
		RateExactStarts struct {
			ExactStarts        bool `json:"exact_starts"`
			Claimed            int  `json:"claimed"`
			MaxClaimedInWindow int  `json:"max_claimed_in_any_window"`
			MaxStartedInWindow int  `json:"max_started_in_any_window"`
		} `json:"rate_exact_starts"`
		Ratios map[string]float64 `json:"ratios"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &report))
	for run, fields := range map[string]map[string]any{"off": report.Noisy.Off, "on": report.Noisy.On} {
		require.NotNil(t, fields, run)
		for _, f := range []string{"pickup_p50_ms", "pickup_p99_ms", "completed_after_seconds", "flood_worked_per_second", "flood_left"} {
			require.Contains(t, fields, f, run)
		}
		require.Positive(t, fields["completed_after_seconds"], "every neighbour job ran: %s", run)
	}
	require.Equal(t, true, report.Noisy.On["fair"])
	require.Equal(t, false, report.Noisy.Off["fair"])
	for _, f := range []string{"without_keys", "with_keys", "steady_with_to_without"} {
		require.Contains(t, report.Keys, f)
	}
	require.Contains(t, report.Ratios, "keys_to_no_keys")
	require.Equal(t, 40, report.Rate.Limit)
	require.Positive(t, report.Rate.Claimed, "the rate run claimed jobs, however starved")
	require.Positive(t, report.Rate.MaxStartedInWindow)
	require.LessOrEqual(t, report.Rate.MaxClaimedInWindow, 40, "no window of the limit's length, by claim time, holds more than the limit")
	require.Positive(t, report.Rate.MaxClaimedInWindow)
	require.True(t, report.RateExactStarts.ExactStarts, "the rate run again, with ExactStarts")
	require.Positive(t, report.RateExactStarts.Claimed)
	require.Positive(t, report.RateExactStarts.MaxStartedInWindow)
	require.LessOrEqual(t, report.RateExactStarts.MaxClaimedInWindow, 40)

	bad := runHopper(t, testdb.Server(t), "", "bench", "--mode", "rate", "--rate", "0")
	require.NotZero(t, bad.code)
	require.Contains(t, bad.stderr, "flow-control sizes must be positive")
	bad = runHopper(t, testdb.Server(t), "", "bench", "--mode", "keys", "--key-limit", "-1")
	require.NotZero(t, bad.code)
	require.Contains(t, bad.stderr, "flow-control sizes must be positive")
}

// TestBenchKeysWithoutFlowControl: --key-limit 0 runs the keyed jobs with
// no flow control (the plain Dequeue), what a key costs by itself, and
// says so.
func TestBenchKeysWithoutFlowControl(t *testing.T) {
	testdb.Slow(t, "hopper bench runs")
	t.Parallel()
	r := runHopper(t, testdb.Server(t), "", "bench", "--mode", "keys", "--duration", "2s", "--window", "1s",
		"--concurrency", "50", "--batch-size", "500", "--keys", "20", "--key-limit", "0")
	require.Zero(t, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "keys: continuous with 20 keys, no flow control")
	require.Contains(t, r.stdout, "keys: mean steady state with keys is")
}

// TestCLIKeys: hopper keys lists the keys with the most ready jobs, and the
// rate limits' budgets (none here), as a table and as JSON.
func TestCLIKeys(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	for _, key := range []string{"acme", "acme", "acme", "globex"} {
		r := runHopper(t, d.URL, "", "enqueue", "--kind", "sync", "--concurrency-key", key)
		require.Zero(t, r.code, r.stderr)
	}
	require.Zero(t, runHopper(t, d.URL, "", "enqueue", "--kind", "sync").code)
	r := runHopper(t, d.URL, "", "keys")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?s)default\s+acme\s+3\s+0\s+0\n.*default\s+globex\s+1\s+0\s+0\n`, r.stdout)
	require.Contains(t, r.stdout, "(no global rate limit in use)")
	r = runHopper(t, d.URL, "", "keys", "--json", "--limit", "1")
	require.Zero(t, r.code, r.stderr)
	require.JSONEq(t, `{"keys":[{"queue":"default","key":"acme","ready":3,"running":0,"scheduled":0}],"rate_limits":[]}`, r.stdout)
	requireFailure(t, runHopper(t, d.URL, "", "keys", "--limit", "0"), 2, "--limit 0 is outside 1 to 1000")
	requireFailure(t, runHopper(t, d.URL, "", "enqueue", "--kind", "sync", "--concurrency-key", strings.Repeat("k", 256)), 2, "invalid concurrency key")
}

// TestCLIKeyLimits: hopper keys limit sets a key's own limit, keys limits
// lists it with the key's running jobs, keys unlimit removes it, and bad
// arguments are usage errors.
func TestCLIKeyLimits(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	r := runHopper(t, d.URL, "", "keys", "limit", "default", "customer:42", "10")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "key customer:42 of queue default: at most 10 running, from the next claim\n", r.stdout)
	r = runHopper(t, d.URL, "", "keys", "limits", "--json")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, `"queue":"default","key":"customer:42","max_running":10,"running":0`)
	r = runHopper(t, d.URL, "", "keys", "limits")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `default\s+customer:42\s+10\s+0\s+`, r.stdout)
	r = runHopper(t, d.URL, "", "keys", "unlimit", "default", "customer:42")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "its queue's or kind's limit again")
	r = runHopper(t, d.URL, "", "keys", "unlimit", "default", "customer:42")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "had no limit of its own")
	requireFailure(t, runHopper(t, d.URL, "", "keys", "limit", "default", "customer:42", "0"), 2, "not a number of jobs from 1 to 1000000")
	requireFailure(t, runHopper(t, d.URL, "", "keys", "limit", "default"), 2, "takes a queue, a key and a number of jobs")
	requireFailure(t, runHopper(t, d.URL, "", "keys", "limt"), 2, "unknown keys action")
}

// TestCLIVersion: hopper version says which Hopper the binary is and
// which commit it was built from, as Go recorded them in the binary (a
// build of this tree has Go's version of the checkout, or "devel" with the
// commit; "devel unstamped" and why when the build recorded no commit), the
// schema version it needs, and its Go, with no database at all.
func TestCLIVersion(t *testing.T) {
	t.Parallel()
	info, err := debugbuildinfo.ReadFile(hopperBin)
	require.NoError(t, err)
	want := buildinfo.Of(info)
	r := runHopper(t, "postgres://127.0.0.1:1/nowhere", "", "version")
	require.Zero(t, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4, r.stdout)
	require.Equal(t, "hopper "+want.Version, lines[0])
	if want.Revision == "" {
		require.True(t, strings.HasPrefix(want.Version, "devel unstamped"), want.Version)
		require.Equal(t, "commit unstamped ("+buildinfo.NoStampReason+")", lines[1])
	} else {
		require.Regexp(t, `^(v\d+\.\d+\.\d+\S*|devel [0-9a-f]{12}(\+dirty)? \S+)$`, want.Version)
		require.True(t, strings.HasPrefix(lines[1], "commit "+want.Revision+" of "+want.Time), lines[1])
	}
	require.Equal(t, fmt.Sprintf("schema version %d", schema.Latest()), lines[2])
	require.Equal(t, runtime.Version(), lines[3])

	r = runHopper(t, "postgres://127.0.0.1:1/nowhere", "", "version", "--json")
	require.Zero(t, r.code, r.stderr)
	var v struct {
		Version       string `json:"version"`
		Revision      string `json:"revision"`
		Time          string `json:"vcs_time"`
		Modified      bool   `json:"vcs_modified"`
		SchemaVersion uint   `json:"schema_version"`
		Go            string `json:"go"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v))
	require.Equal(t, schema.Latest(), v.SchemaVersion)
	require.Equal(t, want.Version, v.Version)
	require.Equal(t, want.Revision, v.Revision)
	require.Equal(t, want.Time, v.Time)
	require.Equal(t, want.Modified, v.Modified)
	require.Equal(t, runtime.Version(), v.Go)

	r = runHopper(t, "", "", "version", "extra")
	require.Equal(t, 2, r.code)
}
