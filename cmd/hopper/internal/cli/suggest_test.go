package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/cmd/hopper/internal/bench"
)

func TestEditDistance(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"schema", "schema", 0},
		{"shema", "schema", 1},   // a letter missing
		{"schemaa", "schema", 1}, // one too many
		{"jsno", "json", 1},      // two neighbours swapped
		{"pasue", "pause", 1},
		{"kitten", "sitting", 3},
		{"queue", "queues", 1},
		{"stats", "state", 1},
	} {
		require.Equal(t, c.want, editDistance(c.a, c.b), "%q %q", c.a, c.b)
		require.Equal(t, c.want, editDistance(c.b, c.a), "%q %q", c.b, c.a)
	}
}

func TestNearest(t *testing.T) {
	t.Parallel()
	flags := []string{"database-url", "schema", "json", "queue", "kind", "state", "limit", "older-than", "all", "yes"}
	for _, c := range []struct {
		word, want string
	}{
		{"shema", "schema"},
		{"SCHEMA", "schema"}, // case is no typo worth a miss
		{"jsn", "json"},
		{"jsno", "json"},
		{"databse-url", "database-url"},
		{"database", "database-url"}, // the start of one flag
		{"older", "older-than"},
		{"queues", "queue"},
		{"kinds", "kind"},
		{"states", "state"},
		{"limt", "limit"},
		{"y", ""},          // too short to guess from
		{"x", ""},          // nothing near
		{"frobnicate", ""}, // nothing near
		{"al", "all"},
		{"json", ""}, // an exact match is no suggestion
	} {
		require.Equal(t, c.want, nearest(c.word, flags), c.word)
	}
	require.Equal(t, "", nearest("s", []string{"stats", "schedules"}), "too short")
	require.Equal(t, "", nearest("sch", []string{"schema", "schedules"}), "the start of two: ambiguous")
	require.Equal(t, "stats", nearest("stast", []string{"stats", "state"}), "ties go to the first")
}

// TestUsageErrorsSuggest: an unknown command, action or flag fails with
// one line, exit status 2, and the nearest one when one is near; an old
// spelling of a command names the new one. None connects to a database.
func TestUsageErrorsSuggest(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"stast"}, `hopper: unknown command "stast"; did you mean stats? (run hopper help)`},
		{[]string{"scheduels", "list"}, `hopper: unknown command "scheduels"; did you mean schedules? (run hopper help)`},
		{[]string{"frobnicate"}, `hopper: unknown command "frobnicate" (run hopper help)`},
		{[]string{"help", "qeueus"}, `hopper: unknown command "qeueus"; did you mean queues? (run hopper help)`},
		{[]string{"--shema", "s", "stats"}, `hopper: unknown flag --shema; did you mean --schema? (run hopper help)`},
		{[]string{"--json", "stats"}, `hopper: unknown flag --json (run hopper help)`},
		{[]string{"stats", "--shema", "s"}, `hopper stats: unknown flag --shema; did you mean --schema? (run hopper stats --help)`},
		{[]string{"stats", "-jsno"}, `hopper stats: unknown flag --jsno; did you mean --json? (run hopper stats --help)`},
		{[]string{"stats", "--intervall=1s"}, `hopper stats: unknown flag --intervall; did you mean --interval? (run hopper stats --help)`},
		{[]string{"jobs", "list", "--kinds", "k"}, `hopper jobs: unknown flag --kinds; did you mean --kind? (run hopper jobs --help)`},
		{[]string{"dead", "purge", "--older", "2d"}, `hopper dead: unknown flag --older; did you mean --older-than? (run hopper dead --help)`},
		{[]string{"dead", "list", "--bogus"}, `hopper dead: unknown flag --bogus (run hopper dead --help)`},
		{[]string{"queues", "pasue", "q"}, `hopper queues: unknown queues action "pasue"; did you mean pause? (run hopper queues --help)`},
		{[]string{"queues", "drain", "q"}, `hopper queues: unknown queues action "drain" (list, pause, resume or purge) (run hopper queues --help)`},
		{[]string{"jobs", "cancle", "1"}, `hopper jobs: unknown jobs action "cancle"; did you mean cancel? (run hopper jobs --help)`},
		{[]string{"schedules", "triger", "n"}, `hopper schedules: unknown schedules action "triger"; did you mean trigger? (run hopper schedules --help)`},
		{[]string{"wokrers", "list"}, `hopper: unknown command "wokrers"; did you mean workers? (run hopper help)`},
		{[]string{"worker", "list"}, `hopper: unknown command "worker"; did you mean workers? (run hopper help)`},
		{[]string{"workers", "relase", "w1"}, `hopper workers: unknown workers action "relase"; did you mean release? (run hopper workers --help)`},
		{[]string{"workers", "release", "w1", "--froce"}, `hopper workers: unknown flag --froce; did you mean --force? (run hopper workers --help)`},
		{[]string{"migrate", "upp"}, `hopper migrate: unknown migrate action "upp"; did you mean up? (run hopper migrate --help)`},
		{[]string{"sql", "exprot", "dir"}, `hopper sql: unknown sql action "exprot"; did you mean export? (run hopper sql --help)`},
		{[]string{"jobs", "waek", "1"}, `hopper jobs: unknown jobs action "waek"; did you mean wake? (run hopper jobs --help)`},
		{[]string{"evnets", "emit", "x"}, `hopper: unknown command "evnets"; did you mean events? (run hopper help)`},
		{[]string{"events", "emti", "x"}, `hopper events: unknown events action "emti"; did you mean emit? (run hopper events --help)`},
		// The values of flags, in the CLI's words.
		{[]string{"stats", "--interval"}, `hopper stats: --interval needs a value (run hopper stats --help)`},
		{[]string{"stats", "--interval", "soon"}, `hopper stats: invalid value "soon" for --interval: want a duration like 90s, 2h or 7d (run hopper stats --help)`},
		{[]string{"keys", "--limit", "many"}, `hopper keys: invalid value "many" for --limit (run hopper keys --help)`},
		{[]string{"stats", "--json=maybe"}, `hopper stats: invalid boolean value "maybe" for --json (run hopper stats --help)`},
		// Old spellings: refused, with the new one.
		{[]string{"queue", "list"}, `hopper queue: this command is now hopper queues list | pause NAME | resume NAME | purge NAME`},
		{[]string{"--schema", "s", "queue", "pause", "q"}, `hopper queue: this command is now hopper queues list | pause NAME | resume NAME | purge NAME`},
		{[]string{"cancel", "1", "2"}, `hopper cancel: this command is now hopper jobs cancel ID...`},
		{[]string{"purge", "--queue", "q", "--yes"}, `hopper purge: this command is now hopper queues purge NAME`},
		{[]string{"help", "purge"}, `hopper purge: this command is now hopper queues purge NAME`},
		// Flags an action does not take.
		{[]string{"--schema", "mine", "demo"}, `hopper demo: the demo runs in a schema of its own, hopper_demo: it takes no --schema (run hopper demo --help)`},
		{[]string{"jobs", "cancel", "1", "--state", "pending"}, `hopper jobs: cancel takes job ids, not --state (run hopper jobs --help)`},
		{[]string{"jobs", "wake", "1", "--json"}, `hopper jobs: wake takes one job id, not --json (run hopper jobs --help)`},
		{[]string{"jobs", "wake", "1", "--read-url", "postgres://standby"},
			`hopper jobs: wake changes jobs, and changes go to the primary (--database-url): --read-url is for list and show (run hopper jobs --help)`},
		{[]string{"events", "emit", "x", "--read-url", "postgres://standby"}, `hopper events: unknown flag --read-url (run hopper events --help)`},
	} {
		var out, errOut bytes.Buffer
		code := Run(context.Background(), c.args, strings.NewReader(""), &out, &errOut)
		require.Equal(t, exitUsage, code, "%v: %s", c.args, errOut.String())
		require.Equal(t, c.want+"\n", errOut.String(), "%v", c.args)
		require.Empty(t, out.String(), "%v", c.args)
	}
}

