package tests

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// Kinds of TestCLIJSONSnakeCase: one that completes (kept in the
// history) and one that fails for good (dead, with an error history).
var (
	beat     = jobs.MustDefine[Beat]("beat")
	jsonDone = jobs.MustDefine[Beat]("json_done")
	jsonFail = jobs.MustDefine[Beat]("json_fail")
)

// snakeCase is the one style of every field name the CLI prints as JSON.
var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// userData are the fields whose contents are the user's own (a job's
// payload, result and metadata), whatever names they use.
var userData = map[string]bool{"payload": true, "result": true, "meta": true}

// requireSnakeCase checks every key of a JSON document, at any depth
// (user data apart), and returns the keys it saw, by path.
func requireSnakeCase(t *testing.T, what, doc string) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	dec := json.NewDecoder(strings.NewReader(doc))
	for dec.More() { // stats --json prints one object per refresh
		var v any
		require.NoError(t, dec.Decode(&v), "%s: %s", what, doc)
		var walk func(path string, v any)
		walk = func(path string, v any) {
			switch v := v.(type) {
			case map[string]any:
				for k, x := range v {
					require.Regexp(t, snakeCase, k, "%s: key %q at %s", what, k, path)
					seen[path+"."+k] = true
					if !userData[k] {
						walk(path+"."+k, x)
					}
				}
			case []any:
				for _, x := range v {
					walk(path+"[]", x)
				}
			}
		}
		walk("", v)
	}
	require.NotEmpty(t, seen, "%s printed no field: %s", what, doc)
	return seen
}

