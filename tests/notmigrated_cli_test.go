package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/migrated"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/schema"
)

// TestCLINotMigrated: on a schema migrated only part of the way (an
// upgrade without `hopper migrate up`), or not at all, every command that
// opens the database fails at once, exit 1, with one line naming the
// schema's version, the migrations it lacks, the version this build needs
// and `hopper migrate up`: keys and enqueue --concurrency-key no longer
// print a bare "column … does not exist", stats and ui no longer start as
// if all were well.
func TestCLINotMigrated(t *testing.T) {
	t.Parallel()
	needs := fmt.Sprintf("this build of Hopper needs schema version %d; run hopper migrate up (with the same --database-url / search_path)", schema.Latest())
	commands := [][]string{
		{"keys"},
		{"enqueue", "--kind", "k", "--concurrency-key", "tenant-1"},
		{"stats"},
		{"workers", "list"},
		{"workflows", "show", "wf-1"},
		{"ui", "--addr", "127.0.0.1:0"},
	}
	for v := uint(0); v < schema.Latest(); v++ {
		t.Run(fmt.Sprintf("version %d", v), func(t *testing.T) {
			t.Parallel()
			d := testdb.NewAtVersion(t, v)
			state := fmt.Sprintf("schema %s is at version %d without migration", d.Schema, v)
			if v == 0 {
				state = "schema " + d.Schema + " has no Hopper tables (version 0)"
			}
			for _, args := range commands {
				r := runHopperWithin(t, 30*time.Second, d.URL, args...)
				requireFailure(t, r, 1, "hopper "+args[0]+": schema not migrated: "+state)
				require.Contains(t, r.stderr, needs, args[0])
				if v > 0 {
					require.Contains(t, r.stderr, migrated.Migration(migrated.Latest)+": ", args[0])
				}
				require.Empty(t, r.stdout, args[0])
			}
		})
	}
}

// TestCLINotMigratedLine: the whole line, with --schema in the command to
// run.
func TestCLINotMigratedLine(t *testing.T) {
	t.Parallel()
	d := testdb.NewAtVersion(t, 7)
	server := testdb.Server(t)
	runErrorCases(t, []errorCase{
		{name: "behind", url: d.URL, args: []string{"stats"}, code: 1,
			stderr: "hopper stats: schema not migrated: schema " + d.Schema + " is at version 7 without migrations 8 (rate_starts) to 35 (citus_functions): " +
				"this build of Hopper needs schema version 35; run hopper migrate up (with the same --database-url / search_path)"},
		{name: "behind, --schema", url: server, args: []string{"keys", "--schema", d.Schema}, code: 1,
			stderr: "hopper keys: schema not migrated: schema " + d.Schema + " is at version 7 without migrations 8 (rate_starts) to 35 (citus_functions): " +
				"this build of Hopper needs schema version 35; run hopper --schema " + d.Schema + " migrate up (with the same --database-url)"},
	})
	require.Equal(t, migrated.Latest, int(schema.Latest()), "the line above names the latest migration")
	// Migrated, the same commands work.
	r := runHopper(t, d.URL, "", "migrate", "up")
	require.Zero(t, r.code, r.stderr)
	r = runHopper(t, d.URL, "", "enqueue", "--kind", "k", "--concurrency-key", "tenant-1")
	require.Zero(t, r.code, r.stderr)
	r = runHopper(t, d.URL, "", "keys")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "tenant-1")
}

// runHopperWithin is runHopper with a deadline of its own: a command that
// should fail at once but serves instead (ui) is stopped and fails the
// test.
func runHopperWithin(t *testing.T, limit time.Duration, url string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, hopperBin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	cmd.Stdin = strings.NewReader("")
	r := runCaptured(t, cmd)
	require.NoError(t, ctx.Err(), "hopper %s did not stop within %s: stdout %q stderr %q", strings.Join(args, " "), limit, r.stdout, r.stderr)
	return r
}