// TestDurationFlags: every duration flag takes days, as --older-than does.
func TestDurationFlags(t *testing.T) {
	t.Parallel()
	var d time.Duration
	v := durationValue{&d}
	for in, want := range map[string]time.Duration{"90s": 90 * time.Second, "2h": 2 * time.Hour, "7d": 7 * 24 * time.Hour, "1.5d": 36 * time.Hour} {
		require.NoError(t, v.Set(in))
		require.Equal(t, want, d, in)
	}
	require.Error(t, v.Set("soon"))
	require.NoError(t, v.Set("1.5d"))
	require.Equal(t, "36h0m0s", v.String())
}

// TestJSONFieldNames: every field of every type the CLI prints with
// --json has a snake_case name, those absent from a given output
// (omitempty, or in sections a run does not fill) included. The tests of
// tests/json_cli_test.go check the printed output itself.
func TestJSONFieldNames(t *testing.T) {
	t.Parallel()
	snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	marshaler := reflect.TypeFor[json.Marshaler]()
	seen := map[reflect.Type]bool{}
	var check func(path string, typ reflect.Type)
	check = func(path string, typ reflect.Type) {
		if seen[typ] || typ.Implements(marshaler) || reflect.PointerTo(typ).Implements(marshaler) {
			return // time.Time and the like write their own
		}
		seen[typ] = true
		switch typ.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array:
			check(path, typ.Elem())
		case reflect.Map:
			check(path+"[]", typ.Elem())
		case reflect.Struct:
			for i := range typ.NumField() {
				f := typ.Field(i)
				if !f.IsExported() {
					continue
				}
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				switch {
				case name == "-":
					continue
				case name == "" && f.Anonymous:
					check(path, f.Type) // its fields are printed as the outer type's
					continue
				}
				require.Regexp(t, snake, name, "%s.%s (%s) has no snake_case json name", path, f.Name, typ)
				check(path+"."+name, f.Type)
			}
		}
	}
	for _, v := range []any{statsReport{}, keysReport{}, []queueRow{}, []hopper.ScheduleInfo{}, []workerRow{}, jobsPage{}, jobReport{}, bench.Report{}} {
		check(reflect.TypeOf(v).String(), reflect.TypeOf(v))
	}
}
