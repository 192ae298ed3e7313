// Package citusbed starts a Citus formation for tests (tests/citus, `make
// citus`): a coordinator and worker nodes, each a throwaway cluster of
// internal/testbed/pgcluster (initdb into a temporary directory, a free port on
// 127.0.0.1) with Citus loaded, the coordinator's host set and the workers
// added, and removes every trace when it stops.
//
// Citus is not in Debian's registry: ../shared/citus/install.sh (next to
// the project's checkout, as CI clones it) installs it when citus.so is
// missing from PostgreSQL's library directory, as .ci/debian-package.sh
// installs Debian's packages: only as root, else a test skips saying what to
// run.
package citusbed

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper/internal/testbed/pgcluster"
)

// modulePath is the project's module, whose root holds the go.mod the
// install script is found beside.
const modulePath = "github.com/hopperq/hopper"

// Options shape a formation.
type Options struct {
	// Workers is how many worker nodes to add (0: two).
	Workers int
	// Log receives what the formation does (nil: discarded).
	Log io.Writer
}

// Formation is a running coordinator and its worker nodes.
type Formation struct {
	Coordinator *pgcluster.Cluster
	Workers     []*pgcluster.Cluster
	// Version is Citus's, as citus_version() says it; Took is how long
	// the start took, clusters created and nodes added.
	Version string
	Took    time.Duration

	log  io.Writer
	once sync.Once
}

// settings are each node's postgresql.conf lines beyond initdb's
// defaults. The nodes reach each other on 127.0.0.1 with trust
// authentication, so without TLS (Citus asks for it by default and would
// make a certificate of its own); two-phase commits and shard moves need
// prepared transactions and logical decoding.
var settings = []string{
	"citus.node_conninfo = 'sslmode=disable'",
	"max_prepared_transactions = 100",
	"wal_level = logical",
}