// TestCLIJSONSnakeCase runs every command that takes --json, on a schema
// with something of each kind to show (a live worker, a paused queue, a
// rate limit in use, concurrency keys, completed, dead and cancelled jobs,
// schedules fired and paused), and checks that every field name it prints
// is snake_case. A command that takes --json and is missing here fails
// the test.
func TestCLIJSONSnakeCase(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	w, err := worker.New(d.Pool, worker.Config{Logger: quietLog, PollInterval: 50 * time.Millisecond,
		Queues:             map[string]int{jobs.DefaultQueue: 5, "limited": 1},
		FlowControl:        map[string]worker.FlowControl{"limited": {Rate: worker.Rate{Limit: 100, Per: time.Hour}}},
		KeepHistoryByQueue: map[string]time.Duration{jobs.DefaultQueue: time.Hour, "limited": time.Hour}})
	require.NoError(t, err)
	for _, name := range []string{"nightly", "weekly"} {
		require.NoError(t, worker.Schedule(w, name, beat, "30 2 * * *", func(slot time.Time) Beat { return Beat{Slot: slot} }))
	}
	require.NoError(t, worker.Handle(w, beat, func(context.Context, *jobs.Job[Beat]) error { return nil }))
	require.NoError(t, worker.Handle(w, jsonDone, func(context.Context, *jobs.Job[Beat]) error { return nil }))
	require.NoError(t, worker.Handle(w, jsonFail, func(context.Context, *jobs.Job[Beat]) error { return errors.New("boom") }))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-errc) }()

	run := func(args ...string) string {
		t.Helper()
		r := runHopper(t, d.URL, "", args...)
		require.Zero(t, r.code, "%v: %s", args, r.stderr)
		return r.stdout
	}
	enqueue := func(args ...string) string {
		t.Helper()
		m := regexp.MustCompile(`enqueued job (\d+)`).FindStringSubmatch(run(append([]string{"enqueue"}, args...)...))
		require.NotNil(t, m)
		return m[1]
	}
	done := enqueue("--kind", "json_done", "--meta", "Tenant-ID=acme", "--payload", `{"UserID": 7}`)
	enqueue("--kind", "json_done", "--queue", "limited")
	dead := enqueue("--kind", "json_fail", "--max-attempts", "1")
	enqueue("--kind", "held", "--queue", "held", "--concurrency-key", "acme")
	run("jobs", "cancel", enqueue("--kind", "held", "--queue", "held"))
	run("queues", "pause", "held")
	// A sequence blocked by its cancelled head, one job behind it.
	head := enqueue("--kind", "held", "--queue", "held", "--sequence", "json-seq")
	enqueue("--kind", "held", "--queue", "held", "--sequence", "json-seq")
	run("jobs", "cancel", head)
	// A workflow of two steps, the child after the root.
	_, err = jobs.EnqueueWorkflow(ctx, d.Pool, jobs.NewWorkflow("json-wf").
		Add("root", jsonDone.Entry(Beat{})).
		Add("child", jsonDone.Entry(Beat{}), jobs.After("root")))
	require.NoError(t, err)
	// And one that stays live on the paused queue, for workflows list.
	_, err = jobs.EnqueueWorkflow(ctx, d.Pool, jobs.NewWorkflow("json-live-wf").
		Add("root", jsonDone.Entry(Beat{}, jobs.Queue("held"))).
		Add("child", jsonDone.Entry(Beat{}, jobs.Queue("held")), jobs.After("root")))
	require.NoError(t, err)
	// An encrypted payload, for encryption's count of keys.
	_, err = jobs.MustDefine[Beat]("json_secret", jobs.Defaults(jobs.Queue("held")),
		jobs.Encrypted(jobs.MustKeyring("k1", map[string][]byte{"k1": make([]byte, 32)}))).Enqueue(ctx, d.Pool, Beat{})
	require.NoError(t, err)
	testdb.WaitFor(t, "the schedules defined", func() bool { return strings.Contains(run("schedules", "list"), "weekly") })
	run("schedules", "pause", "weekly")
	run("schedules", "trigger", "nightly")
	testdb.WaitFor(t, "the jobs worked and the schedule fired", func() bool {
		return len(regexp.MustCompile(`(?m)^\d+\s+completed\s`).FindAllString(run("history", "list"), -1)) >= 3 &&
			strings.Contains(run("dead", "list"), "json_fail")
	})

	cases := []struct {
		args []string
		want []string // keys that must be there: the test shows what it means to
	}{
		{[]string{"stats"}, []string{".queues[].workers", ".queues[].oldest_ready_seconds"}},
		{[]string{"keys"}, []string{".keys[].key", ".rate_limits[].per_seconds"}},
		{[]string{"encryption"}, []string{"[].key_id", "[].place", "[].kind", "[].values"}},
		{[]string{"queues", "list"}, []string{"[].workers", "[].paused_at", "[].oldest_ready_seconds"}},
		{[]string{"schedules", "list"}, []string{"[].time_zone", "[].next_fire_at", "[].last_fire_at", "[].paused_at", "[].last_reported"}},
		{[]string{"workers", "list"}, []string{"[].jobs_held", "[].last_beat_at", "[].since_beat_seconds", "[].stale_after_seconds"}},
		{[]string{"jobs", "list"}, []string{".jobs[].max_attempts", ".jobs[].concurrency_key", ".jobs[].payload"}},
		{[]string{"jobs", "show", done}, []string{".created_at", ".meta"}},
		{[]string{"dead", "list"}, []string{".jobs[].errors[].attempt", ".jobs[].reason"}},
		{[]string{"dead", "show", dead}, []string{".errors[].error", ".finished_at"}},
		{[]string{"history", "list"}, []string{".jobs[].finished_at"}},
		{[]string{"history", "show", done}, []string{".finished_at"}},
		{[]string{"sequences", "list"}, []string{".sequences[].job_id", ".sequences[].blocked_at", ".sequences[].waiting_capped"}},
		{[]string{"sequences", "show", "json-seq"}, []string{".blocked.job_id", ".waiting"}},
		{[]string{"version"}, []string{".version", ".revision", ".vcs_time", ".vcs_modified", ".schema_version", ".go"}},
		{[]string{"workflows", "show", "json-wf"}, []string{".steps[].parent_steps", ".steps[].max_attempts", ".steps[].created_at"}},
		{[]string{"workflows", "list"}, []string{".workflows[].id", ".workflows[].oldest_at", ".workflows[].age_seconds"}},
		{[]string{"patches", "json_done", "cents"}, []string{"[].kind", "[].patch", "[].marked", "[].unmarked"}},
	}
	// bench's report: its types are checked by cmd/hopper/internal/cli's
	// TestJSONFieldNames (a run takes minutes). shards status needs a Citus
	// coordinator: tests/citus's TestCitusShardedClient reads its fields.
	covered := map[string]bool{"bench": true, "shards": true}
	for _, c := range cases {
		seen := requireSnakeCase(t, strings.Join(c.args, " "), run(append(c.args, "--json")...))
		for _, k := range c.want {
			require.True(t, seen[k], "%v --json: no %s in %v", c.args, k, seen)
		}
		covered[c.args[0]] = true
	}

	// Every command that takes --json is above.
	for _, m := range regexp.MustCompile(`(?m)^  ([a-z]+) `).FindAllStringSubmatch(run("help"), -1) {
		if strings.Contains(run("help", m[1]), "--json") {
			require.True(t, covered[m[1]], "hopper %s takes --json: check it here", m[1])
		}
	}
}
