package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/tools/doccheck"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// The SQL API (migration 12, docs/sql-api.md) from psql, Python, Node and
// a trigger, each enqueuing jobs that a Go worker then runs.

type sqlAPIEmail struct {
	To string `json:"to"`
}

var sqlAPIEmailKind = jobs.MustDefine[sqlAPIEmail]("email")

// emailRun is a job the email worker ran.
type emailRun struct {
	To, Source string
}

// emailRuns is what an email worker ran, by job id.
type emailRuns struct {
	mu  sync.Mutex
	ran map[int64]emailRun
}

func (r *emailRuns) get(id int64) (emailRun, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	run, ok := r.ran[id]
	return run, ok
}

func (r *emailRuns) all() map[int64]emailRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.ran)
}

func (r *emailRuns) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ran)
}

// waitRan waits until every job of ids has run.
func (r *emailRuns) waitRan(t *testing.T, what string, ids ...int64) {
	t.Helper()
	testdb.WaitFor(t, what, func() bool {
		for _, id := range ids {
			if _, ok := r.get(id); !ok {
				return false
			}
		}
		return true
	})
}

// emailWorker runs a worker for the email kind on schema d, which polls
// once an hour: a job it runs promptly is one a wake-up told it of, or one
// its first claims found. It returns once the worker listens for
// wake-ups; the test's end stops it.
func emailWorker(t *testing.T, d *testdb.DB, queues ...string) *emailRuns {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(d.URL)
	require.NoError(t, err)
	tag := "sqlapi_" + d.Schema
	cfg.ConnConfig.RuntimeParams["application_name"] = tag
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	qs := map[string]int{jobs.DefaultQueue: 4}
	for _, q := range queues {
		qs[q] = 4
	}
	w, err := worker.New(pool, worker.Config{Logger: quietLog, Queues: qs, PollInterval: time.Hour})
	require.NoError(t, err)
	runs := &emailRuns{ran: map[int64]emailRun{}}
	require.NoError(t, worker.Handle(w, sqlAPIEmailKind, func(_ context.Context, j *jobs.Job[sqlAPIEmail]) error {
		runs.mu.Lock()
		defer runs.mu.Unlock()
		runs.ran[j.ID] = emailRun{To: j.Payload.To, Source: j.Meta["source"]}
		return nil
	}))
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-errc)
	})
	testdb.WaitFor(t, "the worker listening for wake-ups", func() bool {
		var n int
		require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE '%LISTEN hopper_jobs%'", tag).Scan(&n))
		return n == 1
	})
	return runs
}

// libpqURL is a connection string for libpq and node-postgres that leads
// to d's schema (options=-c search_path=…), as a user's would.
func libpqURL(t *testing.T, d *testdb.DB) string {
	t.Helper()
	c := d.Pool.Config().ConnConfig
	var database string
	require.NoError(t, d.Pool.QueryRow(context.Background(), "SELECT current_database()").Scan(&database))
	u := url.URL{Scheme: "postgres", Host: c.Host + ":" + strconv.Itoa(int(c.Port)), Path: "/" + database}
	if c.Password != "" {
		u.User = url.UserPassword(c.User, c.Password)
	} else {
		u.User = url.User(c.User)
	}
	// libpq reads %20 as a space, not +
	u.RawQuery = "options=" + strings.ReplaceAll(url.QueryEscape("-c search_path="+d.Schema), "+", "%20")
	if c.TLSConfig == nil {
		u.RawQuery += "&sslmode=disable"
	}
	return u.String()
}

// missingTool skips the test, or fails it under CI, where every tool the
// SQL API's tests need is installed (make test).
func missingTool(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI is set: make test installs it)", msg)
	}
	t.Skip(msg)
}

// scriptRow is a row a script printed: a job's id and whether it was
// inserted.
type scriptRow struct {
	ID       int64
	Inserted bool
}

