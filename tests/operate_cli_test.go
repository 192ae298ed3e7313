package tests

import (
	"context"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// TestOperateCLI: jobs list and show with filters and pages, queues pause,
// resume and list, history, and their answers to bad input.
func TestOperateCLI(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	enqueue := func(args ...string) string {
		t.Helper()
		r := runHopper(t, d.URL, "", append([]string{"enqueue"}, args...)...)
		require.Zero(t, r.code, r.stderr)
		m := regexp.MustCompile(`enqueued job (\d+)`).FindStringSubmatch(r.stdout)
		require.NotNil(t, m, r.stdout)
		return m[1]
	}
	a := enqueue("--kind", "mail", "--queue", "email", "--payload", `{"to":"ada"}`, "--meta", "tenant=acme", "--meta", "region=eu")
	b := enqueue("--kind", "mail", "--queue", "email", "--unique-key", "mail-b")
	c := enqueue("--kind", "report", "--delay", "1h")

	r := runHopper(t, d.URL, "", "jobs", "list")
	require.Zero(t, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4, r.stdout)
	require.Regexp(t, `^ID\s+STATE\s+QUEUE\s+KIND`, lines[0])
	require.Regexp(t, `^`+c+`\s+scheduled\s+default\s+report\s+0/25`, lines[1], "newest first")
	require.Regexp(t, `^`+a+`\s+pending\s+email\s+mail`, lines[3])

	r = runHopper(t, d.URL, "", "jobs", "list", "--queue", "email", "--state", "pending", "--limit", "1")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?m)^`+b+`\s+pending`, r.stdout)
	m := regexp.MustCompile(`more: hopper jobs list --queue email --state pending --limit 1 --after (\S+)`).FindStringSubmatch(r.stdout)
	require.NotNil(t, m, "a full page says how to get the next: %s", r.stdout)
	r = runHopper(t, d.URL, "", "jobs", "list", "--queue", "email", "--state", "pending", "--limit", "1", "--after", m[1])
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?m)^`+a+`\s+pending`, r.stdout)
	require.NotContains(t, r.stdout, "more:", "the last page")

	r = runHopper(t, d.URL, "", "jobs", "list", "--unique-key", "mail-b", "--json")
	require.Zero(t, r.code, r.stderr)
	var page struct {
		Jobs []jobs.Row `json:"jobs"`
		Next string     `json:"next"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Len(t, page.Jobs, 1)
	require.Equal(t, jobs.StatePending, page.Jobs[0].State)
	require.Equal(t, "mail-b", page.Jobs[0].UniqueKey)

	r = runHopper(t, d.URL, "", "jobs", "show", a)
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "job "+a+"  kind mail  queue email  state pending")
	require.Contains(t, r.stdout, `payload: {"to": "ada"}`)
	require.Contains(t, r.stdout, "meta: region=eu tenant=acme\n")

	// Queues: pause (twice), list, resume (twice). Not paused is
	// "active", never "running": no worker serves these queues.
	r = runHopper(t, d.URL, "", "queues", "pause", "email")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "queue email paused: no worker claims its jobs until hopper queues resume email (running jobs finish)\n", r.stdout)
	r = runHopper(t, d.URL, "", "queues", "pause", "email")
	require.Zero(t, r.code, "pausing twice is not an error: %s", r.stderr)
	require.Contains(t, r.stdout, "queue email was paused already (since ")
	r = runHopper(t, d.URL, "", "queues", "list")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?m)^QUEUE\s+STATE\s+WORKERS\s+READY\s+SCHEDULED\s+RUNNING\s+WAITING\s+DEAD\s+CANCELLED\s+CLAIM LAG$`, r.stdout)
	require.Regexp(t, `(?m)^email\s+paused since \S+ \S+\s+no worker\s+2\s+0\s+0\s+0\s+0`, r.stdout)
	require.Regexp(t, `(?m)^default\s+active\s+no worker\s+0\s+1\s+0`, r.stdout)
	r = runHopper(t, d.URL, "", "stats")
	require.Regexp(t, `(?m)^\s*email\s+mail\s+2\s.*\spaused\s+no worker$`, r.stdout)
	require.Regexp(t, `(?m)^\s*default\s+report\s+0\s+1\s.*\sactive\s+no worker$`, r.stdout)
	require.NotContains(t, r.stdout, "running\n")
	r = runHopper(t, d.URL, "", "queues", "resume", "email")
	require.Equal(t, "queue email resumed\n", r.stdout)
	r = runHopper(t, d.URL, "", "queues", "resume", "email")
	require.Equal(t, "queue email was not paused\n", r.stdout)

	// History: completed jobs only; none kept here.
	r = runHopper(t, d.URL, "", "history", "list")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "(no jobs)\n", r.stdout)

	runErrorCases(t, []errorCase{
		{name: "unknown queue", url: d.URL, args: []string{"queues", "pause", "emial"}, code: 1,
			stderr: `hopper queues: no queue "emial": no worker serves it and it has no jobs (hopper queues list shows the queues)`},
		{name: "bad state", url: d.URL, args: []string{"jobs", "list", "--state", "done"}, code: 2,
			stderr: `hopper jobs: --state "done" (one of pending, scheduled, waiting, running, completed, dead, cancelled) (run hopper jobs --help)`},
		{name: "mistyped state", url: d.URL, args: []string{"jobs", "list", "--state", "scheduled,pendign"}, code: 2,
			stderr: `hopper jobs: --state "pendign" (one of pending, scheduled, waiting, running, completed, dead, cancelled); did you mean pending? (run hopper jobs --help)`},
		{name: "mistyped dead state", url: d.URL, args: []string{"dead", "retry", "--state", "cancled", "--all"}, code: 2,
			stderr: `hopper dead: --state wants dead, cancelled or dead,cancelled, not "cancled"; did you mean cancelled? (run hopper dead --help)`},
		{name: "bad cursor", url: d.URL, args: []string{"jobs", "list", "--after", "42"}, code: 2,
			stderr: `hopper jobs: --after "42" is not a cursor this command printed (run hopper jobs --help)`},
		{name: "bad limit", url: d.URL, args: []string{"jobs", "list", "--limit", "0"}, code: 2,
			stderr: `hopper jobs: --limit 0 is outside 1 to 1000 (run hopper jobs --help)`},
		{name: "bad time", url: d.URL, args: []string{"jobs", "list", "--since", "yesterday"}, code: 2,
			stderr: `hopper jobs: --since wants a time like 2026-11-22T15:04:05Z (RFC 3339) or a duration ago like 2h or 7d, not "yesterday" (run hopper jobs --help)`},
		{name: "job id not a number", url: d.URL, args: []string{"jobs", "show", "abc"}, code: 2,
			stderr: `hopper jobs: "abc" is not a job id: not a number (run hopper jobs --help)`},
		{name: "job id zero", url: d.URL, args: []string{"dead", "show", "0"}, code: 2,
			stderr: `hopper dead: "0" is not a job id: ids start at 1 (run hopper dead --help)`},
		{name: "two job ids to show", url: d.URL, args: []string{"jobs", "show", a, b}, code: 2,
			stderr: `hopper jobs: show takes one job id (run hopper jobs --help)`},
		{name: "unknown job", url: d.URL, args: []string{"jobs", "show", "424242"}, code: 1,
			stderr: `hopper jobs: no job 424242 (never enqueued, or completed without history, or purged)`},
		{name: "history of a live job", url: d.URL, args: []string{"history", "show", a}, code: 1,
			stderr: "hopper history: job " + a + " is pending, not completed (hopper jobs show " + a + " shows it)"},
		{name: "dead list of live states", url: d.URL, args: []string{"dead", "list", "--state", "pending"}, code: 2,
			stderr: `hopper dead: --state pending: the dead table holds dead and cancelled jobs (hopper jobs list --state pending) (run hopper dead --help)`},
		{name: "queues without a name", url: d.URL, args: []string{"queues", "pause"}, code: 2,
			stderr: `hopper queues: pause takes one queue name (run hopper queues --help)`},
		{name: "jobs without an action", url: d.URL, args: []string{"jobs"}, code: 2,
			stderr: `hopper jobs: say list, show, cancel, edit, delete or wake (run hopper jobs --help)`},
		{name: "jobs cancel with a filter", url: d.URL, args: []string{"jobs", "cancel", a, "--kind", "mail"}, code: 2,
			stderr: `hopper jobs: cancel takes job ids, not --kind (run hopper jobs --help)`},
		{name: "history cannot cancel", url: d.URL, args: []string{"history", "cancel", a}, code: 2,
			stderr: `hopper history: unknown history action "cancel" (list or show) (run hopper history --help)`},
		{name: "unknown history action", url: d.URL, args: []string{"history", "drop"}, code: 2,
			stderr: `hopper history: unknown history action "drop" (list or show) (run hopper history --help)`},
		{name: "dead without an action", url: d.URL, args: []string{"dead"}, code: 2,
			stderr: `hopper dead: say list, show, retry or purge (run hopper dead --help)`},
		{name: "unknown dead action", url: d.URL, args: []string{"dead", "revive"}, code: 2,
			stderr: `hopper dead: unknown dead action "revive" (list, show, retry or purge) (run hopper dead --help)`},
		{name: "queues list with a name", url: d.URL, args: []string{"queues", "list", "a"}, code: 2,
			stderr: `hopper queues: list takes no argument (run hopper queues --help)`},
		{name: "bad queue name", url: d.URL, args: []string{"queues", "pause", ""}, code: 2,
			stderr: `hopper queues: invalid queue name: queue name "" is empty (run hopper queues --help)`},
		{name: "bad queue name, purge", url: d.URL, args: []string{"queues", "purge", ""}, code: 2,
			stderr: `hopper queues: invalid queue name: queue name "" is empty (run hopper queues --help)`},
		{name: "unknown queues action", url: d.URL, args: []string{"queues", "drain", "a"}, code: 2,
			stderr: `hopper queues: unknown queues action "drain" (list, pause, resume or purge) (run hopper queues --help)`},
	})
}

