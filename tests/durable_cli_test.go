package tests

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

type DurableOrder struct {
	N int `json:"n"`
}

type Shipment struct {
	Carrier string `json:"carrier"`
}

// The kinds of TestCLIDurable: one that sleeps after a step, one that
// awaits an event.
var (
	durableSleeper = jobs.MustDefine[DurableOrder]("durable_cli_sleeper", jobs.Defaults(jobs.Queue("durable")))
	durableAwaiter = jobs.MustDefine[DurableOrder]("durable_cli_awaiter", jobs.Defaults(jobs.Queue("durable")))
)

// TestCLIDurable: hopper jobs show prints a sleeping job's wait, the
// command that wakes it, its progress and its records, and --json the
// same as steps, progress and suspension; hopper events emit wakes the
// job that awaits the event, which receives its payload; hopper jobs wake
// ends a sleep, and says why when there is nothing to wake.
func TestCLIDurable(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := hopper.NewClient(d.Pool)
	w, err := worker.New(d.Pool, worker.Config{Logger: quietLog, PollInterval: 50 * time.Millisecond, Queues: map[string]int{"durable": 2}})
	require.NoError(t, err)
	require.NoError(t, worker.HandleWithResult(w, durableSleeper, func(ctx context.Context, j *jobs.Job[DurableOrder]) (string, error) {
		charge, err := worker.Step(ctx, j, "charge", func(context.Context) (map[string]string, error) {
			return map[string]string{"charge": "ch_1"}, nil
		})
		if err != nil {
			return "", err
		}
		if err := worker.SetProgress(ctx, j, map[string]int{"done": 1, "of": 2}); err != nil {
			return "", err
		}
		if err := worker.Sleep(ctx, j, "cool-off", time.Hour); err != nil {
			return "", err
		}
		return charge["charge"], nil
	}, worker.KeepHistory(time.Hour)))
	require.NoError(t, worker.HandleWithResult(w, durableAwaiter, func(ctx context.Context, j *jobs.Job[DurableOrder]) (Shipment, error) {
		return worker.AwaitEvent[Shipment](ctx, j, "shipped-1", time.Hour)
	}, worker.KeepHistory(time.Hour)))
	sleeper, err := durableSleeper.Enqueue(ctx, d.Pool, DurableOrder{N: 1})
	require.NoError(t, err)
	awaiter, err := durableAwaiter.Enqueue(ctx, d.Pool, DurableOrder{N: 1})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(wctx) }()
	defer func() { stop(); require.NoError(t, <-errc) }()

	waiting := func(id int64) hopper.Suspension {
		row, err := client.GetJob(ctx, id)
		require.NoError(t, err)
		steps, err := client.ListJobSteps(ctx, id)
		require.NoError(t, err)
		return hopper.SuspensionOf(row.State, steps, time.Now())
	}
	testdb.WaitFor(t, "both jobs in their waits", func() bool {
		return waiting(sleeper.ID).Wait == hopper.StepKindSleep && waiting(awaiter.ID).Wait == hopper.StepKindEvent
	})
	run := func(args ...string) result {
		t.Helper()
		return runHopper(t, d.URL, "", args...)
	}
	ended := func(id int64) jobs.Row {
		t.Helper()
		var row jobs.Row
		testdb.WaitFor(t, "the job completed", func() bool {
			row, err = client.GetJob(ctx, id)
			require.NoError(t, err)
			return row.State == jobs.StateCompleted
		})
		return row
	}

	r := run("jobs", "show", itoa(sleeper.ID))
	require.Zero(t, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Regexp(t, `^job `+itoa(sleeper.ID)+`  kind durable_cli_sleeper  queue durable  state scheduled`, lines[0])
	require.Regexp(t, `^sleeping until \S+ \S+ \(in (59m\d\ds|1h00m)\)$`, lines[2])
	require.Equal(t, "  hopper jobs wake "+itoa(sleeper.ID)+" ends the sleep now", lines[3])
	require.Regexp(t, `(?m)^progress: \{"of": 2, "done": 1\} \(set \S+ \S+\)$`, r.stdout)
	require.Regexp(t, `(?m)^durable records:\n  POSITION\s+KIND\s+NAME\s+STATE\s+UNTIL\s+RESULT\n`+
		`  0\s+step\s+charge\s+done\s+-\s+\{"charge": "ch_1"\}\n`+
		`  1\s+sleep\s+cool-off\s+waiting\s+\S+ \S+\s+-$`, r.stdout)

	r = run("jobs", "show", itoa(awaiter.ID), "--json")
	require.Zero(t, r.code, r.stderr)
	seen := requireSnakeCase(t, "jobs show", r.stdout)
	for _, k := range []string{".id", ".state", ".steps", ".steps[].position", ".steps[].kind", ".steps[].name", ".steps[].state",
		".steps[].until", ".steps[].created_at", ".progress", ".suspension", ".suspension.wait", ".suspension.event", ".suspension.until"} {
		require.True(t, seen[k], "no %s in %v", k, seen)
	}
	var show struct {
		ID    int64 `json:"id"`
		Steps []struct {
			Kind, Name, State string
			Until             *time.Time
		} `json:"steps"`
		Progress   *json.RawMessage `json:"progress"`
		Suspension struct {
			Wait, Event string
			Until       time.Time
		} `json:"suspension"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &show))
	require.Equal(t, awaiter.ID, show.ID)
	require.Len(t, show.Steps, 1)
	require.Equal(t, "event", show.Steps[0].Kind)
	require.Equal(t, "waiting", show.Steps[0].State)
	require.Nil(t, show.Progress, "none recorded: null")
	require.Equal(t, "event", show.Suspension.Wait)
	require.Equal(t, "shipped-1", show.Suspension.Event)
	require.Equal(t, *show.Steps[0].Until, show.Suspension.Until)
	r = run("jobs", "show", itoa(awaiter.ID))
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?m)^awaiting event "shipped-1" until \S+ \S+ \(in \S+; then the wait times out\)\n`+
		`  hopper events emit shipped-1 JSON emits the event: the job runs and receives it\n`+
		`  hopper jobs wake `+itoa(awaiter.ID)+` ends the wait now \(its AwaitEvent returns worker.ErrEventTimeout\)$`, r.stdout)

	// The event: the job that awaits it runs, and returns its payload.
	r = run("events", "emit", "shipped-1", `{"carrier": "dhl"}`)
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "event shipped-1 emitted: woke 1 job waiting for it; each runs at once and receives the payload\n", r.stdout)
	require.JSONEq(t, `{"carrier": "dhl"}`, string(ended(awaiter.ID).Result))
	r = run("events", "emit", "nobody-waits", "null")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "event nobody-waits emitted: no job was waiting for it; a job that awaits it later receives it, until the workers prune it\n", r.stdout)

	// The sleep, ended early: the job replays its step and completes.
	r = run("jobs", "wake", itoa(sleeper.ID))
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "job "+itoa(sleeper.ID)+": woken: its sleep is over; it is pending, and runs at the next claim\n", r.stdout)
	require.JSONEq(t, `"ch_1"`, string(ended(sleeper.ID).Result))
	r = run("jobs", "show", itoa(sleeper.ID))
	require.Zero(t, r.code, r.stderr)
	require.NotContains(t, r.stdout, "durable records", "a completed job's records went with it")
	require.NotRegexp(t, regexp.MustCompile(`(?m)^(sleeping|awaiting)`), r.stdout)

	pending, err := durableSleeper.Enqueue(ctx, d.Pool, DurableOrder{N: 2}, jobs.Queue("unserved"))
	require.NoError(t, err)
	runErrorCases(t, []errorCase{
		{name: "completed", url: d.URL, args: []string{"jobs", "wake", itoa(sleeper.ID)}, code: 1,
			stderr: "hopper jobs: job " + itoa(sleeper.ID) + " is completed already: nothing to wake (only a scheduled job that sleeps or awaits an event wakes)"},
		{name: "in no wait", url: d.URL, args: []string{"jobs", "wake", itoa(pending.ID)}, code: 1,
			stderr: "hopper jobs: job " + itoa(pending.ID) + " is pending, in no durable wait (it neither sleeps nor awaits an event): nothing woken"},
		{name: "unknown", url: d.URL, args: []string{"jobs", "wake", "424242"}, code: 1,
			stderr: "hopper jobs: no job 424242 (never enqueued, or completed without history, or purged)"},
		{name: "bad payload", url: d.URL, args: []string{"events", "emit", "shipped-2", "{nope"}, code: 2,
			stderr: `hopper events: the payload is not valid JSON (invalid character 'n' looking for beginning of object key string): ` +
				`give JSON, quoted for the shell ('{"ok": true}', '"text"', null) (run hopper events --help)`},
		{name: "no payload", url: d.URL, args: []string{"events", "emit", "shipped-1"}, code: 2,
			stderr: `hopper events: emit takes the payload after the name, as JSON (null for none): ` +
				`emitting shipped-1 again would replace its payload for the jobs that have not received it (run hopper events --help)`},
		{name: "name too long", url: d.URL, args: []string{"events", "emit", strings.Repeat("n", 256), "{}"}, code: 2,
			stderr: `hopper events: emit event "` + strings.Repeat("n", 256) + `": invalid event: want a name of 1 to 255 characters of UTF-8 text (run hopper events --help)`},
	})
	require.Equal(t, jobs.StatePending, func() jobs.State {
		row, err := client.GetJob(ctx, pending.ID)
		require.NoError(t, err)
		return row.State
	}(), "a refused wake changes nothing")
}
