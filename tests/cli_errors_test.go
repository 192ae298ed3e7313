package tests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/pgurl"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/schema"
)

// errorCase is one command and the exact line a user sees.
type errorCase struct {
	name  string
	url   string
	stdin string
	args  []string
	code  int
	// stderr is the whole of stderr, one line; stdout, when set, the whole
	// of stdout.
	stderr, stdout string
}

func runErrorCases(t *testing.T, cases []errorCase) {
	t.Helper()
	for _, c := range cases {
		r := runHopper(t, c.url, c.stdin, c.args...)
		require.Equal(t, c.code, r.code, "%s: stdout %q stderr %q", c.name, r.stdout, r.stderr)
		line := strings.TrimSuffix(r.stderr, "\n")
		require.Equal(t, c.stderr, line, c.name)
		require.NotContains(t, line, "\n", "%s: one line", c.name)
		if c.stdout != "" {
			require.Equal(t, c.stdout, r.stdout, c.name)
		}
	}
}

func randomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// serverAddress is how the CLI names the test server's address.
func serverAddress(t *testing.T, dsn string) string {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dsn)
	require.NoError(t, err)
	if strings.HasPrefix(cfg.Host, "/") {
		return fmt.Sprintf("%s/.s.PGSQL.%d", cfg.Host, cfg.Port)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// withUser points dsn at role user, in whichever form dsn is written.
func withUser(t *testing.T, dsn, user string) string {
	t.Helper()
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		require.NoError(t, err)
		u.User = url.User(user)
		return u.String()
	}
	return strings.TrimSpace(dsn + " user=" + user)
}

// freePort returns a port on 127.0.0.1 where nothing listens.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

func TestCLIErrorTexts(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	runErrorCases(t, []errorCase{
		{name: "library error, one prefix", url: d.URL, args: []string{"enqueue", "--kind", "k", "--priority", "12"}, code: 2,
			stderr: "hopper enqueue k: invalid priority: 12 is outside 0 (first) to 9 (last) (run hopper enqueue --help)"},
		{name: "run-at in words", url: d.URL, args: []string{"enqueue", "--kind", "k", "--run-at", "tomorrow"}, code: 2,
			stderr: `hopper enqueue: --run-at wants a time like 2026-11-22T15:04:05Z (RFC 3339) or a duration like 10m, not "tomorrow" (run hopper enqueue --help)`},
		{name: "payload string", url: d.URL, args: []string{"enqueue", "--kind", "k", "--payload", `"a string"`}, code: 2,
			stderr: `hopper enqueue: --payload must be a JSON object like {"user_id": 7}, not a string (run hopper enqueue --help)`},
		{name: "payload null", url: d.URL, args: []string{"enqueue", "--kind", "k", "--payload", "null"}, code: 2,
			stderr: `hopper enqueue: --payload must be a JSON object like {"user_id": 7}, not null (run hopper enqueue --help)`},
		{name: "payload array", url: d.URL, args: []string{"enqueue", "--kind", "k", "--payload", "[1,2]"}, code: 2,
			stderr: `hopper enqueue: --payload must be a JSON object like {"user_id": 7}, not an array (run hopper enqueue --help)`},
		{name: "meta without a value", url: d.URL, args: []string{"enqueue", "--kind", "k", "--meta", "tenant"}, code: 2,
			stderr: `hopper enqueue: invalid value "tenant" for --meta: want KEY=VALUE, not "tenant" (run hopper enqueue --help)`},
		{name: "payload number", url: d.URL, args: []string{"enqueue", "--kind", "k", "--payload", " 7"}, code: 2,
			stderr: `hopper enqueue: --payload must be a JSON object like {"user_id": 7}, not a number (run hopper enqueue --help)`},
		{name: "payload invalid", url: d.URL, args: []string{"enqueue", "--kind", "k", "--payload", "{nope"}, code: 2,
			stderr: `hopper enqueue: --payload is not valid JSON; it must be a JSON object like {"user_id": 7} (run hopper enqueue --help)`},
		{name: "schema empty", url: d.URL, args: []string{"stats", "--schema", ""}, code: 2,
			stderr: "hopper stats: --schema needs a schema name (run hopper stats --help)"},
		{name: "schema too long", url: d.URL, args: []string{"--schema", strings.Repeat("s", 64), "stats"}, code: 2,
			stderr: `hopper: --schema "` + strings.Repeat("s", 64) + `" is 64 bytes long, over PostgreSQL's limit of 63 (run hopper help)`},
	})
	// The run-at duration form works.
	r := runHopper(t, d.URL, "", "enqueue", "--kind", "k", "--run-at", "10m")
	require.Zero(t, r.code, r.stderr)
}

