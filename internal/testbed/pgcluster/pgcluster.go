// Package pgcluster starts throwaway PostgreSQL clusters: initdb's
// defaults, which are what a fresh production install runs with
// (autovacuum on, fsync on, synchronous_commit on), in a temporary
// directory, on a free port of their own. `hopper bench --scratch-cluster`
// measures on one (a shared CI server is often tuned for speed instead,
// which flatters some figures and ruins others), and the test bed starts
// one when no PostgreSQL answers.
package pgcluster

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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cluster is one throwaway PostgreSQL cluster.
type Cluster struct {
	// Version is the server's version; Statements says whether
	// pg_stat_statements is loaded (when it is installed, for measurement).
	Version    string
	Statements bool

	dir, data string // the temporary directory, and the data directory in it
	bin       string // the directory of initdb and pg_ctl
	port      int
	cred      *syscall.Credential // the postgres OS user's, when we run as root
	log       io.Writer
	started   bool
	once      sync.Once
}

// Options shape a cluster beyond initdb's defaults, for the test beds
// that need a server of another kind (internal/testbed/citusbed's Citus
// nodes).
type Options struct {
	// Log receives the cluster's start and stop (nil: discarded).
	Log io.Writer
	// Preload are libraries loaded at start (shared_preload_libraries),
	// first, before pg_stat_statements: Citus must be loaded first.
	Preload []string
	// Settings are more lines of postgresql.conf, "name = value" each.
	Settings []string
}

// Start creates and starts a cluster, saying so (and later that it
// stopped) on log; Stop removes it. On an error nothing is left behind.
func Start(ctx context.Context, log io.Writer) (*Cluster, error) {
	return StartWith(ctx, Options{Log: log})
}

// StartWith is Start with more than initdb's defaults: opts' libraries
// loaded and settings written.
func StartWith(ctx context.Context, opts Options) (_ *Cluster, err error) {
	log := opts.Log
	if log == nil {
		log = io.Discard
	}
	c := &Cluster{log: log}
	if c.bin, err = postgresBin(); err != nil {
		return nil, fmt.Errorf("scratch cluster: %w", err)
	}
	if c.cred, err = NonRoot(); err != nil {
		return nil, fmt.Errorf("scratch cluster: %w", err)
	}
	if c.dir, err = os.MkdirTemp("", "hopper-scratch-cluster-"); err != nil {
		return nil, fmt.Errorf("scratch cluster: %w", err)
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if c.cred != nil {
		if err := os.Chown(c.dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return nil, fmt.Errorf("scratch cluster: %w", err)
		}
	}
	c.data = filepath.Join(c.dir, "data")
	if err := c.run(ctx, "initdb", "-D", c.data, "--auth=trust", "--username=postgres", "--encoding=UTF8", "--no-instructions"); err != nil {
		return nil, fmt.Errorf("scratch cluster: %w", err)
	}
	if c.port, err = freePort(); err != nil {
		return nil, fmt.Errorf("scratch cluster: free port: %w", err)
	}
	// Where to listen is not a production default but has to be chosen;
	// pg_stat_statements is the one extra, for measurement only (the run
	// reports buffers per claim from it), and only if it is installed.
	conf := fmt.Sprintf("\n# hopper scratch cluster\nport = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\n",
		c.port, strings.ReplaceAll(c.dir, "'", "''"))
	preload := slices.Clone(opts.Preload)
	if c.Statements = c.hasStatements(); c.Statements {
		preload = append(preload, "pg_stat_statements")
	}
	if len(preload) > 0 {
		conf += "shared_preload_libraries = '" + strings.Join(preload, ",") + "'\n"
	}
	for _, line := range opts.Settings {
		conf += line + "\n"
	}
	if err := appendFile(filepath.Join(c.data, "postgresql.conf"), conf); err != nil {
		return nil, fmt.Errorf("scratch cluster: %w", err)
	}
	logFile := filepath.Join(c.dir, "postgres.log")
	if err := c.run(ctx, "pg_ctl", "start", "-w", "-t", "120", "-D", c.data, "-l", logFile); err != nil {
		serverLog, _ := os.ReadFile(logFile)
		return nil, fmt.Errorf("scratch cluster: %w; server log: %s", err, tail(serverLog))
	}
	c.started = true
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		return nil, fmt.Errorf("scratch cluster: connect: %w", err)
	}
	defer conn.Close(ctx)
	c.Version = conn.PgConn().ParameterStatus("server_version")
	if c.Statements {
		if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
			return nil, fmt.Errorf("scratch cluster: create extension pg_stat_statements: %w", err)
		}
	}
	extra := ""
	if c.Statements {
		extra = " (plus pg_stat_statements, for measurement)"
	}
	if len(opts.Preload) > 0 || len(opts.Settings) > 0 {
		extra += fmt.Sprintf(" (plus %s)", strings.Join(append(slices.Clone(opts.Preload), opts.Settings...), ", "))
	}
	fmt.Fprintf(c.log, "scratch cluster: PostgreSQL %s in %s, port %d, production defaults%s\n", c.Version, c.dir, c.port, extra)
	return c, nil
}

// Port is the cluster's port on 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// URL is the cluster's connection string (role and database postgres).
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Dir is the cluster's temporary directory, which holds its data directory
// ("data") and server log; Stop removes it.
func (c *Cluster) Dir() string { return c.dir }

// Stop shuts the server down and removes its directory. It is safe to call
// more than once, and after a failed start. It does not take the run's
// context: it must work after an interrupt cancelled that.
func (c *Cluster) Stop() {
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
func (c *Cluster) run(ctx context.Context, program string, args ...string) error {
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
func (c *Cluster) hasStatements() bool {
	libdir := filepath.Join(c.bin, "..", "lib")
	if out, err := exec.Command(filepath.Join(c.bin, "pg_config"), "--pkglibdir").Output(); err == nil {
		libdir = strings.TrimSpace(string(out))
	}
	found, _ := filepath.Glob(filepath.Join(libdir, "pg_stat_statements.*"))
	return len(found) > 0
}

// Available says why no cluster can be started here (nil: one can).
func Available() error {
	_, err := postgresBin()
	return err
}

// Bin is the directory holding PostgreSQL's programs (initdb, pg_ctl,
// postgres): other test beds put it first on a program's PATH.
func Bin() (string, error) { return postgresBin() }

// FreePort is a port free on 127.0.0.1 now (see freePort).
func FreePort() (int, error) { return freePort() }

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

// NonRoot is the credential to run PostgreSQL's programs with (initdb,
// postgres and pgbouncer refuse root): the postgres OS user's when this
// process is root, else nil (run them as this user).
func NonRoot() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	cred, err := postgresUser()
	if err != nil {
		return nil, fmt.Errorf("running as root, and PostgreSQL's programs need a non-root user: %w", err)
	}
	return cred, nil
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
