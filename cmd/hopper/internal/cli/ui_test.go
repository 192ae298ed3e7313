package cli

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// listen listens on a free port of 127.0.0.1.
func listen(t *testing.T) (net.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return ln, ln.Addr().String()
}

// closed reports whether nothing listens at addr any more.
func closed(addr string) bool {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return true
	}
	c.Close()
	return false
}

// TestServeDashboardWaitsForRequestsAndRun: stopped, serveDashboard
// returns (and the pool may be closed) only once the requests in flight
// have finished and the sampler has returned.
func TestServeDashboardWaitsForRequestsAndRun(t *testing.T) {
	t.Parallel()
	ln, addr := listen(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var handled, sampled atomic.Bool
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		handled.Store(true)
		w.WriteHeader(http.StatusNoContent)
	})
	run := func(ctx context.Context) {
		<-ctx.Done()
		<-release
		sampled.Store(true)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- serveDashboard(ctx, ln, h, run, time.Minute) }()
	answered := make(chan int, 1)
	go func() {
		res, err := http.Get("http://" + addr + "/")
		if err != nil {
			answered <- 0
			return
		}
		res.Body.Close()
		answered <- res.StatusCode
	}()
	<-entered
	cancel()
	testdb.WaitFor(t, "the server to stop listening (Shutdown began)", func() bool { return closed(addr) })
	select {
	case err := <-done:
		t.Fatalf("serveDashboard returned (%v) with a request in flight and the sampler running", err)
	default:
	}
	close(release)
	require.NoError(t, <-done)
	require.True(t, handled.Load(), "the request in flight finished first")
	require.True(t, sampled.Load(), "the sampler returned first")
	require.Equal(t, http.StatusNoContent, <-answered, "and was answered")
}

// TestServeDashboardCutsSlowRequests: a request that outlasts the grace is
// cut (srv.Close), and serveDashboard returns.
func TestServeDashboardCutsSlowRequests(t *testing.T) {
	t.Parallel()
	ln, addr := listen(t)
	entered, left := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(left)
		close(entered)
		<-r.Context().Done() // until the connection is cut
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- serveDashboard(ctx, ln, h, func(ctx context.Context) { <-ctx.Done() }, 50*time.Millisecond)
	}()
	failed := make(chan error, 1)
	go func() {
		res, err := http.Get("http://" + addr + "/")
		if err == nil {
			res.Body.Close()
		}
		failed <- err
	}()
	<-entered
	cancel()
	require.NoError(t, <-done)
	<-left
	require.Error(t, <-failed, "the request was cut")
}

// TestUICommandStops: hopper ui serves the dashboard until its context
// ends, then exits cleanly (the test binary then checks that no goroutine
// of its server, sampler or pool is left).
func TestUICommandStops(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, stdout := io.Pipe()
	var stderr testdb.Buffer
	code := make(chan int, 1)
	go func() {
		code <- Run(ctx, []string{"--database-url", d.URL, "ui", "--addr", "127.0.0.1:0", "--token", "t0k", "--sample-every", "10ms"},
			strings.NewReader(""), stdout, &stderr)
		stdout.Close()
	}()
	lines := bufio.NewScanner(out)
	require.True(t, lines.Scan(), stderr.String())
	address, ok := strings.CutPrefix(lines.Text(), "Hopper dashboard: ")
	require.True(t, ok, lines.Text())
	address, ok = strings.CutSuffix(address, "?token=t0k")
	require.True(t, ok, lines.Text())
	go func() { _, _ = io.Copy(io.Discard, out) }()

	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := noFollow.Get(address + "?token=t0k")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "./", res.Header.Get("Location"))
	res, err = noFollow.Get(address)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	noFollow.CloseIdleConnections()

	cancel()
	require.Equal(t, exitOK, <-code, stderr.String())
	_, err = http.Get(address)
	require.Error(t, err, "nothing listens any more")
	require.False(t, errors.Is(err, context.Canceled))
}