// runScript runs cmd with DATABASE_URL leading to d and reads the rows it
// prints, one JSON object a line ({"id": 7, "inserted": true}; the id may
// be a string, as node-postgres gives a bigint).
func runScript(t *testing.T, d *testdb.DB, cmd *exec.Cmd) []scriptRow {
	t.Helper()
	cmd.Env = append(os.Environ(), "DATABASE_URL="+libpqURL(t, d), "PGOPTIONS=", "PGUSER=", "PGDATABASE=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s: %s", cmd, stderr.String())
	var rows []scriptRow
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var raw struct {
			ID       json.RawMessage `json:"id"`
			Inserted bool            `json:"inserted"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &raw), "line %q", sc.Text())
		id, err := strconv.ParseInt(strings.Trim(string(raw.ID), `"`), 10, 64)
		require.NoError(t, err, "line %q", sc.Text())
		rows = append(rows, scriptRow{ID: id, Inserted: raw.Inserted})
	}
	return rows
}

// requireScriptRan: the script enqueued what tests/sqlapi/*/ enqueue (a
// job, the same unique key again, a batch of two), and the worker ran the
// three jobs with their payloads and metadata.
func requireScriptRan(t *testing.T, runs *emailRuns, rows []scriptRow, source string) {
	t.Helper()
	require.Len(t, rows, 4, "a job, its duplicate, a batch of two")
	require.True(t, rows[0].Inserted)
	require.Equal(t, scriptRow{ID: rows[0].ID, Inserted: false}, rows[1], "the same unique key: the holder's id, nothing inserted")
	require.True(t, rows[2].Inserted)
	require.True(t, rows[3].Inserted)
	require.Less(t, rows[2].ID, rows[3].ID, "a batch's ids in its order")
	runs.waitRan(t, "the worker runs the jobs "+source+" enqueued", rows[0].ID, rows[2].ID, rows[3].ID)
	for i, to := range map[int]string{0: "ada@example.com", 2: "bob@example.com", 3: "eve@example.com"} {
		run, _ := runs.get(rows[i].ID)
		require.Equal(t, emailRun{To: to, Source: source}, run)
	}
	require.Equal(t, 3, runs.count())
}

// TestSQLAPIFromPsql: jobs enqueued by psql, one by one and as a batch,
// run on a Go worker; a bad one is refused with Go's words and a hint, and
// psql stops there.
func TestSQLAPIFromPsql(t *testing.T) {
	t.Parallel()
	psql, err := exec.LookPath("psql")
	if err != nil {
		missingTool(t, "psql is not installed (Debian: postgresql-client)")
	}
	d := testdb.New(t)
	script := `
SELECT json_build_object('id', id, 'inserted', inserted)
FROM hopper_enqueue(kind => 'email', payload => '{"to": "ada@example.com"}', priority => 3,
                    unique_key => 'welcome-ada', meta => '{"source": "psql"}');
SELECT json_build_object('id', id, 'inserted', inserted)
FROM hopper_enqueue(kind => 'email', payload => '{"to": "ada@example.com"}', priority => 3,
                    unique_key => 'welcome-ada', meta => '{"source": "psql"}');
SELECT json_build_object('id', id, 'inserted', inserted)
FROM hopper_enqueue_many('[{"kind": "email", "payload": {"to": "bob@example.com"}, "meta": {"source": "psql"}},
                           {"kind": "email", "payload": {"to": "eve@example.com"}, "meta": {"source": "psql"}, "max_attempts": 3}]');
`
	cmd := exec.Command(psql, "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-f", "-", libpqURL(t, d))
	cmd.Stdin = strings.NewReader(script)
	rows := runScript(t, d, cmd)
	runs := emailWorker(t, d)
	requireScriptRan(t, runs, rows, "psql")

	// A refusal: psql prints Go's words and the hint, and stops (exit 3).
	cmd = exec.Command(psql, "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-f", "-")
	cmd.Stdin = strings.NewReader(`SELECT * FROM hopper_enqueue(kind => 'email', payload => '{"to": "x@example.com"}', priority => 12);
SELECT * FROM hopper_enqueue(kind => 'email', payload => '{"to": "never@example.com"}');
`)
	cmd.Args = append(cmd.Args, libpqURL(t, d))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	require.Equal(t, 3, exit.ExitCode(), "%s", out)
	require.Contains(t, string(out), "ERROR:  enqueue email: hopper: invalid priority: 12 is outside 0 (first) to 9 (last)")
	require.Contains(t, string(out), "HINT:  priority runs from 0 (runs first, the default) to 9 (runs last)")
	var live int
	require.NoError(t, d.Pool.QueryRow(context.Background(), "SELECT count(*) FROM hopper_jobs").Scan(&live))
	require.Zero(t, live, "nothing enqueued after the refusal")
	require.Equal(t, 3, runs.count())
}

