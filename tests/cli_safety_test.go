package tests

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// TestCLIDeadPurgeAsks: hopper dead purge by --queue, --kind, --older-than
// or --all asks first, like hopper queues purge, saying how many jobs; no answer
// or another answer than y deletes nothing, --yes skips the question, and
// ids (which name each job) ask nothing.
func TestCLIDeadPurgeAsks(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx := context.Background()
	// Three dead jobs (two of queue email, one of queue ops) and a
	// cancelled one of queue email, all ended three days ago.
	_, err := d.Pool.Exec(ctx, `INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt, max_attempts, errors, reason, created_at, died_at, state)
		VALUES (101, 'email', 'welcome', 1, '{}', 0, 1, 1, '[]', 'test', now(), now() - interval '3 days', 'dead'),
		       (102, 'email', 'welcome', 1, '{}', 0, 1, 1, '[]', 'test', now(), now() - interval '3 days', 'dead'),
		       (103, 'ops', 'report', 1, '{}', 0, 1, 1, '[]', 'test', now(), now() - interval '3 days', 'dead'),
		       (104, 'email', 'welcome', 1, '{}', 0, 1, 1, '[]', 'test', now(), now() - interval '3 days', 'cancelled')`)
	require.NoError(t, err)
	left := func() int {
		var n int
		require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM hopper_dead_jobs").Scan(&n))
		return n
	}
	const noAnswer = "hopper dead: not confirmed: no answer on stdin; nothing deleted (pass --yes to skip the question)"
	const refused = "hopper dead: not confirmed; nothing deleted (pass --yes to skip the question)"

	runErrorCases(t, []errorCase{
		{name: "queue, no answer", url: d.URL, args: []string{"dead", "purge", "--queue", "email"}, code: 1,
			stdout: "Delete 2 dead jobs of queue \"email\" for good? [y/N] \n", stderr: noAnswer},
		{name: "kind, answered no", url: d.URL, stdin: "n\n", args: []string{"dead", "purge", "--kind", "report"}, code: 1,
			stdout: "Delete 1 dead job of kind \"report\" for good? [y/N] ", stderr: refused},
		{name: "all, no answer", url: d.URL, args: []string{"dead", "purge", "--all"}, code: 1,
			stdout: "Delete all 3 dead jobs for good? [y/N] \n", stderr: noAnswer},
		{name: "all of both states, no answer", url: d.URL, args: []string{"dead", "purge", "--all", "--state", "dead,cancelled"}, code: 1,
			stdout: "Delete all 4 dead or cancelled jobs for good? [y/N] \n", stderr: noAnswer},
		{name: "older than, no answer", url: d.URL, args: []string{"dead", "purge", "--older-than", "1d", "--queue", "email", "--kind", "welcome"}, code: 1,
			stdout: "Delete up to 2 dead jobs of queue \"email\" and kind \"welcome\" (those that ended more than 1d ago) for good? [y/N] \n", stderr: noAnswer},
		{name: "nothing there asks nothing", url: d.URL, args: []string{"dead", "purge", "--queue", "nowhere"},
			stdout: "nothing to purge: no dead jobs of queue \"nowhere\"\n"},
	})
	require.Equal(t, 4, left(), "nothing deleted unasked")

	runErrorCases(t, []errorCase{
		{name: "queue and both states, answered y", url: d.URL, stdin: "y\n", args: []string{"dead", "purge", "--queue", "email", "--state", "dead,cancelled"},
			stdout: "Delete 3 dead or cancelled jobs of queue \"email\" for good? [y/N] purged 3 jobs\n"},
		{name: "--yes asks nothing", url: d.URL, args: []string{"dead", "purge", "--kind", "report", "--yes"}, stdout: "purged 1 job\n"},
	})
	require.Zero(t, left())

	_, err = d.Pool.Exec(ctx, `INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt, max_attempts, errors, reason, created_at)
		VALUES (105, 'email', 'welcome', 1, '{}', 0, 1, 1, '[]', 'test', now())`)
	require.NoError(t, err)
	runErrorCases(t, []errorCase{
		{name: "ids ask nothing", url: d.URL, args: []string{"dead", "purge", "105"}, stdout: "purged 1 job\n"},
	})
	require.Zero(t, left())
}
