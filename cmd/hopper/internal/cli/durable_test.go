package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// TestDurableSentences: how far ahead a wait ends; a wait's line; a
// record's state, a wait whose time passed saying so; long results cut
// to one short line.
func TestDurableSentences(t *testing.T) {
	t.Parallel()
	require.Equal(t, "in 0s", fromNow(-time.Minute), "a time past is now")
	require.Equal(t, "in 42s", fromNow(42*time.Second))
	require.Equal(t, "in 5m03s", fromNow(5*time.Minute+3*time.Second))
	require.Equal(t, "in 3h07m", fromNow(3*time.Hour+7*time.Minute))
	require.Equal(t, "in 47h59m", fromNow(48*time.Hour-time.Minute))
	require.Equal(t, "in 6d23h", fromNow(7*24*time.Hour-time.Hour))

	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	until := now.Add(90 * time.Second)
	require.Equal(t, "sleeping until "+stamp(until)+" (in 1m30s)", waitLine(hopper.Suspension{Wait: "sleep", Until: until}, now))
	require.Equal(t, `awaiting event "shipped-42" until `+stamp(until)+" (in 1m30s; then the wait times out)",
		waitLine(hopper.Suspension{Wait: "event", Event: "shipped-42", Until: until}, now))
	require.Empty(t, waitLine(hopper.Suspension{}, now))

	past, ahead := now.Add(-time.Second), now.Add(time.Second)
	for _, c := range []struct {
		step hopper.JobStep
		want string
	}{
		{hopper.JobStep{Kind: "step", State: "done"}, "done"},
		{hopper.JobStep{Kind: "sleep", State: "waiting", Until: ahead}, "waiting"},
		{hopper.JobStep{Kind: "sleep", State: "waiting", Until: past}, "over"},
		{hopper.JobStep{Kind: "event", State: "waiting", Until: ahead}, "waiting"},
		{hopper.JobStep{Kind: "event", State: "waiting", Until: past}, "deadline passed"},
		{hopper.JobStep{Kind: "event", State: "timed_out", Until: past}, "timed_out"},
		{hopper.JobStep{Kind: "event", State: "done", Until: past}, "done"},
	} {
		require.Equal(t, c.want, recordState(c.step, now), "%+v", c.step)
	}

	require.Equal(t, `{"a": 1}`, clip("{\"a\":\n 1}", 10))
	require.Equal(t, "abcdefghi…", clip("abcdefghijkl", 10))
	require.Equal(t, "ééééééééé…", clip(strings.Repeat("é", 20), 10), "cut in characters, not bytes")
	require.Equal(t, "shipped-42", quoteName("shipped-42"))
	require.Equal(t, `"order 42"`, quoteName("order 42"))
}

// TestEventArgs: events emit takes a name and one payload, which must be
// JSON: a missing one is refused, not taken for null, since an emit
// replaces an earlier payload of the name.
func TestEventArgs(t *testing.T) {
	t.Parallel()
	name, payload, err := eventArgs([]string{"shipped-42", "null"})
	require.NoError(t, err)
	require.Equal(t, "shipped-42", name)
	require.Equal(t, "null", string(payload))
	_, payload, err = eventArgs([]string{"shipped-42", `{"carrier": "dhl"}`})
	require.NoError(t, err)
	require.JSONEq(t, `{"carrier": "dhl"}`, string(payload))
	_, payload, err = eventArgs([]string{"n", `"text"`})
	require.NoError(t, err)
	require.Equal(t, `"text"`, string(payload))
	for _, c := range []struct {
		args []string
		says string
	}{
		{nil, "emit takes an event name"},
		{[]string{"a", "{}", "extra"}, "then its payload as JSON"},
		{[]string{"shipped-42"}, "emit takes the payload after the name, as JSON (null for none): emitting shipped-42 again would replace its payload"},
		{[]string{""}, "not an empty one"},
		{[]string{"a", "{nope"}, "the payload is not valid JSON"},
		{[]string{"a", "text"}, "the payload is not valid JSON"},
		{[]string{"a", ""}, "the payload is not valid JSON"},
	} {
		_, _, err := eventArgs(c.args)
		require.ErrorIs(t, err, errUsage, "%q", c.args)
		require.ErrorContains(t, err, c.says, "%q", c.args)
	}
}

