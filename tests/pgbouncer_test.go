package tests

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/pgcluster"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/worker"
)

// startPgBouncer runs Debian's pgbouncer in transaction pooling mode on a
// free port, in front of the test server, with two server connections per
// database and user so that clients share them. It returns the server's
// connection config pointed at PgBouncer. PgBouncer refuses to run as
// root: as root it runs as the postgres user.
func startPgBouncer(t *testing.T) *pgx.ConnConfig {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		bin = "/usr/sbin/pgbouncer"
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("pgbouncer is not installed (make test installs it: .ci/debian-package.sh): %v", err)
		}
		t.Skip("pgbouncer is not installed: run .ci/debian-package.sh pgbouncer /usr/sbin/pgbouncer")
	}
	server, err := pgx.ParseConfig(testdb.Server(t))
	require.NoError(t, err)

	// Not t.TempDir: its parent is private to this user, and PgBouncer
	// may run as another.
	dir, err := os.MkdirTemp("", "hopper-pgbouncer-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	port := freePort(t)
	users := fmt.Sprintf("%q \"\"\n", server.User)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "users.txt"), []byte(users), 0o644))
	conf := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = 2
max_client_conn = 100
server_reset_query =
logfile = %s
pidfile = %s
`, server.Port, port, filepath.Join(dir, "users.txt"), filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(conf), 0o644))

	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cred, err := pgcluster.NonRoot()
	require.NoError(t, err)
	if cred != nil {
		require.NoError(t, os.Chown(dir, int(cred.Uid), int(cred.Gid)))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	testdb.WaitFor(t, "pgbouncer to listen", func() bool {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Fatalf("pgbouncer exited: %s%s", out.String(), log)
		default:
		}
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	cfg := server.Copy()
	cfg.Host, cfg.Port = "127.0.0.1", uint16(port)
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.RuntimeParams = map[string]string{}
	return cfg
}

type bouncerEmail struct {
	To string `json:"to"`
}

var bouncedEmail = jobs.MustDefine[bouncerEmail]("bounced_email")

// TestPgBouncerTransactionMode enqueues, works (poll-only), cancels and
// reads stats through PgBouncer in transaction mode, with more client
// connections than server ones, the schema named in Go (PgBouncer refuses
// search_path in the connection string) and pgx's exec mode (its
// statement cache would collide on shared server connections).
func TestPgBouncerTransactionMode(t *testing.T) {
	testdb.Slow(t, "a PgBouncer of its own")
	t.Parallel()
	bouncer := startPgBouncer(t)
	d := testdb.New(t) // migrated directly, as docs/operating.md says
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Why the schema is named in Go: PgBouncer refuses search_path as a
	// startup parameter.
	withPath := bouncer.Copy()
	withPath.RuntimeParams["search_path"] = d.Schema
	_, err := pgx.ConnectConfig(ctx, withPath)
	require.ErrorContains(t, err, "unsupported startup parameter: search_path")

	poolCfg, err := pgxpool.ParseConfig("")
	require.NoError(t, err)
	poolCfg.ConnConfig = bouncer
	poolCfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	require.NoError(t, err)
	defer pool.Close()
	scoped, err := jobs.InSchema(pool, d.Schema)
	require.NoError(t, err)
	client := hopper.NewClient(scoped)

	const n = 300
	items := make([]jobs.Item[bouncerEmail], n-1)
	for i := range items {
		items[i] = jobs.Item[bouncerEmail]{Payload: bouncerEmail{To: fmt.Sprint(i)}}
	}
	batch, err := bouncedEmail.EnqueueMany(ctx, scoped, items)
	require.NoError(t, err)
	require.Equal(t, n-1, batch.Inserted)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ { // concurrent single enqueues share the two server connections
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := bouncedEmail.Enqueue(ctx, scoped, bouncerEmail{To: "single"}, jobs.UniqueKey("single"))
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	later, err := bouncedEmail.Enqueue(ctx, scoped, bouncerEmail{To: "later"}, jobs.Delay(time.Hour))
	require.NoError(t, err)

	// Cancel through PgBouncer, in a transaction of the caller's.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	cancelled, err := client.CancelJobsTx(ctx, tx, later.ID)
	require.NoError(t, err)
	require.Len(t, cancelled, 1)
	require.NoError(t, tx.Commit(ctx))

	var done atomic.Int64
	logs := &testdb.Buffer{}
	w, err := worker.New(pool, worker.Config{
		Queues: map[string]int{jobs.DefaultQueue: 16}, Schema: d.Schema, PollOnly: true,
		PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, bouncedEmail, func(context.Context, *jobs.Job[bouncerEmail]) error {
		done.Add(1)
		return nil
	}))
	wctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(wctx) }()
	testdb.WaitFor(t, "every job to be worked through PgBouncer", func() bool {
		s, err := client.GetStats(ctx)
		require.NoError(t, err)
		return done.Load() == n && s.Total.Ready == 0 && s.Total.Running == 0
	})
	stop()
	require.NoError(t, <-errc)
	require.NotContains(t, logs.String(), "through a pooler", "exec mode and PollOnly: nothing to warn about")

	s, err := client.GetStats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, s.Total.Cancelled)
	require.EqualValues(t, 0, s.Total.Live())

	// Nothing leaked into the shared server connections: unscoped, they
	// still have the server's default search_path.
	var path string
	require.NoError(t, pool.QueryRow(ctx, "SELECT current_setting('search_path')").Scan(&path))
	require.Equal(t, `"$user", public`, path)

	// A worker set up for a direct connection says what to change.
	logs = &testdb.Buffer{}
	w, err = worker.New(pool, worker.Config{Schema: d.Schema, PollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, bouncedEmail, func(context.Context, *jobs.Job[bouncerEmail]) error { return nil }))
	wctx, stop = context.WithCancel(ctx)
	go func() { errc <- w.Run(wctx) }()
	testdb.WaitFor(t, "the worker to warn about the pooler", func() bool {
		return strings.Contains(logs.String(), "through a pooler")
	})
	stop()
	require.NoError(t, <-errc)
	require.Contains(t, logs.String(), "poll_only=false")
}

// TestPgBouncerWaitJob: WaitJob through PgBouncer in transaction mode,
// where a LISTEN holds for its own statement only, reads the job instead
// of waiting for a notification that never comes, so it returns soon
// after the job ends (not at its 30 s safety net). Without pgx's exec
// mode, the statement cache's names collide on the shared server
// sessions, and the error says which setting to change.
func TestPgBouncerWaitJob(t *testing.T) {
	testdb.Slow(t, "a PgBouncer of its own")
	t.Parallel()
	bouncer := startPgBouncer(t)
	d := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clientOn := func(mode pgx.QueryExecMode) *hopper.Client {
		poolCfg, err := pgxpool.ParseConfig("")
		require.NoError(t, err)
		poolCfg.ConnConfig = bouncer.Copy()
		poolCfg.ConnConfig.DefaultQueryExecMode = mode
		poolCfg.MaxConns = 4
		pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		scoped, err := jobs.InSchema(pool, d.Schema)
		require.NoError(t, err)
		return hopper.NewClient(scoped)
	}
	direct := hopper.NewClient(d.Pool)

	client := clientOn(pgx.QueryExecModeExec)
	res, err := bouncedEmail.Enqueue(ctx, d.Pool, bouncerEmail{To: "awaited"})
	require.NoError(t, err)
	type waited struct {
		row jobs.Row
		err error
	}
	got := make(chan waited, 1)
	// Under the safety net's 30 s: without the fix the wait hears nothing
	// and fails here.
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	go func() {
		row, err := client.WaitJob(wctx, res.ID)
		got <- waited{row, err}
	}()
	testdb.WaitFor(t, "the job marked awaited", func() bool {
		row, err := direct.GetJob(ctx, res.ID)
		require.NoError(t, err)
		_, ok := row.Meta["hopper.awaited"]
		return ok
	})
	_, err = direct.CancelJobs(ctx, res.ID)
	require.NoError(t, err)
	w := <-got
	require.NoError(t, w.err, "WaitJob through PgBouncer")
	require.Equal(t, jobs.StateCancelled, w.row.State)

	// Both server sessions get the statement WaitJob runs first, prepared
	// under the statement cache's name by two clients holding one each.
	var pids []int32
	var txs []pgx.Tx
	for range 2 {
		cfg := bouncer.Copy()
		cfg.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
		conn, err := pgx.ConnectConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		tx, err := conn.Begin(ctx) // holds a server session until the commit
		require.NoError(t, err)
		pid, err := db.New(tx).BackendPID(ctx)
		require.NoError(t, err)
		pids, txs = append(pids, pid), append(txs, tx)
	}
	require.NotEqual(t, pids[0], pids[1], "two server sessions")
	for _, tx := range txs {
		require.NoError(t, tx.Commit(ctx))
	}
	res, err = bouncedEmail.Enqueue(ctx, d.Pool, bouncerEmail{To: "awaited with the statement cache"})
	require.NoError(t, err)
	_, err = clientOn(pgx.QueryExecModeCacheStatement).WaitJob(ctx, res.ID)
	require.ErrorContains(t, err, "already exists")
	require.ErrorContains(t, err, "set default_query_exec_mode=exec in the connection string")
	t.Logf("with the statement cache: %v", err)
}

// TestPgBouncerMigrate: hopper migrate through PgBouncer fails before
// touching anything, and says to connect to PostgreSQL directly: PgBouncer
// refuses the startup parameters the migrator's sessions carry
// (lock_timeout) and --schema's (search_path). A program calling
// schema.NewMigrator gets schema.ErrThroughPooler.
func TestPgBouncerMigrate(t *testing.T) {
	testdb.Slow(t, "a PgBouncer of its own")
	t.Parallel()
	bouncer := startPgBouncer(t)
	d := testdb.NewEmpty(t)
	url := fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable&default_query_exec_mode=exec",
		bouncer.User, net.JoinHostPort(bouncer.Host, strconv.Itoa(int(bouncer.Port))), bouncer.Database)
	r := runHopper(t, url, "", "migrate", "version")
	requireFailure(t, r, 1, "hopper migrate: connect `hopper migrate` to PostgreSQL directly, not through PgBouncer (it refuses the lock_timeout startup parameter)")
	// With --schema the sessions carry search_path too: PgBouncer names
	// whichever it meets first.
	r = runHopper(t, url, "", "migrate", "up", "--schema", d.Schema)
	requireFailure(t, r, 1, "hopper migrate: connect `hopper migrate` to PostgreSQL directly, not through PgBouncer (it refuses the ")
	require.Regexp(t, `refuses the (lock_timeout|search_path) startup parameter\)`, r.stderr)
	// Other commands' --schema sets search_path on the connection.
	r = runHopper(t, url, "", "jobs", "list", "--schema", d.Schema)
	requireFailure(t, r, 1, "refused the search_path startup parameter, as PgBouncer does: connect to PostgreSQL directly, not through PgBouncer")
	t.Logf("hopper jobs list --schema: %s", r.stderr)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	poolCfg, err := pgxpool.ParseConfig("")
	require.NoError(t, err)
	poolCfg.ConnConfig = bouncer
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	require.NoError(t, err)
	defer pool.Close()
	_, err = schema.NewMigrator(ctx, pool)
	require.ErrorIs(t, err, schema.ErrThroughPooler)
	require.ErrorContains(t, err, "the server refused the lock_timeout startup parameter of the migrator's sessions, as PgBouncer does: migrate against PostgreSQL directly")
	require.Equal(t, versionLine(0), migrateVersion(t, d.URL), "nothing migrated")
}
