package testdb

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// socketPath is a unix socket path in a folder of its own, short enough
// for the 108-byte limit of sun_path.
func socketPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dk")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "docker.sock")
}

// listen serves each connection on a fresh unix socket with serve, until
// the test ends.
func listen(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	path := socketPath(t)
	l, err := net.Listen("unix", path)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			serve(c)
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return path
}

// answerGarbage reads a request's head, then answers what no HTTP server
// would, and closes the connection.
func answerGarbage(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var head []byte
	buf := make([]byte, 512)
	for !strings.Contains(string(head), "\r\n\r\n") {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		head = append(head, buf[:n]...)
	}
	_, _ = io.WriteString(c, "SSH-2.0-not-docker\r\n\r\n")
}

// closedEarly is what a client sees of a server that closes the
// connection at once: EOF, or a write or read that fails.
const closedEarly = `EOF|broken pipe|connection reset|server closed|closed network connection`

// serveHTTP answers every request on a fresh unix socket with status and
// body, until the test ends.
func serveHTTP(t *testing.T, status int, body string) string {
	t.Helper()
	path := socketPath(t)
	l, err := net.Listen("unix", path)
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/_ping" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return path
}

// TestDockerPing checks the cheap check that a Docker engine answers
// against real sockets: none, one nobody listens on, ones that close the
// connection or answer garbage or an error, and one that answers as an
// engine does. Not parallel: it sets DOCKER_HOST.
func TestDockerPing(t *testing.T) {
	for _, tc := range []struct {
		name string
		host func(t *testing.T) string // DOCKER_HOST
		want string                    // a pattern of the error; "" for none
	}{
		{"no socket", func(t *testing.T) string { return "unix://" + socketPath(t) }, "no such file"},
		{"refused", func(t *testing.T) string {
			path := socketPath(t)
			l, err := net.Listen("unix", path)
			require.NoError(t, err)
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			l.Close()
			return "unix://" + path
		}, "connection refused"},
		{"closes connections", func(t *testing.T) string {
			return "unix://" + listen(t, func(c net.Conn) { c.Close() })
		}, closedEarly},
		{"answers garbage", func(t *testing.T) string {
			return "unix://" + listen(t, answerGarbage)
		}, "malformed HTTP"},
		{"answers an error", func(t *testing.T) string {
			return "unix://" + serveHTTP(t, http.StatusInternalServerError, "down")
		}, "500"},
		{"unsupported scheme", func(*testing.T) string { return "ssh://me@host" }, "only unix:// and tcp://"},
		{"tcp, nothing listens", func(t *testing.T) string {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			addr := l.Addr().String()
			l.Close()
			return "tcp://" + addr
		}, "connection refused"},
		{"an engine", func(t *testing.T) string { return "unix://" + serveHTTP(t, http.StatusOK, "OK") }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("DOCKER_HOST", tc.host(t))
			err := dockerPing()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Regexp(t, tc.want, err.Error())
		})
	}
}

// TestFindOrder checks the order of the ways to a server, with each
// variable set or not and each way answering or not. Not parallel: it sets
// the variables.
func TestFindOrder(t *testing.T) {
	const hopperURL, databaseURL = "postgres://hopper-test", "postgres://database-url"
	for _, tc := range []struct {
		name              string
		hopperSet, dbSet  bool
		answers           []string // DSNs that ping answers; "" is the libpq defaults
		docker, scratch   bool     // whether these start
		wantDSN, wantFrom string
		wantSkipped       []string // prefixes of the skip notes, in order
	}{
		{name: "HOPPER_TEST_DATABASE_URL first", hopperSet: true, dbSet: true, answers: []string{hopperURL, databaseURL, ""}, docker: true, scratch: true,
			wantDSN: hopperURL, wantFrom: "HOPPER_TEST_DATABASE_URL"},
		{name: "DATABASE_URL when HOPPER_TEST_DATABASE_URL does not answer", hopperSet: true, dbSet: true, answers: []string{databaseURL, ""}, docker: true, scratch: true,
			wantDSN: databaseURL, wantFrom: "DATABASE_URL", wantSkipped: []string{"HOPPER_TEST_DATABASE_URL:"}},
		{name: "DATABASE_URL alone", dbSet: true, answers: []string{databaseURL, ""}, docker: true, scratch: true,
			wantDSN: databaseURL, wantFrom: "DATABASE_URL"},
		{name: "libpq defaults with no variable", answers: []string{""}, docker: true, scratch: true,
			wantDSN: "", wantFrom: "libpq defaults"},
		{name: "libpq defaults when the variables do not answer", hopperSet: true, dbSet: true, answers: []string{""}, docker: true, scratch: true,
			wantDSN: "", wantFrom: "libpq defaults", wantSkipped: []string{"HOPPER_TEST_DATABASE_URL:", "DATABASE_URL:"}},
		{name: "Docker before a scratch cluster", docker: true, scratch: true,
			wantDSN: "postgres://docker", wantFrom: "a Docker container (dockertest)", wantSkipped: []string{"libpq defaults:"}},
		{name: "a scratch cluster without Docker", dbSet: true, scratch: true,
			wantDSN: "postgres://scratch", wantFrom: "a scratch cluster",
			wantSkipped: []string{"DATABASE_URL:", "libpq defaults:", "a Docker container (dockertest): no engine"}},
		{name: "nothing", hopperSet: true,
			wantSkipped: []string{"HOPPER_TEST_DATABASE_URL:", "libpq defaults:", "a Docker container (dockertest): no engine", "a scratch cluster: no initdb"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := func(name string, on bool, value string) {
				if !on {
					value = ""
				}
				t.Setenv(name, value)
			}
			set("HOPPER_TEST_DATABASE_URL", tc.hopperSet, hopperURL)
			set("DATABASE_URL", tc.dbSet, databaseURL)
			var pinged []string
			var started []string
			f := finder{
				ping: func(dsn string) error {
					pinged = append(pinged, dsn)
					for _, a := range tc.answers {
						if a == dsn {
							return nil
						}
					}
					return errors.New("connection refused")
				},
				docker: func() (string, error) {
					started = append(started, "docker")
					if tc.docker {
						return "postgres://docker", nil
					}
					return "", errors.New("no engine")
				},
				scratch: func() (string, error) {
					started = append(started, "scratch")
					if tc.scratch {
						return "postgres://scratch", nil
					}
					return "", errors.New("no initdb")
				},
			}
			dsn, from, skipped, err := f.find()
			require.Len(t, skipped, len(tc.wantSkipped), "skipped: %q", skipped)
			for i, want := range tc.wantSkipped {
				require.True(t, strings.HasPrefix(skipped[i], want), "skip note %d: %q, want it to start with %q", i, skipped[i], want)
			}
			if tc.wantFrom == "" {
				require.Error(t, err)
				require.Equal(t, strings.Join(skipped, "; "), err.Error())
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantFrom, from)
			require.Equal(t, tc.wantDSN, dsn)
			// Nothing past the way used was tried.
			require.Equal(t, len(tc.wantSkipped)+1, len(pinged)+len(started), "pinged %q, started %q", pinged, started)
		})
	}
}

