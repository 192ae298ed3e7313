package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// cluster is a throwaway PostgreSQL cluster: initdb's defaults, which are
// what a fresh production install runs with (autovacuum on, fsync on,
// synchronous_commit on), in a temporary directory, on its own port. A
// shared CI server is often tuned for speed instead (autovacuum or fsync
// off), which flatters some figures and ruins others.
type cluster struct {
	dir, data  string // the temporary directory, and the data directory in it
	bin        string // the directory of initdb and pg_ctl
	port       int
	version    string
	statements bool                // pg_stat_statements is loaded
	cred       *syscall.Credential // the postgres OS user's, when we run as root
	log        io.Writer
	started    bool
	once       sync.Once
}

// startCluster creates and starts a scratch cluster; stop removes it. On an
// error nothing is left behind.
func startCluster(ctx context.Context, log io.Writer) (_ *cluster, err error) {
	if log == nil {
		log = io.Discard
	}
	c := &cluster{log: log}
	if c.bin, err = postgresBin(); err != nil {
		return nil, fmt.Errorf("bench: scratch cluster: %w", err)
	}
	// initdb and postgres refuse to run as root.
	if os.Geteuid() == 0 {
		if c.cred, err = postgresUser(); err != nil {
			return nil, fmt.Errorf("bench: scratch cluster: running as root, initdb needs a non-root user: %w", err)
		}
	}
	if c.dir, err = os.MkdirTemp("", "hopper-bench-cluster-"); err != nil {
		return nil, fmt.Errorf("bench: scratch cluster: %w", err)
	}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	if c.cred != nil {
		if err := os.Chown(c.dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return nil, fmt.Errorf("bench: scratch cluster: %w", err)
		}
	}
	c.data = filepath.Join(c.dir, "data")
	if err := c.run(ctx, "initdb", "-D", c.data, "--auth=trust", "--username=postgres", "--encoding=UTF8", "--no-instructions"); err != nil {
		return nil, fmt.Errorf("bench: scratch cluster: %w", err)
	}
	if c.port, err = freePort(); err != nil {
		return nil, fmt.Errorf("bench: scratch cluster: free port: %w", err)
	}
	// Where to listen is not a production default but has to be chosen;
	// pg_stat_statements is the one extra, for measurement only (the run
	// reports buffers per claim from it), and only if it is installed.
	conf := fmt.Sprintf("\n# hopper bench scratch cluster\nport = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\n",
		c.port, strings.ReplaceAll(c.dir, "'", "''"))
	if c.statements = c.hasStatements(); c.statements {
		conf += "shared_preload_libraries = 'pg_stat_statements'\n"
	}
	if err := appendFile(filepath.Join(c.data, "postgresql.conf"), conf); err != nil {
		return nil, fmt.Errorf("bench: scratch cluster: %w", err)
	}
	logFile := filepath.Join(c.dir, "postgres.log")
	if err := c.run(ctx, "pg_ctl", "start", "-w", "-t", "120", "-D", c.data, "-l", logFile); err != nil {
		serverLog, _ := os.ReadFile(logFile)
		return nil, fmt.Errorf("bench: scratch cluster: %w; server log: %s", err, tail(serverLog))
	}
	c.started = true
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		return nil, fmt.Errorf("bench: scratch cluster: connect: %w", err)
	}
	defer conn.Close(ctx)
	c.version = conn.PgConn().ParameterStatus("server_version")
	if c.statements {
		if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
			return nil, fmt.Errorf("bench: scratch cluster: create extension pg_stat_statements: %w", err)
		}
	}
	extra := ""
	if c.statements {
		extra = " (plus pg_stat_statements, for measurement)"
	}
	fmt.Fprintf(c.log, "scratch cluster: PostgreSQL %s in %s, port %d, production defaults%s\n", c.version, c.dir, c.port, extra)
	return c, nil
}

// URL is the cluster's connection string.
func (c *cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// stop shuts the server down and removes its directory. It is safe to call
// more than once, and after a failed start. It does not take the run's
// context: it must work after an interrupt cancelled that.
func (c *cluster) stop() {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// A server may run even when start failed (pg_ctl timed out or was
		// interrupted): its pid file says so.
		if _, err := os.Stat(filepath.Join(c.data, "postmaster.pid")); err == nil {
			if err := c.run(ctx, "pg_ctl", "stop", "-w", "-m", "fast", "-D", c.data); err != nil {
				fmt.Fprintf(c.log, "scratch cluster: %v; stopping immediately\n", err)
				_ = c.run(ctx, "pg_ctl", "stop", "-w", "-m", "immediate", "-D", c.data)
			}
		}
		if err := os.RemoveAll(c.dir); err != nil {
			fmt.Fprintf(c.log, "scratch cluster: remove %s: %v\n", c.dir, err)
		} else if c.started {
			fmt.Fprintf(c.log, "scratch cluster: stopped, %s removed\n", c.dir)
		}
	})
}

// run runs one of the cluster's programs (as the postgres OS user when we
// are root), in a process group of its own so that a Ctrl-C at the terminal
// reaches only hopper, which then stops the cluster in order.
func (c *cluster) run(ctx context.Context, program string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, program), args...)
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", program, err, tail(out))
	}
	return nil
}

// hasStatements says whether pg_stat_statements' library is installed next
// to this server.
func (c *cluster) hasStatements() bool {
	libdir := filepath.Join(c.bin, "..", "lib")
	if out, err := exec.Command(filepath.Join(c.bin, "pg_config"), "--pkglibdir").Output(); err == nil {
		libdir = strings.TrimSpace(string(out))
	}
	found, _ := filepath.Glob(filepath.Join(libdir, "pg_stat_statements.*"))
	return len(found) > 0
}

// postgresBin finds the directory holding initdb and pg_ctl: initdb's on the
// PATH, else the newest /usr/lib/postgresql/*/bin (Debian keeps them there).
func postgresBin() (string, error) {
	var dirs []string
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dirs = append(dirs, filepath.Dir(p))
	} else {
		best := -1.0
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		for _, d := range found {
			v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(d)), 64) // "15", "9.6"
			if err == nil && v > best {
				best, dirs = v, []string{d}
			}
		}
	}
	for _, d := range dirs {
		if isFile(filepath.Join(d, "initdb")) && isFile(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	return "", errors.New("initdb and pg_ctl not found on the PATH nor in /usr/lib/postgresql/*/bin (install the PostgreSQL server)")
}

// postgresUser is the credential of the postgres OS user.
func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// freePort asks the kernel for a free port. Another process may take it
// before the server binds it; the start then fails and says so.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func appendFile(name, text string) error {
	f, err := os.OpenFile(name, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func isFile(name string) bool {
	fi, err := os.Stat(name)
	return err == nil && fi.Mode().IsRegular()
}

// tail is the end of a program's output, enough to show why it failed.
func tail(out []byte) string {
	const keep = 2000
	s := strings.TrimSpace(string(out))
	if len(s) > keep {
		s = "…" + s[len(s)-keep:]
	}
	return s
}