func TestCLIErrorUnmigratedSchema(t *testing.T) {
	t.Parallel()
	empty := testdb.NewEmpty(t)
	needs := fmt.Sprintf("this build of Hopper needs schema version %d; run ", schema.Latest())
	want := "schema not migrated: schema " + empty.Schema + " has no Hopper tables (version 0): " + needs + "hopper migrate up (with the same --database-url / search_path)"
	missing := randomName("hopper_missing_")
	server := testdb.Server(t)
	runErrorCases(t, []errorCase{
		{name: "stats", url: empty.URL, args: []string{"stats"}, code: 1, stderr: "hopper stats: " + want},
		{name: "enqueue", url: empty.URL, args: []string{"enqueue", "--kind", "k"}, code: 1, stderr: "hopper enqueue: " + want},
		{name: "dead", url: empty.URL, args: []string{"dead", "list"}, code: 1, stderr: "hopper dead: " + want},
		{name: "jobs cancel", url: empty.URL, args: []string{"jobs", "cancel", "1"}, code: 1, stderr: "hopper jobs: " + want},
		{name: "queues purge", url: empty.URL, args: []string{"queues", "purge", "q", "--yes"}, code: 1, stderr: "hopper queues: " + want},
		{name: "--schema unmigrated", url: server, args: []string{"stats", "--schema", empty.Schema}, code: 1,
			stderr: "hopper stats: schema not migrated: schema " + empty.Schema + " has no Hopper tables (version 0): " + needs + "hopper --schema " + empty.Schema + " migrate up (with the same --database-url)"},
		{name: "search_path schema missing", url: pgurl.WithSearchPath(server, missing), args: []string{"stats"}, code: 1,
			stderr: "hopper stats: no schema of the search_path (" + missing + ") exists in this database (check the connection string's search_path, or pass --schema)"},
		{name: "--schema missing", url: server, args: []string{"enqueue", "--kind", "k", "--schema", missing}, code: 1,
			stderr: "hopper enqueue: schema " + missing + " does not exist in this database (check --schema, or create it and run hopper migrate up)"},
	})
}

func TestCLIErrorConnection(t *testing.T) {
	t.Parallel()
	server := testdb.Server(t)
	addr := serverAddress(t, server)
	noDB := randomName("hopper_no_such_db_")
	noRole := randomName("hopper_no_such_role_")
	port := freePort(t)
	silent := fmt.Sprintf("postgres://alice:s3cretpw@127.0.0.1:%d/nowhere?connect_timeout=5", port)
	nothing := fmt.Sprintf("nothing listens at 127.0.0.1:%d (is PostgreSQL running? Start one: apt install postgresql, or docker run -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:17; or pass --database-url / set DATABASE_URL)", port)
	runErrorCases(t, []errorCase{
		{name: "missing database", url: pgurl.WithDatabase(server, noDB), args: []string{"stats"}, code: 1,
			stderr: fmt.Sprintf(`hopper stats: the server at %s refused the connection: database "%s" does not exist (check the database name in the connection string, or create it: createdb %s)`, addr, noDB, noDB)},
		{name: "missing role", url: withUser(t, server, noRole), args: []string{"enqueue", "--kind", "k"}, code: 1,
			stderr: fmt.Sprintf(`hopper enqueue: the server at %s refused the connection: role "%s" does not exist (check the user name in the connection string, or the server's pg_hba.conf)`, addr, noRole)},
		{name: "nothing listens", url: silent, args: []string{"stats"}, code: 1, stderr: "hopper stats: " + nothing},
		{name: "nothing listens, --database-url", args: []string{"--database-url", silent, "dead", "list"}, code: 1, stderr: "hopper dead: " + nothing},
		{name: "nothing listens, queues purge", url: silent, args: []string{"queues", "purge", "q"}, code: 1, stderr: "hopper queues: " + nothing},
	})
}