// TestFindPassesUnreachableDocker runs the real Docker step against
// sockets where no engine answers: it is skipped, with the reason in the
// skip notes, and the scratch cluster is used. Not parallel: it sets
// DOCKER_HOST and the database variables.
func TestFindPassesUnreachableDocker(t *testing.T) {
	for _, tc := range []struct{ name, host, reason string }{
		{"no socket", "unix://" + socketPath(t), "no such file"},
		{"closes connections", "unix://" + listen(t, func(c net.Conn) { c.Close() }), closedEarly},
		{"answers garbage", "unix://" + listen(t, answerGarbage), "malformed HTTP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("DOCKER_HOST", tc.host)
			t.Setenv("HOPPER_TEST_DATABASE_URL", "")
			t.Setenv("DATABASE_URL", "")
			f := finder{
				ping:    func(string) error { return errors.New("connection refused") },
				docker:  startDocker,
				scratch: func() (string, error) { return "postgres://scratch", nil },
			}
			before, start := docker, time.Now()
			dsn, from, skipped, err := f.find()
			require.NoError(t, err)
			require.Equal(t, "postgres://scratch", dsn)
			require.Equal(t, "a scratch cluster", from)
			require.Len(t, skipped, 2)
			require.Contains(t, skipped[1], "a Docker container (dockertest): no Docker engine answers")
			require.Regexp(t, tc.reason, skipped[1])
			require.Less(t, time.Since(start), dockerPingTimeout+time.Second, "the check must be cheap")
			require.True(t, docker == before, "no helper may run")
		})
	}
}

// fakeHelperEnv makes TestMain play the dockerpg helper, in the mode its
// value names.
const fakeHelperEnv = "HOPPER_TESTDB_FAKE_DOCKERPG"

// fakeDockerHelper plays the dockerpg helper. "ok": print a connection
// string, wait for stdin to close, then write "purged" to the file named
// by HOPPER_TESTDB_FAKE_PURGED. "fail": say why on stderr and exit 1.
// "hang": print nothing until stdin closes.
func fakeDockerHelper(mode string) int {
	switch mode {
	case "ok":
		fmt.Println("postgres://fake@127.0.0.1:1/test")
		_, _ = io.Copy(io.Discard, os.Stdin)
		if err := os.WriteFile(os.Getenv("HOPPER_TESTDB_FAKE_PURGED"), []byte("purged"), 0o600); err != nil {
			return 1
		}
		return 0
	case "fail":
		fmt.Fprintln(os.Stderr, "dockerpg: start postgres:17.2-alpine: pull access denied")
		return 1
	default:
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	}
}

// TestRunDockerHelper checks the protocol with the dockerpg helper, played
// by this test binary: one line on stdout, a purge when stdin closes, the
// helper's stderr in the error when it fails, a time limit. Not parallel:
// it sets the helper's variables.
func TestRunDockerHelper(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)

	t.Run("ok", func(t *testing.T) {
		purged := filepath.Join(t.TempDir(), "purged")
		t.Setenv(fakeHelperEnv, "ok")
		t.Setenv("HOPPER_TESTDB_FAKE_PURGED", purged)
		h, dsn, err := runDockerHelper(t.TempDir(), 30*time.Second, exe)
		require.NoError(t, err)
		require.Equal(t, "postgres://fake@127.0.0.1:1/test", dsn)
		require.NoFileExists(t, purged, "purged before its stdin closed")
		h.stop()
		got, err := os.ReadFile(purged)
		require.NoError(t, err)
		require.Equal(t, "purged", string(got))
	})
	t.Run("fail", func(t *testing.T) {
		t.Setenv(fakeHelperEnv, "fail")
		_, _, err := runDockerHelper(t.TempDir(), 30*time.Second, exe)
		require.ErrorContains(t, err, "the dockerpg helper: dockerpg: start postgres:17.2-alpine: pull access denied")
	})
	t.Run("hang", func(t *testing.T) {
		t.Setenv(fakeHelperEnv, "hang")
		_, _, err := runDockerHelper(t.TempDir(), 500*time.Millisecond, exe)
		require.ErrorContains(t, err, "no connection string within 500ms")
	})
}