// Start installs Citus if it is missing (see Install), starts the
// coordinator and the worker nodes, creates the extension on each, and
// adds the workers to the coordinator's metadata. On an error nothing is
// left behind.
func Start(ctx context.Context, opts Options) (_ *Formation, err error) {
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	f := &Formation{log: opts.Log}
	if f.log == nil {
		f.log = io.Discard
	}
	if err := Install(ctx, f.log); err != nil {
		return nil, err
	}
	began := time.Now()
	defer func() {
		if err != nil {
			f.Stop()
		}
	}()
	// The clusters start one after another: each initdb takes a core for
	// a second or two, and the machine's other tests need the other.
	clusterOpts := pgcluster.Options{Preload: []string{"citus"}, Settings: settings}
	if f.Coordinator, err = pgcluster.StartWith(ctx, clusterOpts); err != nil {
		return nil, fmt.Errorf("citus coordinator: %w", err)
	}
	for i := range opts.Workers {
		w, err := pgcluster.StartWith(ctx, clusterOpts)
		if err != nil {
			return nil, fmt.Errorf("citus worker %d: %w", i+1, err)
		}
		f.Workers = append(f.Workers, w)
	}
	for _, c := range f.clusters() {
		if err := exec1(ctx, c.URL(), "CREATE EXTENSION citus"); err != nil {
			return nil, fmt.Errorf("citus on port %d: %w", c.Port(), err)
		}
	}
	conn, err := pgx.Connect(ctx, f.Coordinator.URL())
	if err != nil {
		return nil, fmt.Errorf("citus coordinator: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SELECT citus_set_coordinator_host('127.0.0.1', $1)", f.Coordinator.Port()); err != nil {
		return nil, fmt.Errorf("citus_set_coordinator_host: %w", err)
	}
	for _, w := range f.Workers {
		if _, err := conn.Exec(ctx, "SELECT citus_add_node('127.0.0.1', $1)", w.Port()); err != nil {
			return nil, fmt.Errorf("citus_add_node %d: %w", w.Port(), err)
		}
	}
	if err := conn.QueryRow(ctx, "SELECT citus_version()").Scan(&f.Version); err != nil {
		return nil, fmt.Errorf("citus_version: %w", err)
	}
	f.Took = time.Since(began)
	ports := make([]string, len(f.Workers))
	for i, w := range f.Workers {
		ports[i] = fmt.Sprint(w.Port())
	}
	fmt.Fprintf(f.log, "citus formation: coordinator on %d, workers on %s, up in %v (%s)\n",
		f.Coordinator.Port(), strings.Join(ports, ", "), f.Took.Round(10*time.Millisecond), f.Version)
	return f, nil
}

// URL is the coordinator's connection string (role and database postgres).
func (f *Formation) URL() string { return f.Coordinator.URL() }

// Stop stops every node and removes their directories. It is safe to call
// more than once, and after a failed start.
func (f *Formation) Stop() {
	f.once.Do(func() {
		for _, c := range f.clusters() {
			c.Stop()
		}
		fmt.Fprintln(f.log, "citus formation: stopped and removed")
	})
}

func (f *Formation) clusters() []*pgcluster.Cluster {
	var cs []*pgcluster.Cluster
	if f.Coordinator != nil {
		cs = append(cs, f.Coordinator)
	}
	return append(cs, f.Workers...)
}

// New starts a formation for t and stops it when t ends. It skips t when
// Citus is not installed and cannot be (not root, no install script, no
// PostgreSQL server), saying why; any other failure fails t.
func New(t testing.TB) *Formation {
	t.Helper()
	if err := pgcluster.Available(); err != nil {
		t.Skipf("citus: no PostgreSQL server programs here: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := Install(ctx, logWriter{t}); err != nil {
		if errors.Is(err, ErrCannotInstall) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	f, err := Start(ctx, Options{Log: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return f
}

// ErrCannotInstall matches Install's error when Citus is missing and this
// process cannot install it.
var ErrCannotInstall = errors.New("citus cannot be installed here")

// Library is citus.so in the server's library directory (pg_config
// --pkglibdir), where install.sh puts it.
func Library() (string, error) {
	bin, err := pgcluster.Bin()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(filepath.Join(bin, "pg_config"), "--pkglibdir").Output()
	if err != nil {
		return "", fmt.Errorf("pg_config --pkglibdir: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "citus.so"), nil
}

// Install runs ../shared/citus/install.sh (beside the project's checkout)
// when citus.so is missing. Without root, or without the script, it
// returns an error matching ErrCannotInstall that says what to run.
func Install(ctx context.Context, log io.Writer) error {
	lib, err := Library()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCannotInstall, err)
	}
	if _, err := os.Stat(lib); err == nil {
		return nil
	}
	script, err := InstallScript()
	if err != nil {
		return fmt.Errorf("%w: %s is missing, and %v", ErrCannotInstall, lib, err)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: %s is missing, and installing it needs root: sudo bash %s", ErrCannotInstall, lib, script)
	}
	fmt.Fprintf(log, "citus: %s is missing; running %s\n", lib, script)
	out, err := exec.CommandContext(ctx, "bash", script).CombinedOutput()
	fmt.Fprintf(log, "%s", out)
	if err != nil {
		return fmt.Errorf("%w: bash %s: %v", ErrCannotInstall, script, err)
	}
	if _, err := os.Stat(lib); err != nil {
		return fmt.Errorf("bash %s ran, and %s is still missing", script, lib)
	}
	return nil
}

// InstallScript is ../shared/citus/install.sh from the project's module
// root, the nearest directory above this one whose go.mod is the
// project's.
func InstallScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isModuleRoot(filepath.Join(dir, "go.mod")) {
			script := filepath.Join(filepath.Dir(dir), "shared", "citus", "install.sh")
			if _, err := os.Stat(script); err != nil {
				return "", fmt.Errorf("the install script is not beside the checkout (%s)", script)
			}
			return script, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s above the working directory", modulePath)
		}
		dir = parent
	}
}

func isModuleRoot(gomod string) bool {
	f, err := os.Open(gomod)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if name, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.TrimSpace(name) == modulePath
		}
	}
	return false
}

// exec1 runs one statement on a connection of its own.
func exec1(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// logWriter sends the formation's lines to the test's log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