// python3WithPsycopg is a python3 that imports psycopg 3: Debian's
// (python3-psycopg), else the PATH's.
func python3WithPsycopg(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(py); err == nil && exec.Command(path, "-c", "import psycopg").Run() == nil {
			return path
		}
	}
	missingTool(t, "no python3 with psycopg 3: install Debian's python3-psycopg (bash .ci/debian-package.sh python3-psycopg /usr/lib/python3/dist-packages/psycopg)")
	return ""
}

// TestSQLAPIFromPython: tests/sqlapi/python/enqueue.py, the Python example
// of docs/sql-api.md, enqueues with psycopg 3; a Go worker runs the jobs.
func TestSQLAPIFromPython(t *testing.T) {
	testdb.Slow(t, "Python with psycopg")
	t.Parallel()
	py := python3WithPsycopg(t)
	d := testdb.New(t)
	rows := runScript(t, d, exec.Command(py, filepath.Join("sqlapi", "python", "enqueue.py")))
	requireScriptRan(t, emailWorker(t, d), rows, "python")
}

// TestSQLAPIFromNode: tests/sqlapi/node/enqueue.js, the Node example of
// docs/sql-api.md, enqueues with the pg package, installed with npm ci
// from the committed lockfile into a scratch folder; a Go worker runs the
// jobs.
func TestSQLAPIFromNode(t *testing.T) {
	testdb.Slow(t, "npm ci and Node")
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		missingTool(t, "node is not installed")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		missingTool(t, "npm is not installed")
	}
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "enqueue.js"} {
		b, err := os.ReadFile(filepath.Join("sqlapi", "node", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	install := exec.Command(npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		missingTool(t, "npm ci of tests/sqlapi/node (the pg package from the npm registry) failed: %v: %s", err, out)
	}
	d := testdb.New(t)
	cmd := exec.Command(node, "enqueue.js")
	cmd.Dir = dir
	rows := runScript(t, d, cmd)
	requireScriptRan(t, emailWorker(t, d), rows, "node")
}

// TestSQLAPIExamplesAreTheScripts: the Python and Node examples of
// docs/sql-api.md are the scripts the tests above run, word for word.
func TestSQLAPIExamplesAreTheScripts(t *testing.T) {
	t.Parallel()
	md, err := os.ReadFile(filepath.Join("..", "docs", "sql-api.md"))
	require.NoError(t, err)
	blocks := map[string][]string{}
	for _, b := range doccheck.ParseMarkdown("docs/sql-api.md", string(md)).Blocks {
		blocks[b.Lang] = append(blocks[b.Lang], b.Text)
	}
	for lang, file := range map[string]string{"python": "sqlapi/python/enqueue.py", "js": "sqlapi/node/enqueue.js"} {
		script, err := os.ReadFile(file)
		require.NoError(t, err)
		require.Contains(t, blocks[lang], string(script), "docs/sql-api.md shows tests/%s as it is", file)
	}
}

// notification is a wake-up as workers read it, without what differs
// from one enqueue to the next (id, run_at).
type notification struct {
	Schema   string `json:"schema"`
	Queue    string `json:"queue"`
	Priority int    `json:"priority"`
}

// listen returns a function that reads the wake-ups sent so far on a
// connection of its own, until one for queue stop arrives (which it
// leaves out).
func listen(t *testing.T, ctx context.Context, d *testdb.DB) func(stop string) []notification {
	t.Helper()
	conn, err := pgx.Connect(ctx, d.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, "LISTEN hopper_jobs")
	require.NoError(t, err)
	return func(stop string) []notification {
		_, err := d.Pool.Exec(ctx, "SELECT pg_notify('hopper_jobs', json_build_object('schema', $1::text, 'queue', $2::text)::text)", d.Schema, stop)
		require.NoError(t, err)
		var got []notification
		for {
			waitCtx, cancel := context.WithTimeout(ctx, testdb.WaitLimit)
			n, err := conn.WaitForNotification(waitCtx)
			cancel()
			require.NoError(t, err)
			var note notification
			require.NoError(t, json.Unmarshal([]byte(n.Payload), &note), n.Payload)
			if note.Schema != d.Schema {
				continue // another test's
			}
			if note.Queue == stop {
				return got
			}
			require.Contains(t, n.Payload, `"id"`, "a wake-up names where its jobs sit in claim order")
			got = append(got, note)
		}
	}
}

// TestSQLAPIWakesWorkersAsGoDoes: the SQL functions' inserts send the
// wake-ups Go's do (one per statement and queue with ready jobs, none for
// a delayed job or a duplicate), and an idle worker that polls once an
// hour runs a job enqueued through SQL promptly.
func TestSQLAPIWakesWorkersAsGoDoes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := testdb.New(t)
	heard := listen(t, ctx, d)
	same := func(what string, goEnqueue func() error, sql string) {
		t.Helper()
		require.NoError(t, goEnqueue(), what)
		fromGo := heard("end")
		_, err := d.Pool.Exec(ctx, sql)
		require.NoError(t, err, what)
		fromSQL := heard("end")
		order := func(a, b notification) int { return strings.Compare(a.Queue, b.Queue) }
		slices.SortFunc(fromGo, order)
		slices.SortFunc(fromSQL, order)
		require.Equal(t, fromGo, fromSQL, what)
	}
	mail := func(to string) sqlAPIEmail { return sqlAPIEmail{To: to} }
	same("one job", func() error {
		_, err := sqlAPIEmailKind.Enqueue(ctx, d.Pool, mail("a"), jobs.Priority(2), jobs.Queue("mail"))
		return err
	}, `SELECT hopper_enqueue(kind => 'email', payload => '{"to": "a"}', priority => 2, queue => 'mail')`)
	same("a batch in two queues", func() error {
		_, err := jobs.EnqueueBatch(ctx, d.Pool, []jobs.Entry{
			sqlAPIEmailKind.Entry(mail("b"), jobs.Queue("q1"), jobs.Priority(5)),
			sqlAPIEmailKind.Entry(mail("c"), jobs.Queue("q2")),
			sqlAPIEmailKind.Entry(mail("d"), jobs.Queue("q1"), jobs.Priority(4)),
		})
		return err
	}, `SELECT hopper_enqueue_many('[{"kind": "email", "payload": {"to": "b"}, "queue": "q1", "priority": 5},
	                               {"kind": "email", "payload": {"to": "c"}, "queue": "q2"},
	                               {"kind": "email", "payload": {"to": "d"}, "queue": "q1", "priority": 4}]')`)
	same("a delayed job: none", func() error {
		_, err := sqlAPIEmailKind.Enqueue(ctx, d.Pool, mail("e"), jobs.Delay(time.Hour))
		return err
	}, `SELECT hopper_enqueue(kind => 'email', payload => '{"to": "e"}', delay => '1 hour')`)
	same("a unique key", func() error {
		_, err := sqlAPIEmailKind.Enqueue(ctx, d.Pool, mail("f"), jobs.UniqueKey("go-f"))
		return err
	}, `SELECT hopper_enqueue(kind => 'email', payload => '{"to": "f"}', unique_key => 'sql-f')`)
	same("a duplicate: none", func() error {
		_, err := sqlAPIEmailKind.Enqueue(ctx, d.Pool, mail("f"), jobs.UniqueKey("go-f"))
		return err
	}, `SELECT hopper_enqueue(kind => 'email', payload => '{"to": "f"}', unique_key => 'sql-f')`)
	require.Len(t, heard("end"), 0)

	// A worker, once idle, is woken by a job enqueued through SQL.
	_, err := d.Pool.Exec(ctx, "DELETE FROM hopper_jobs")
	require.NoError(t, err)
	runs := emailWorker(t, d)
	res, err := sqlAPIEmailKind.Enqueue(ctx, d.Pool, mail("from go"))
	require.NoError(t, err)
	runs.waitRan(t, "a job from Go", res.ID)
	for i := range 3 {
		var id int64
		require.NoError(t, d.Pool.QueryRow(ctx, "SELECT id FROM hopper_enqueue(kind => 'email', payload => jsonb_build_object('to', $1::text))", fmt.Sprint("sql ", i)).Scan(&id))
		runs.waitRan(t, "a job from SQL, woken", id)
	}
	var ids []int64
	rows, err := d.Pool.Query(ctx, `SELECT id FROM hopper_enqueue_many('[{"kind": "email", "payload": {"to": "x"}}, {"kind": "email", "payload": {"to": "y"}}]')`)
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	runs.waitRan(t, "a batch from SQL, woken", ids...)
}

// TestSQLAPIFindsItsOwnSchema: each schema's functions write to that
// schema's hopper_jobs whatever the caller's search_path (another Hopper
// schema first, or a temporary table named hopper_jobs), and the wake-up
// names the schema, so that schema's worker runs the job.
func TestSQLAPIFindsItsOwnSchema(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b := testdb.New(t), testdb.New(t)
	runsB := emailWorker(t, b)
	bID := pgx.Identifier{b.Schema}.Sanitize()

	conn, err := a.Pool.Acquire(ctx) // search_path: a
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "CREATE TEMP TABLE hopper_jobs (LIKE "+pgx.Identifier{a.Schema, "hopper_jobs"}.Sanitize()+")")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SET search_path = pg_temp, "+pgx.Identifier{a.Schema}.Sanitize())
	require.NoError(t, err)
	var one int64
	require.NoError(t, conn.QueryRow(ctx, "SELECT id FROM "+bID+`.hopper_enqueue(kind => 'email', payload => '{"to": "b-one"}')`).Scan(&one))
	rows, err := conn.Query(ctx, "SELECT id FROM "+bID+`.hopper_enqueue_many('[{"kind": "email", "payload": {"to": "b-two"}}]')`)
	require.NoError(t, err)
	many, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	runsB.waitRan(t, "schema b's worker runs b's jobs", one, many[0])
	run, _ := runsB.get(one)
	require.Equal(t, "b-one", run.To)

	var inA, inTemp int
	require.NoError(t, a.Pool.QueryRow(ctx, "SELECT count(*) FROM hopper_jobs").Scan(&inA))
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_temp.hopper_jobs").Scan(&inTemp))
	require.Zero(t, inA, "nothing in schema a")
	require.Zero(t, inTemp, "nothing in the temporary table")

	// a's own functions, called by their plain name, write to a.
	_, err = a.Pool.Exec(ctx, `SELECT hopper_enqueue(kind => 'email', payload => '{"to": "a"}')`)
	require.NoError(t, err)
	require.NoError(t, a.Pool.QueryRow(ctx, "SELECT count(*) FROM hopper_jobs").Scan(&inA))
	require.Equal(t, 1, inA)
	require.Equal(t, 2, runsB.count())
}