// TestCLIErrorMistypedURL: a connection string that is neither a URL nor
// key=value pairs says what was expected and what it looks like, never
// its password.
func TestCLIErrorMistypedURL(t *testing.T) {
	t.Parallel()
	const bad = "hopper stats: bad connection string: it is neither a postgres:// URL nor key=value pairs: it looks like "
	const want = " (want postgres://user:password@host:5432/database, or host=H port=5432 user=U dbname=D)"
	runErrorCases(t, []errorCase{
		{name: "scheme", args: []string{"--database-url", "postgress://alice:s3cretpw@db/app", "stats"}, code: 1,
			stderr: bad + `a URL whose scheme is "postgress", not postgres or postgresql; did you mean postgres?` + want},
		{name: "no scheme", url: "alice:s3cretpw@db:5432/app", args: []string{"stats"}, code: 1,
			stderr: bad + "a URL without postgres:// at its front" + want},
		{name: "no colon", url: "postgres//alice:s3cretpw@db/app", args: []string{"stats"}, code: 1,
			stderr: bad + "a URL without postgres:// at its front" + want},
		{name: "a pair without =", url: "host=db password=s3cretpw app", args: []string{"stats"}, code: 1,
			stderr: bad + "key=value pairs with one that is not key=value (separate them with spaces; quote a value with spaces in single quotes)" + want},
	})
}

func TestCLISchemaFlag(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	other := testdb.NewEmpty(t)
	// The URL's search_path points at an unmigrated schema; --schema wins.
	r := runHopper(t, other.URL, "", "enqueue", "--kind", "flagged", "--queue", "viaflag", "--schema", d.Schema)
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `^enqueued job \d+\n$`, r.stdout)
	r = runHopper(t, other.URL, "", "--schema", d.Schema, "enqueue", "--kind", "global", "--queue", "viaflag")
	require.Zero(t, r.code, r.stderr)
	rows, err := db.New(d.Pool).Stats(context.Background())
	require.NoError(t, err)
	require.Len(t, rows, 2, "both jobs are in the --schema schema")

	for _, args := range [][]string{{"stats", "--schema", d.Schema}, {"--schema", d.Schema, "stats"}} {
		r = runHopper(t, other.URL, "", args...)
		require.Zero(t, r.code, r.stderr)
		require.Regexp(t, `viaflag\s+flagged\s+1\s+0\s+0\s+0`, r.stdout)
		require.Regexp(t, `viaflag\s+global\s+1\s+0\s+0\s+0`, r.stdout)
	}
	r = runHopper(t, other.URL, "", "help", "stats")
	require.Contains(t, r.stdout, "--schema")
}

func TestCLIQueuesPurgeSaysWhatItDeletes(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	runErrorCases(t, []errorCase{
		{name: "empty queue asks nothing", url: d.URL, args: []string{"queues", "purge", "ops"},
			stdout: "nothing to delete: queue \"ops\" has no pending or scheduled jobs\n"},
		{name: "unknown queue, --yes", url: d.URL, args: []string{"queues", "purge", "ops", "--yes"}, code: 1,
			stderr: `hopper queues: no queue "ops": no worker serves it and it has no jobs (hopper queues list shows the queues)`},
	})
	require.Zero(t, runHopper(t, d.URL, "", "enqueue", "--kind", "now", "--queue", "ops").code)
	require.Zero(t, runHopper(t, d.URL, "", "enqueue", "--kind", "later", "--queue", "ops", "--delay", "1h").code)
	require.Zero(t, runHopper(t, d.URL, "", "enqueue", "--kind", "later", "--queue", "ops", "--run-at", "2h").code)
	prompt := `Delete 3 jobs of queue "ops" (1 pending, 2 scheduled; running jobs finish)? [y/N] `
	runErrorCases(t, []errorCase{
		{name: "no answer", url: d.URL, args: []string{"queues", "purge", "ops"}, code: 1, stdout: prompt + "\n",
			stderr: "hopper queues: not confirmed: no answer on stdin; nothing deleted (pass --yes to skip the question)"},
		{name: "answered no", url: d.URL, stdin: "no\n", args: []string{"queues", "purge", "ops"}, code: 1, stdout: prompt,
			stderr: "hopper queues: not confirmed; nothing deleted (pass --yes to skip the question)"},
		{name: "yes", url: d.URL, stdin: "y\n", args: []string{"queues", "purge", "ops"},
			stdout: prompt + "deleted 3 jobs (pending, scheduled and waiting) of queue \"ops\"\n"},
		{name: "known and empty, --yes", url: d.URL, args: []string{"queues", "purge", "ops", "--yes"},
			stdout: "nothing to delete: queue \"ops\" has no pending or scheduled jobs\n"},
	})
}
