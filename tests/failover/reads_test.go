package failover

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/dashboard"
	"github.com/hopperq/hopper/internal/testbed/hacluster"
	"github.com/hopperq/hopper/jobs"
	clibed "github.com/hopperq/hopper/tests/internal/bed"
	"github.com/hopperq/hopper/worker"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// standbyFormation starts a formation (formation) and returns it, a pool
// on its primary, a pool on its standby and the standby's URL.
func standbyFormation(t *testing.T, ctx context.Context) (*hacluster.Formation, *pgxpool.Pool, *pgxpool.Pool, string) {
	t.Helper()
	f, pool := formation(t, ctx)
	primary, err := f.Stable(ctx)
	require.NoError(t, err)
	var standby string
	for _, n := range f.Nodes() {
		if n != primary {
			standby = n.URL()
		}
	}
	reads, err := pgxpool.New(ctx, standby)
	require.NoError(t, err)
	t.Cleanup(reads.Close)
	return f, pool, reads, standby
}

// TestReadsFromTheStandby: what only reads can read the standby — a
// Client, hopper stats, jobs list and show, the dashboard's pages, the
// worker's database gauges — and says how stale it is; every change still
// goes to the primary, and the standby refuses one sent to it (25006,
// jobs.ErrReadOnly), and a worker started on it, naming the fix.
func TestReadsFromTheStandby(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f, pool, reads, standby := standbyFormation(t, ctx)

	k := jobs.MustDefine[Task]("failover.reads")
	job, err := k.Enqueue(ctx, pool, Task{Order: 7})
	require.NoError(t, err)
	// Synchronous replication: the enqueue is on the standby once it has
	// replayed it, which it does at once; wait for that, not for a time.
	rc := hopper.NewClient(reads)
	require.Eventually(t, func() bool { _, err := rc.GetJob(ctx, job.ID); return err == nil }, time.Minute, 20*time.Millisecond)

	lag, err := rc.GetReadLag(ctx)
	require.NoError(t, err)
	require.True(t, lag.Standby)
	require.Contains(t, lag.String(), "read from a standby")
	plag, err := hopper.NewClient(pool).GetReadLag(ctx)
	require.NoError(t, err)
	require.Equal(t, hopper.ReadLag{}, plag, "the primary reads its own writes")
	page, err := rc.ListJobs(ctx, hopper.ListParams{})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	var pgErr *pgconn.PgError
	err = rc.CancelJob(ctx, job.ID)
	require.True(t, errors.As(err, &pgErr), "a change on the standby is refused")
	require.Equal(t, "25006", pgErr.Code)
	require.ErrorIs(t, err, jobs.ErrReadOnly)
	// A worker started on the standby stops at once, saying how to reach
	// the primary.
	sw, err := worker.New(reads, worker.Config{Queues: map[string]int{jobs.DefaultQueue: 1}, Logger: quiet()})
	require.NoError(t, err)
	require.NoError(t, worker.Handle(sw, k, func(context.Context, *jobs.Job[Task]) error { return nil }))
	err = sw.Run(ctx)
	require.ErrorIs(t, err, worker.ErrReadOnly)
	require.ErrorContains(t, err, "target_session_attrs=read-write")

	// The command line.
	bin, remove, err := clibed.BuildHopper(".")
	require.NoError(t, err)
	defer remove()
	run := func(args ...string) (string, string, int) {
		cmd := exec.CommandContext(ctx, bin, args...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return out.String(), errOut.String(), code
	}
	out, _, code := run("stats", "--database-url", f.URL(), "--read-url", standby)
	require.Zero(t, code, out)
	require.Contains(t, out, "read from a standby")
	require.Contains(t, out, "failover.reads")
	out, _, code = run("stats", "--json", "--database-url", f.URL(), "--read-url", standby)
	require.Zero(t, code, out)
	var report struct {
		Standby        bool     `json:"standby"`
		ReadLagSeconds *float64 `json:"read_lag_seconds"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &report))
	require.True(t, report.Standby)
	require.NotNil(t, report.ReadLagSeconds)
	out, errOut, code := run("jobs", "list", "--database-url", f.URL(), "--read-url", standby)
	require.Zero(t, code, errOut)
	require.Contains(t, out, fmt.Sprint(job.ID))
	require.Contains(t, errOut, "read from a standby")
	_, errOut, code = run("jobs", "cancel", fmt.Sprint(job.ID), "--database-url", f.URL(), "--read-url", standby)
	require.Equal(t, 2, code, "a change with --read-url is a usage error: %s", errOut)
	require.Contains(t, errOut, "changes go to the primary")

	// The dashboard: pages read the standby and say so.
	d, err := dashboard.New(dashboard.Config{DB: pool, ReadDB: reads, ReadOnly: true})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/jobs", nil)
	req.Host = "127.0.0.1" // the dashboard answers IP addresses, not example.com
	d.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), `id="read-lag"`)
	require.Contains(t, rec.Body.String(), "read from a standby")

	// The worker's database gauges, read from the standby.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	// The queue paused, so that the job stays ready for the gauge to count.
	_, err = hopper.NewClient(pool).PauseQueue(ctx, jobs.DefaultQueue)
	require.NoError(t, err)
	w, err := worker.New(pool, worker.Config{Queues: map[string]int{jobs.DefaultQueue: 1}, MetricsAddr: addr,
		MetricsReadPool: reads, Logger: quiet()})
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, k, func(context.Context, *jobs.Job[Task]) error { return nil }))
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stop(); <-done }()
	var last string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		last = scrape("http://" + addr + "/metrics")
		if strings.Contains(last, "hopper_read_lag_seconds") &&
			strings.Contains(last, `hopper_queue_jobs{kind="failover.reads",queue="default",state="ready"} 1`) {
			break
		}
		select {
		case err := <-done:
			done <- err // for the deferred stop
			t.Fatalf("the worker stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gauges, read from the standby, not within a minute; last scrape:\n%s", last)
		}
	}
}

// scrape is the body at url, or the error getting it.
func scrape(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	return string(body)
}

// TestReadLagWhenTheReceiverStops: a standby whose WAL receiver stopped
// (its primary died, or cannot be reached) has replayed everything it
// received, and said "caught up" while it fell behind by any amount. The
// lag is unknown then, with the age of the last replayed transaction as
// a lower bound; streaming again, it is known again.
func TestReadLagWhenTheReceiverStops(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, _, reads, _ := standbyFormation(t, ctx)
	rc := hopper.NewClient(reads)
	lagIs := func(unknown bool) func() bool {
		return func() bool {
			lag, err := rc.GetReadLag(ctx)
			return err == nil && lag.Standby && lag.Unknown == unknown
		}
	}
	require.Eventually(t, lagIs(false), time.Minute, 20*time.Millisecond, "streaming: the lag is known")

	// The receiver stops: no primary to stream from.
	_, err := reads.Exec(ctx, "ALTER SYSTEM SET primary_conninfo = ''")
	require.NoError(t, err)
	_, err = reads.Exec(ctx, "SELECT pg_reload_conf()")
	require.NoError(t, err)
	require.Eventually(t, lagIs(true), time.Minute, 20*time.Millisecond, "the receiver stopped: the lag is unknown")
	// (No write on the primary now: its synchronous commits would wait
	// for this standby until the monitor turns that off.)
	lag, err := rc.GetReadLag(ctx)
	require.NoError(t, err)
	require.True(t, lag.Unknown)
	require.Contains(t, lag.String(), "lag unknown")
	require.NotContains(t, lag.String(), "caught up")

	_, err = reads.Exec(ctx, "ALTER SYSTEM RESET primary_conninfo")
	require.NoError(t, err)
	_, err = reads.Exec(ctx, "SELECT pg_reload_conf()")
	require.NoError(t, err)
	require.Eventually(t, lagIs(false), time.Minute, 20*time.Millisecond, "streaming again: the lag is known")
}