// outboxSetup is the first SQL block of docs/outbox.md: the application's
// table, the trigger function and the triggers.
func outboxSetup(t *testing.T) string {
	t.Helper()
	md, err := os.ReadFile(filepath.Join("..", "docs", "outbox.md"))
	require.NoError(t, err)
	for _, b := range doccheck.ParseMarkdown("docs/outbox.md", string(md)).Blocks {
		if b.Lang == "sql" {
			return b.Text
		}
	}
	t.Fatal("docs/outbox.md has no sql block")
	return ""
}

// TestSQLAPIOutboxTrigger: the trigger of docs/outbox.md enqueues a job in
// the transaction that inserts an order: committed, the job runs on a Go
// worker; rolled back, there is no job; each of many orders inserted by
// one statement gets its job. Under the least-privilege grants.
func TestSQLAPIOutboxTrigger(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := testdb.New(t)
	_, err := d.Pool.Exec(ctx, outboxSetup(t))
	require.NoError(t, err)
	app := leastPrivilegePool(t, d)
	appRole := pgx.Identifier{d.Schema + "_app"}.Sanitize()
	for _, grant := range []string{"GRANT SELECT, INSERT ON orders TO " + appRole, "GRANT USAGE ON SEQUENCE orders_id_seq TO " + appRole} {
		_, err := d.Pool.Exec(ctx, grant)
		require.NoError(t, err, grant)
	}
	runs := emailWorker(t, d)

	var committed int64
	tx, err := app.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(ctx, "INSERT INTO orders (customer_email, total_cents) VALUES ('ada@example.com', 4200) RETURNING id").Scan(&committed))
	var pending int
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM hopper_jobs").Scan(&pending))
	require.Zero(t, pending, "the job is not visible before the order commits")
	require.NoError(t, tx.Commit(ctx))

	tx, err = app.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "INSERT INTO orders (customer_email, total_cents) VALUES ('rolled@example.com', 1)")
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))

	_, err = app.Exec(ctx, "INSERT INTO orders (customer_email, total_cents) VALUES ('bob@example.com', 1), ('eve@example.com', 2), ('zed@example.com', 3)")
	require.NoError(t, err)

	testdb.WaitFor(t, "the orders' jobs run", func() bool { return runs.count() >= 4 })
	var got []emailRun
	for _, run := range runs.all() {
		got = append(got, run)
	}
	slices.SortFunc(got, func(a, b emailRun) int { return strings.Compare(a.To, b.To) })
	require.Equal(t, []emailRun{{"ada@example.com", "orders"}, {"bob@example.com", "orders"}, {"eve@example.com", "orders"}, {"zed@example.com", "orders"}}, got,
		"the committed orders' jobs, not the rolled-back one's")
	var committedTo string
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT customer_email FROM orders WHERE id = $1", committed).Scan(&committedTo))
	require.Equal(t, "ada@example.com", committedTo)
}