// TestJobShowDurable: jobs show prints a durable job's wait under its
// state, with the commands that end it, its progress, and its records in
// a table after its payload; --json has them as steps, progress and
// suspension, null when none.
func TestJobShowDurable(t *testing.T) {
	t.Parallel()
	now := time.Now()
	row := jobs.Row{ID: 7, Kind: "checkout", Queue: "default", State: jobs.StateScheduled, Payload: json.RawMessage(`{}`),
		RunAt: now.Add(time.Hour), CreatedAt: now, MaxAttempts: 25}
	steps := []hopper.JobStep{
		{Position: 0, Kind: "step", Name: "charge", State: "done", Result: json.RawMessage(`{"id": "` + strings.Repeat("x", 80) + `"}`), CreatedAt: now},
		{Position: 1, Kind: "event", Name: "shipped 42", State: "waiting", Until: now.Add(time.Hour), CreatedAt: now},
	}
	e := &env{schema: "app"}
	d := &durableView{steps: steps, now: now, wait: hopper.SuspensionOf(row.State, steps, now),
		progress: &jobs.Progress{Value: json.RawMessage(`{"done": 3}`), UpdatedAt: now}}
	require.Equal(t, hopper.StepKindEvent, d.wait.Wait)
	d.hints = []string{e.commandLine("events emit " + shellQuote(d.wait.Event))}

	var out bytes.Buffer
	printJob(&out, row, d)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Regexp(t, `^awaiting event "shipped 42" until \S+ \S+ \(in (59m\d\ds|1h00m); then the wait times out\)$`, lines[2])
	require.Equal(t, "  hopper --schema app events emit 'shipped 42'", lines[3])
	require.Equal(t, `progress: {"done": 3} (set `+stamp(now)+")", lines[4])
	require.Equal(t, "payload: {}", lines[5])
	require.Equal(t, "durable records:", lines[6])
	require.Regexp(t, `^  POSITION\s+KIND\s+NAME\s+STATE\s+UNTIL\s+RESULT$`, lines[7])
	require.Regexp(t, `^  0\s+step\s+charge\s+done\s+-\s+\{"id": "x+…$`, lines[8])
	require.Len(t, []rune(strings.TrimSpace(lines[8][strings.Index(lines[8], "{"):])), maxShownRecord)
	require.Regexp(t, `^  1\s+event\s+shipped 42\s+waiting\s+\S+ \S+\s+-$`, lines[9])
	require.Len(t, lines, 10)

	raw, err := json.Marshal(d.report(row))
	require.NoError(t, err)
	var back map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &back))
	require.Equal(t, `7`, string(back["id"]), "the row's fields, at the top")
	require.JSONEq(t, `{"wait": "event", "event": "shipped 42", "until": `+mustJSON(t, steps[1].Until)+`}`, string(back["suspension"]))
	require.JSONEq(t, `{"value": {"done": 3}, "updated_at": `+mustJSON(t, now)+`}`, string(back["progress"]))
	require.Contains(t, string(back["steps"]), `"result":{"id":`, "whole in JSON")
	require.NotContains(t, string(back["steps"]), `"until":null`)

	// A job with no records: steps [], progress and suspension null; its
	// text has no durable lines.
	plain := &durableView{now: now}
	raw, err = json.Marshal(plain.report(row))
	require.NoError(t, err)
	require.Contains(t, string(raw), `"steps":[],"progress":null,"suspension":null`)
	out.Reset()
	printJob(&out, row, plain)
	require.NotContains(t, out.String(), "durable")
	require.NotContains(t, out.String(), "progress")
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
