package testdb

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// The Docker path: a PostgreSQL container started by dockertest. dockertest
// and its dependencies live in a module of their own (dockerpg, next to
// this file) so that they stay out of Hopper's module graph and its users';
// this package only checks, with net/http, that a Docker engine answers,
// then runs that module's command with `go run` and reads the connection
// string it prints once PostgreSQL answers. The command purges the
// container when its standard input closes: stopDocker closes it, and so
// does this process's end, however it ends.

const (
	// dockerPingTimeout bounds the cheap check that an engine answers.
	dockerPingTimeout = 2 * time.Second
	// dockerStartTimeout bounds building the helper, pulling the image
	// on a first run, and PostgreSQL's start.
	dockerStartTimeout = 5 * time.Minute
	// dockerStopTimeout bounds the helper's purge of the container.
	dockerStopTimeout = time.Minute
)

// dockerEndpoint is where the Docker engine listens: DOCKER_HOST when set
// (unix:// or tcp://), else /var/run/docker.sock. It returns the URL of
// the ping and the dialer that reaches it.
func dockerEndpoint() (pingURL string, dial func(ctx context.Context) (net.Conn, error), err error) {
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		host = "unix:///var/run/docker.sock"
	}
	u, err := url.Parse(host)
	if err != nil {
		return "", nil, fmt.Errorf("DOCKER_HOST=%q: %w", host, err)
	}
	var d net.Dialer
	switch u.Scheme {
	case "unix":
		path := u.Path
		if path == "" {
			path = u.Opaque
		}
		return "http://docker/_ping", func(ctx context.Context) (net.Conn, error) {
			return d.DialContext(ctx, "unix", path)
		}, nil
	case "tcp":
		if os.Getenv("DOCKER_TLS_VERIFY") != "" {
			// The ping would need the client's certificates: a TCP
			// connection is check enough, the helper pings properly.
			return "", func(ctx context.Context) (net.Conn, error) {
				return d.DialContext(ctx, "tcp", u.Host)
			}, nil
		}
		return "http://docker/_ping", func(ctx context.Context) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", u.Host)
		}, nil
	default:
		return "", nil, fmt.Errorf("DOCKER_HOST=%q: only unix:// and tcp:// are supported", host)
	}
}

// dockerPing reports whether a Docker engine answers at dockerEndpoint:
// GET /_ping must return 200 OK.
func dockerPing() error {
	pingURL, dial, err := dockerEndpoint()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), dockerPingTimeout)
	defer cancel()
	if pingURL == "" {
		conn, err := dial(ctx)
		if err != nil {
			return err
		}
		return conn.Close()
	}
	transport := &http.Transport{
		DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		DisableKeepAlives: true,
	}
	defer transport.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, pingURL, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /_ping: %s %q", resp.Status, body)
	}
	return nil
}

// dockerHelperDir is the dockerpg module's folder, found from this file's
// path at build time (so not in a -trimpath build).
func dockerHelperDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return "", errors.New("the dockerpg helper's source is not at hand (a -trimpath build?)")
	}
	dir := filepath.Join(filepath.Dir(file), "dockerpg")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("the dockerpg helper's source: %w", err)
	}
	return dir, nil
}

// dockerHelper is the running helper, if startDocker started one.
type dockerHelper struct {
	cmd   *exec.Cmd
	stdin *os.File // closing it makes the helper purge the container
}

// docker is the helper startDocker started, if any; Main stops it.
var docker *dockerHelper

// startDocker starts a PostgreSQL container through the dockerpg helper and
// returns its connection string once the server answers.
func startDocker() (string, error) {
	if err := dockerPing(); err != nil {
		return "", fmt.Errorf("no Docker engine answers: %w", err)
	}
	dir, err := dockerHelperDir()
	if err != nil {
		return "", err
	}
	h, dsn, err := runDockerHelper(dir, dockerStartTimeout, "go", "run", ".")
	if err != nil {
		return "", err
	}
	docker = h
	return dsn, nil
}

// runDockerHelper runs name args in dir and waits up to timeout for the
// one line it prints on stdout: the connection string.
func runDockerHelper(dir string, timeout time.Duration, name string, args ...string) (*dockerHelper, string, error) {
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, "", err
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return nil, "", err
	}
	defer stdoutR.Close()
	// A file, not a buffer: exec copies into a buffer in a goroutine, which
	// goleak would count as a leak of every test binary.
	stderr, err := os.CreateTemp("", "hopper-dockerpg-*.log")
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		stdoutW.Close()
		return nil, "", err
	}
	defer func() {
		stderr.Close()
		os.Remove(stderr.Name())
	}()

	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, stdoutW, stderr
	err = cmd.Start()
	stdinR.Close()
	stdoutW.Close()
	if err != nil {
		stdinW.Close()
		return nil, "", fmt.Errorf("run the dockerpg helper: %w", err)
	}
	h := &dockerHelper{cmd: cmd, stdin: stdinW}

	_ = stdoutR.SetReadDeadline(time.Now().Add(timeout))
	line, readErr := bufio.NewReader(stdoutR).ReadString('\n')
	dsn := strings.TrimSpace(line)
	if readErr == nil && dsn != "" {
		return h, dsn, nil
	}
	h.stop()
	log, _ := os.ReadFile(stderr.Name())
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		if l != "" && !strings.HasPrefix(l, "exit status ") { // go run's own
			lines = append(lines, l)
		}
	}
	why := strings.Join(lines, "; ")
	if why == "" {
		why = fmt.Sprint(readErr)
	}
	if errors.Is(readErr, os.ErrDeadlineExceeded) {
		why = fmt.Sprintf("no connection string within %v; %s", timeout, why)
	}
	return nil, "", fmt.Errorf("the dockerpg helper: %s", why)
}

// stop closes the helper's standard input, which makes it purge the
// container, and waits for it; it kills the helper after dockerStopTimeout.
func (h *dockerHelper) stop() {
	h.stdin.Close()
	done := make(chan struct{})
	go func() {
		_ = h.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(dockerStopTimeout):
		_ = h.cmd.Process.Kill()
		<-done
	}
}
