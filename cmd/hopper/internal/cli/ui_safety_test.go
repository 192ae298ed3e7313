package cli

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// uiRun is a hopper ui started in this process.
type uiRun struct {
	root   string // the dashboard's address, without the token: http://host:port/
	first  string // the first line it printed
	stderr *testdb.Buffer
}

var dashboardAddress = regexp.MustCompile(`http://[^/\s]+/`)

// startUI runs hopper ui with args against a fresh schema until the test
// ends, and returns once it has printed its address.
func startUI(t *testing.T, args ...string) uiRun {
	t.Helper()
	d := testdb.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	out, stdout := io.Pipe()
	u := uiRun{stderr: &testdb.Buffer{}}
	code := make(chan int, 1)
	go func() {
		code <- Run(ctx, append([]string{"--database-url", d.URL, "ui", "--sample-every", "1h"}, args...),
			strings.NewReader(""), stdout, u.stderr)
		stdout.Close()
	}()
	t.Cleanup(func() {
		cancel()
		require.Equal(t, exitOK, <-code, u.stderr.String())
	})
	lines := bufio.NewScanner(out)
	require.True(t, lines.Scan(), u.stderr.String())
	u.first = lines.Text()
	go func() { _, _ = io.Copy(io.Discard, out) }()
	u.root = dashboardAddress.FindString(u.first)
	require.NotEmpty(t, u.root, u.first)
	return u
}

// get asks the dashboard for path with the Host header host ("": the
// address's own) and returns the status.
func (u uiRun) get(t *testing.T, path, host string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u.root+strings.TrimPrefix(path, "/"), nil)
	require.NoError(t, err)
	if host != "" {
		req.Host = host
	}
	res, err := http.DefaultTransport.RoundTrip(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// TestUIAnswersAllowedHostsOnly: hopper ui answers its own address,
// localhost and the names of --allow-host (repeated or comma-separated),
// and 421 for any other name: a DNS-rebinding page's.
func TestUIAnswersAllowedHostsOnly(t *testing.T) {
	t.Parallel()
	u := startUI(t, "--addr", "127.0.0.1:0", "--token", "t0k", "--allow-host", "dash.example,ops.example", "--allow-host", "q.example")
	port := u.root[strings.LastIndex(u.root, ":")+1 : len(u.root)-1]
	for _, tc := range []struct {
		host string
		want int
	}{
		{"", http.StatusOK},
		{"localhost:" + port, http.StatusOK},
		{"dash.example", http.StatusOK},
		{"ops.example:" + port, http.StatusOK},
		{"q.example", http.StatusOK},
		{"evil.example:" + port, http.StatusMisdirectedRequest},
		{"evil.example", http.StatusMisdirectedRequest},
	} {
		require.Equal(t, tc.want, u.get(t, "/", tc.host), "Host %q", tc.host)
		require.Equal(t, tc.want, u.get(t, "/static/style.css", tc.host), "Host %q", tc.host)
	}
}

// TestUIReadOnlyToken: --read-only with --token is refused (the token
// would guard nothing), before connecting to anything, unless
// --protect-reads gives it a use: then every page needs it.
func TestUIReadOnlyToken(t *testing.T) {
	t.Parallel()
	var stdout, stderr testdb.Buffer
	code := Run(context.Background(), []string{"--database-url", "postgres://127.0.0.1:1/nowhere", "ui", "--read-only", "--token", "x"},
		strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, exitUsage, code)
	require.Equal(t, "hopper ui: --token has no use with --read-only: every change is refused and reads need no token (add --protect-reads to make every page need it) (run hopper ui --help)\n", stderr.String())
	require.Empty(t, stdout.String())

	u := startUI(t, "--addr", "127.0.0.1:0", "--read-only", "--token", "x", "--protect-reads")
	require.Equal(t, "Hopper dashboard (read-only): "+u.root+"?token=x", u.first)
	require.Equal(t, http.StatusUnauthorized, u.get(t, "/", ""), "reading needs the token")
	require.Equal(t, http.StatusUnauthorized, u.get(t, "/overview/live", ""))
	require.Equal(t, http.StatusSeeOther, u.get(t, "/?token=x", ""), "the token opens it")
}

// TestUIWarnsWhenExposed: listening on an address other machines can
// reach, with pages that need no token, hopper ui warns at start; on a
// loopback address, or with --protect-reads, it does not.
func TestUIWarnsWhenExposed(t *testing.T) {
	t.Parallel()
	const warning = "is not a loopback address and reading needs no token: anyone who can reach it can read every job's payload, metadata and errors (add --protect-reads, or listen on 127.0.0.1)"
	for _, tc := range []struct {
		args []string
		warn bool
	}{
		{[]string{"--addr", "0.0.0.0:0"}, true},
		{[]string{"--addr", "0.0.0.0:0", "--read-only"}, true},
		{[]string{"--addr", "0.0.0.0:0", "--protect-reads"}, false},
		{[]string{"--addr", "127.0.0.1:0"}, false},
		{[]string{"--addr", "localhost:0"}, false},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			u := startUI(t, tc.args...)
			if tc.warn {
				require.Contains(t, u.stderr.String(), "hopper ui: warning: ")
				require.Contains(t, u.stderr.String(), warning)
			} else {
				require.NotContains(t, u.stderr.String(), "warning", u.stderr.String())
			}
		})
	}
}