// TestSQLAPILeastPrivilege: the functions run with the caller's grants
// (SECURITY INVOKER): a role with only the grants docs/operating.md lists
// (PUBLIC's EXECUTE revoked, so the EXECUTE grant is the one that counts)
// enqueues through both, and a role with only what docs/sql-api.md lists
// for a producer does too; a role without INSERT on hopper_jobs is
// refused.
func TestSQLAPILeastPrivilege(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := testdb.New(t)
	app := leastPrivilegePool(t, d)
	runs := emailWorker(t, d)
	var one int64
	// The key's holder waits an hour: no worker frees the key meanwhile.
	require.NoError(t, app.QueryRow(ctx, `SELECT id FROM hopper_enqueue(kind => 'email', payload => '{"to": "one"}', unique_key => 'one', delay => '1 hour')`).Scan(&one))
	rows, err := app.Query(ctx, `SELECT id FROM hopper_enqueue_many('[{"kind": "email", "payload": {"to": "two"}, "unique_key": "one"}, {"kind": "email", "payload": {"to": "three"}}]')`)
	require.NoError(t, err)
	many, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, one, many[0], "the holder of the key, read under the grants")
	runs.waitRan(t, "the job runs", many[1])

	schemaID := pgx.Identifier{d.Schema}.Sanitize()
	producer := documentedRolePool(t, d, "sql-api.md", "producer")
	var id int64
	require.NoError(t, producer.QueryRow(ctx, `SELECT id FROM hopper_enqueue(kind => 'email', payload => '{"to": "four"}', unique_key => 'one')`).Scan(&id))
	require.Equal(t, one, id)
	rows, err = producer.Query(ctx, `SELECT id FROM hopper_enqueue_many('[{"kind": "email", "payload": {"to": "five"}}]')`)
	require.NoError(t, err)
	many, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	runs.waitRan(t, "the producer's job runs", many...)

	reader := rolePool(t, d, "reader", "GRANT USAGE ON SCHEMA "+schemaID, "GRANT SELECT ON hopper_jobs",
		"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA "+schemaID)
	_, err = reader.Exec(ctx, `SELECT hopper_enqueue(kind => 'email', payload => '{}')`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "42501", pgErr.Code, "the caller's grants apply: %v", err)
}

// rolePool makes a role of d's schema with only grants (each a GRANT
// without its TO clause), PUBLIC's EXECUTE on the schema's functions
// revoked, and returns a pool that logs in as it.
func rolePool(t *testing.T, d *testdb.DB, name string, grants ...string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	role := d.Schema + "_" + name
	roleID := pgx.Identifier{role}.Sanitize()
	stmts := []string{
		"REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA " + pgx.Identifier{d.Schema}.Sanitize() + " FROM PUBLIC",
		"CREATE ROLE " + roleID + " LOGIN",
	}
	for _, g := range grants {
		stmts = append(stmts, g+" TO "+roleID)
	}
	for _, stmt := range stmts {
		_, err := d.Pool.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	t.Cleanup(func() {
		for _, stmt := range []string{"DROP OWNED BY " + roleID, "DROP ROLE " + roleID} {
			_, _ = d.Pool.Exec(context.Background(), stmt)
		}
	})
	cfg, err := pgxpool.ParseConfig(d.URL)
	require.NoError(t, err)
	cfg.ConnConfig.User = role
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT current_database()").Scan(&cfg.ConnConfig.Database))
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}