// TestSchedulesCLI: list, pause (twice), resume (twice), trigger, and a
// schedule that does not exist.
func TestSchedulesCLI(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := worker.New(d.Pool, worker.Config{Logger: quietLog, PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, worker.Schedule(w, "nightly", beat, "30 2 * * *", func(slot time.Time) Beat { return Beat{Slot: slot} },
		worker.InZone("Europe/Berlin"), worker.OnMissed(worker.CatchUp(2)), worker.EnqueueOptions(jobs.Queue("reports"))))
	require.NoError(t, worker.Handle(w, beat, func(context.Context, *jobs.Job[Beat]) error { return nil }))
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-errc) }()

	var r result
	waitForCLI := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for !cond() {
			require.True(t, time.Now().Before(deadline), what)
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitForCLI("the schedule defined", func() bool {
		r = runHopper(t, d.URL, "", "schedules", "list")
		return strings.Contains(r.stdout, "nightly")
	})
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?m)^NAME\s+KIND\s+WHEN\s+MISSED\s+NEXT FIRE\s+LAST FIRE\s+STATE$`, r.stdout)
	require.Regexp(t, `(?m)^nightly\s+beat\s+30 2 \* \* \* \(Europe/Berlin\)\s+catch up 2\s+\S+ \S+\s+never\s+active$`, r.stdout)
	waitForCLI("the worker counted", func() bool {
		r = runHopper(t, d.URL, "", "queues", "list")
		return regexp.MustCompile(`(?m)^default\s+active\s+1 worker\s`).MatchString(r.stdout)
	})

	r = runHopper(t, d.URL, "", "schedules", "pause", "nightly")
	require.Equal(t, "schedule nightly paused: no worker fires it until hopper schedules resume nightly\n", r.stdout)
	r = runHopper(t, d.URL, "", "schedules", "pause", "nightly")
	require.Regexp(t, `^schedule nightly was paused already \(since \S+ \S+\)\n$`, r.stdout)
	r = runHopper(t, d.URL, "", "schedules", "list")
	require.Regexp(t, `paused since \S+ \S+`, r.stdout)

	r = runHopper(t, d.URL, "", "schedules", "trigger", "nightly")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `^schedule nightly triggered at \S+ \S+: a worker that defines it enqueues the job now\n$`, r.stdout)
	waitForCLI("the triggered job", func() bool {
		r = runHopper(t, d.URL, "", "jobs", "list", "--kind", "beat")
		return strings.Contains(r.stdout, "beat")
	})

	r = runHopper(t, d.URL, "", "schedules", "resume", "nightly")
	require.Equal(t, "schedule nightly resumed at its next slot (slots missed while paused do not fire)\n", r.stdout)
	r = runHopper(t, d.URL, "", "schedules", "resume", "nightly")
	require.Equal(t, "schedule nightly was not paused\n", r.stdout)

	runErrorCases(t, []errorCase{
		{name: "unknown schedule", url: d.URL, args: []string{"schedules", "trigger", "weekly"}, code: 1,
			stderr: `hopper schedules: no schedule "weekly" (a worker that defines it creates it when it starts; hopper schedules list shows them)`},
		{name: "no name", url: d.URL, args: []string{"schedules", "pause"}, code: 2,
			stderr: `hopper schedules: pause takes one schedule name (run hopper schedules --help)`},
		{name: "no action", url: d.URL, args: []string{"schedules"}, code: 2,
			stderr: `hopper schedules: say list, pause, resume or trigger (run hopper schedules --help)`},
		{name: "unknown action", url: d.URL, args: []string{"schedules", "delete", "nightly"}, code: 2,
			stderr: `hopper schedules: unknown schedules action "delete" (list, pause, resume or trigger) (run hopper schedules --help)`},
	})
}

// TestCLIMoreKeepsConnection: the "more:" line of a full page repeats the
// --schema and --database-url the user gave, so that pasted it lists the
// next page of the same jobs, not those of DATABASE_URL's schema; a
// password in --database-url is never printed.
func TestCLIMoreKeepsConnection(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	decoy := testdb.New(t) // what DATABASE_URL points at
	enqueue := func(url, kind string) string {
		t.Helper()
		r := runHopper(t, url, "", "enqueue", "--kind", kind)
		require.Zero(t, r.code, r.stderr)
		m := regexp.MustCompile(`enqueued job (\d+)`).FindStringSubmatch(r.stdout)
		require.NotNil(t, m, r.stdout)
		return m[1]
	}
	for range 2 {
		enqueue(d.URL, "mine")
		require.Zero(t, runHopper(t, d.URL, "", "jobs", "cancel", enqueue(d.URL, "mine")).code)
		enqueue(decoy.URL, "decoy")
		require.Zero(t, runHopper(t, decoy.URL, "", "jobs", "cancel", enqueue(decoy.URL, "decoy")).code)
	}
	const secret = "s3cr#t pw"
	withPassword := testdb.WithSearchPath(urlWithPassword(t, secret), d.Schema)

	for _, c := range []struct {
		name string
		args []string
		want []string // what the more: line must say
	}{
		{"--schema before the command", []string{"--schema", d.Schema, "jobs", "list", "--limit", "1"},
			[]string{"--schema " + d.Schema}},
		{"--schema after", []string{"dead", "list", "--limit", "1", "--schema", d.Schema},
			[]string{"--schema " + d.Schema}},
		{"--database-url with a password", []string{"jobs", "list", "--state", "cancelled", "--limit", "1", "--database-url", withPassword},
			[]string{"--database-url ", ":***@", "--state cancelled"}},
		{"both", []string{"--database-url", urlWithPassword(t, secret), "--schema", d.Schema, "dead", "list", "--limit", "1"},
			[]string{"--database-url ", ":***@", "--schema " + d.Schema}},
	} {
		r := runHopper(t, decoy.URL, "", c.args...)
		require.Zero(t, r.code, "%s: %s", c.name, r.stderr)
		require.Contains(t, r.stdout, "mine", c.name)
		require.NotContains(t, r.stdout, "decoy", c.name)
		require.NotContains(t, r.stdout, "s3cr", "%s: never the password", c.name)
		m := regexp.MustCompile(`(?m)^more: (hopper .*)$`).FindStringSubmatch(r.stdout)
		require.NotNil(t, m, "%s: a full page says how to get the next: %s", c.name, r.stdout)
		for _, w := range c.want {
			require.Contains(t, m[1], w, c.name)
		}
		// Pasted into a shell (the user puts the password back for ***),
		// the line lists the next page of the same schema.
		next := runShell(t, decoy.URL, strings.ReplaceAll(m[1], "***", url.PathEscape(secret)))
		require.Zero(t, next.code, "%s: %s %s", c.name, m[1], next.stderr)
		require.Contains(t, next.stdout, "mine", "%s: %s", c.name, m[1])
		require.NotContains(t, next.stdout, "decoy", "%s: %s", c.name, m[1])
	}
}

// urlWithPassword is the test server as a URL with a password (the test
// server trusts every connection, so any password connects).
func urlWithPassword(t *testing.T, password string) string {
	t.Helper()
	cfg, err := pgconn.ParseConfig(testdb.Server(t))
	require.NoError(t, err)
	u := url.URL{Scheme: "postgres", User: url.UserPassword(cfg.User, password), Path: "/" + cfg.Database}
	if strings.HasPrefix(cfg.Host, "/") {
		u.RawQuery = url.Values{"host": {cfg.Host}, "port": {strconv.Itoa(int(cfg.Port))}}.Encode()
	} else {
		u.Host = net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	}
	return u.String()
}

// runShell runs a command line the CLI printed ("hopper …") through sh,
// as a user who pastes it does, with DATABASE_URL set to url.
func runShell(t *testing.T, dsn, line string) result {
	t.Helper()
	rest, ok := strings.CutPrefix(line, "hopper ")
	require.True(t, ok, line)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", `"$HOPPER" `+rest)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dsn, "HOPPER="+hopperBin)
	return runCaptured(t, cmd)
}

// TestSchedulesCLITriggerStale: triggering a schedule no running worker
// defines records the trigger but does not report success: nothing fires
// it until a worker that defines it starts, and the command says so.
func TestSchedulesCLITriggerStale(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	run := func(staleAfter time.Duration) (stop func()) {
		w, err := worker.New(d.Pool, worker.Config{Logger: quietLog, PollInterval: 50 * time.Millisecond, ScheduleStaleAfter: staleAfter})
		require.NoError(t, err)
		require.NoError(t, worker.Schedule(w, "hourly", beat, "0 * * * *", func(slot time.Time) Beat { return Beat{Slot: slot} }))
		require.NoError(t, worker.Handle(w, beat, func(context.Context, *jobs.Job[Beat]) error { return nil }))
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- w.Run(ctx) }()
		return func() { cancel(); require.NoError(t, <-errc) }
	}
	stop := run(time.Second)
	var r result
	testdb.WaitFor(t, "the schedule defined", func() bool {
		r = runHopper(t, d.URL, "", "schedules", "list")
		return strings.Contains(r.stdout, "hourly")
	})
	stop()
	testdb.WaitFor(t, "the schedule stale", func() bool {
		r = runHopper(t, d.URL, "", "schedules", "list")
		return strings.Contains(r.stdout, "stale (no worker defines it since")
	})

	r = runHopper(t, d.URL, "", "schedules", "trigger", "hourly")
	requireFailure(t, r, 1, "")
	require.Regexp(t, `^hopper schedules: schedule hourly triggered, but no running worker defines it \(last reported \S+ \S+\): `+
		`its job is enqueued when a worker that defines it starts\n$`, r.stderr)
	require.Empty(t, r.stdout)
	r = runHopper(t, d.URL, "", "schedules", "list")
	require.Regexp(t, `(?m)^hourly\s.*stale \(no worker defines it since \S+ \S+\), triggered$`, r.stdout, "the trigger is kept")

	// As said: a worker that defines it fires the trigger when it starts.
	defer run(0)()
	// The trigger is done once the schedule's row says it fired: its job
	// was enqueued in that same transaction (and may be done and gone
	// already, so the jobs table cannot tell).
	testdb.WaitFor(t, "the triggered job", func() bool {
		var fired bool
		require.NoError(t, d.Pool.QueryRow(context.Background(),
			"SELECT triggered_at IS NULL AND last_fire_at IS NOT NULL FROM hopper_schedules WHERE name = 'hourly'").Scan(&fired))
		return fired
	})
}
