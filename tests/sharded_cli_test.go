package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// TestShardedCLIOffCitus: the job commands' --sharded, on plain
// PostgreSQL, say that it needs a sharded Hopper on a Citus coordinator
// (exit 1); with flags it cannot take, they are a usage error (exit 2),
// before connecting. tests/citus runs them on a sharded Hopper.
func TestShardedCLIOffCitus(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	for _, args := range [][]string{
		{"jobs", "list", "--sharded"},
		{"jobs", "show", "1", "--sharded"},
		{"jobs", "cancel", "1", "--sharded"},
		{"history", "list", "--sharded"},
		{"dead", "list", "--sharded"},
		{"stats", "--sharded"},
	} {
		r := runHopper(t, d.URL, "", args...)
		require.Equal(t, 1, r.code, "%v: %s", args, r.stderr)
		require.Regexp(t, `^hopper [a-z]+: --sharded: shards: not a Citus coordinator: the database has no citus extension \(it works on a sharded Hopper on a Citus coordinator; on one Hopper schema, drop --sharded\)\n$`, r.stderr, args)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--schema", d.Schema, "jobs", "list", "--sharded"}, "--sharded takes no --schema"},
		{[]string{"jobs", "list", "--sharded", "--read-url", d.URL}, "--sharded reads the coordinator (--database-url): it takes no --read-url"},
		{[]string{"stats", "--sharded", "--read-url", d.URL}, "it takes no --read-url"},
		{[]string{"ui", "--sharded", "--read-url", d.URL}, "it takes no --read-url"},
		{[]string{"jobs", "cancel", "1", "--sharded", "--queue", "q"}, "cancel takes job ids, not --queue"},
		{[]string{"queues", "list", "--sharded"}, "unknown flag --sharded"},
	} {
		r := runHopper(t, d.URL, "", tc.args...)
		require.Equal(t, 2, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.want, tc.args)
	}
	r := runHopper(t, d.URL, "", "dead", "retry", "1", "--sharded")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "dead retry does not run on a sharded Hopper yet")
}
