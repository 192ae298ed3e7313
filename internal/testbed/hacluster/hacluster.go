// Package hacluster starts a pg_auto_failover formation for the failover
// scenarios (tests/failover, `make failover`): a monitor and two PostgreSQL
// nodes on free local ports, with synchronous replication (the formation's
// default, number_sync_standbys 0: the primary waits for its standby while
// the standby is there), all in a temporary directory. It performs the
// failures the scenarios need — a planned switchover, a node killed with
// its keeper, a postmaster killed under a live keeper — and reads the
// formation's state from the monitor. Everything runs as the postgres OS
// user when this process is root, in process groups of its own, and Stop
// removes every trace.
//
// The engine is Debian's postgresql-15-auto-failover (its pg_autoctl is
// Program); .ci/debian-package.sh installs it.
package hacluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hopperq/hopper/internal/testbed/pgcluster"
)

// Program is pg_autoctl where Debian's package puts it.
const Program = "/usr/bin/pg_autoctl"

// Available says why no formation can be started here (nil: one can).
func Available() error {
	if _, err := os.Stat(Program); err != nil {
		return fmt.Errorf("pg_auto_failover is not installed (%s missing): bash .ci/debian-package.sh postgresql-15-auto-failover %s", Program, Program)
	}
	return pgcluster.Available()
}

// Options shape a formation.
type Options struct {
	// FastDetection tunes the monitor to fail a dead primary over after
	// about 10 s instead of pg_auto_failover's 50 s (a node unhealthy
	// after 20 s without an answer, then 30 s granted to it to demote
	// itself), so that a CI-size run fits; `make failover` measures with
	// the defaults.
	FastDetection bool
	// Log receives what the formation does (nil: discarded).
	Log io.Writer
}

// Formation is a running monitor and its two nodes.
type Formation struct {
	dir   string
	env   []string
	cred  *syscall.Credential
	log   io.Writer
	mon   *process
	monPt int
	nodes []*Node
	once  sync.Once
}

// Node is one PostgreSQL node of the formation and its keeper.
type Node struct {
	Name string
	Port int
	data string

	mu     sync.Mutex
	keeper *process // nil while the node is down
}

// Addr is the node's host:port.
func (n *Node) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Port)) }

// URL is a connection string to this node alone (role and database
// postgres).
func (n *Node) URL() string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", n.Addr())
}

// Start creates the monitor, then node1 (which becomes the primary), then
// node2 (its synchronous standby), and returns once node2 is a secondary.
// On an error nothing is left behind.
func Start(ctx context.Context, opts Options) (_ *Formation, err error) {
	if err := Available(); err != nil {
		return nil, err
	}
	f := &Formation{log: opts.Log}
	if f.log == nil {
		f.log = io.Discard
	}
	bin, err := pgcluster.Bin()
	if err != nil {
		return nil, err
	}
	if f.cred, err = pgcluster.NonRoot(); err != nil {
		return nil, err
	}
	if f.dir, err = os.MkdirTemp("", "hopper-formation-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Stop()
		}
	}()
	if f.cred != nil {
		if err := os.Chown(f.dir, int(f.cred.Uid), int(f.cred.Gid)); err != nil {
			return nil, err
		}
	}
	// A clean environment: the tests' PG* variables must not reach the
	// keepers, and pg_autoctl keeps its state under the XDG directories.
	f.env = []string{
		"PATH=" + bin + ":/usr/bin:/bin",
		"HOME=" + f.dir,
		"XDG_CONFIG_HOME=" + filepath.Join(f.dir, "config"),
		"XDG_DATA_HOME=" + filepath.Join(f.dir, "share"),
		"XDG_RUNTIME_DIR=" + filepath.Join(f.dir, "run"),
		"PG_CONFIG=" + filepath.Join(bin, "pg_config"),
	}
	began := time.Now()
	if f.monPt, err = pgcluster.FreePort(); err != nil {
		return nil, err
	}
	monData := filepath.Join(f.dir, "monitor")
	if err := f.run(ctx, "create", "monitor", "--pgdata", monData, "--pgport", strconv.Itoa(f.monPt),
		"--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl"); err != nil {
		return nil, err
	}
	if opts.FastDetection {
		// Health checks every second, a node unhealthy after 5 s without
		// an answer, and 5 s for a lost primary to demote itself before
		// its standby is promoted (the defaults: 5 s, 20 s and 30 s: a
		// lost node costs about 50 s).
		if err := appendFile(filepath.Join(monData, "postgresql.conf"), "\n# hopper formation: fast failure detection\n"+
			"pgautofailover.health_check_period = 1000\npgautofailover.health_check_timeout = 1000\n"+
			"pgautofailover.health_check_max_retries = 1\npgautofailover.health_check_retry_delay = 500\n"+
			"pgautofailover.node_considered_unhealthy_timeout = 5000\n"+
			"pgautofailover.primary_demote_timeout = 5000\n"); err != nil {
			return nil, err
		}
	}
	if f.mon, err = f.spawn("monitor", "run", "--pgdata", monData); err != nil {
		return nil, err
	}
	for i := 1; i <= 2; i++ {
		n := &Node{Name: "node" + strconv.Itoa(i), data: filepath.Join(f.dir, "node"+strconv.Itoa(i))}
		if n.Port, err = pgcluster.FreePort(); err != nil {
			return nil, err
		}
		k, err := f.spawn(n.Name, "create", "postgres", "--pgdata", n.data, "--pgport", strconv.Itoa(n.Port),
			"--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--name", n.Name, "--monitor", f.monitorURL("autoctl_node"), "--run")
		if err != nil {
			return nil, err
		}
		n.keeper = k
		f.nodes = append(f.nodes, n)
		want := "single"
		if i == 2 {
			want = "secondary"
		}
		if err := f.waitFor(ctx, n.Name+" "+want, func(s []NodeState) bool {
			st, ok := find(s, n.Name)
			return ok && st.Reported == want && st.Assigned == want
		}); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(f.log, "formation: monitor on %d, node1 on %d (primary), node2 on %d (synchronous standby), up in %v, in %s\n",
		f.monPt, f.nodes[0].Port, f.nodes[1].Port, time.Since(began).Round(100*time.Millisecond), f.dir)
	return f, nil
}

// Nodes are the formation's two nodes, node1 first.
func (f *Formation) Nodes() []*Node { return f.nodes }

// Node is the node named name, or nil.
func (f *Formation) Node(name string) *Node {
	for _, n := range f.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// URL is the formation's multi-host connection string, as `pg_autoctl show
// uri` gives it with a user and a connect timeout added (it has neither):
// both nodes, target_session_attrs=read-write, so a new connection finds
// whichever node is primary now.
func (f *Formation) URL() string {
	var hosts []string
	for _, n := range f.nodes {
		hosts = append(hosts, n.Addr())
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") + "/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=5"
}

func (f *Formation) monitorURL(role string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/pg_auto_failover?sslmode=disable", role, f.monPt)
}

// NodeState is one node as the monitor sees it.
type NodeState struct {
	Name     string `json:"nodename"`
	Port     int    `json:"nodeport"`
	Reported string `json:"current_group_state"`
	Assigned string `json:"assigned_group_state"`
	LSN      string `json:"reported_lsn"`
	Health   int    `json:"health"`
}

// State is every node's state, from the monitor.
func (f *Formation) State(ctx context.Context) ([]NodeState, error) {
	out, err := f.output(ctx, "show", "state", "--pgdata", filepath.Join(f.dir, "monitor"), "--json")
	if err != nil {
		return nil, err
	}
	var s []NodeState
	if err := json.Unmarshal(out, &s); err != nil {
		return nil, fmt.Errorf("pg_autoctl show state: %w: %s", err, out)
	}
	return s, nil
}

// Stable waits until one node is primary and the other secondary, both as
// assigned and both passing the monitor's health check, and returns the
// primary.
func (f *Formation) Stable(ctx context.Context) (*Node, error) {
	var primary string
	err := f.waitFor(ctx, "one primary and one secondary", func(s []NodeState) bool {
		primary = ""
		secondaries := 0
		for _, n := range s {
			switch {
			case n.Health != 1:
				return false // the monitor's health check fails on it
			case n.Reported == "primary" && n.Assigned == "primary":
				primary = n.Name
			case n.Reported == "secondary" && n.Assigned == "secondary":
				secondaries++
			}
		}
		return primary != "" && secondaries == len(s)-1
	})
	if err != nil {
		return nil, err
	}
	return f.Node(primary), nil
}

// Writable waits until some node other than old is assigned and reports a
// writable state (primary, or wait_primary while its standby is away) and
// returns it: the moment a failover has promoted the standby.
func (f *Formation) Writable(ctx context.Context, old *Node) (*Node, error) {
	var name string
	err := f.waitFor(ctx, "a node other than "+old.Name+" writable", func(s []NodeState) bool {
		for _, n := range s {
			if n.Name != old.Name && writable(n.Reported) && writable(n.Assigned) {
				name = n.Name
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	return f.Node(name), nil
}

func writable(state string) bool { return state == "primary" || state == "wait_primary" }

// Switchover performs a planned switchover (pg_autoctl perform switchover)
// and returns once the monitor reports it done.
func (f *Formation) Switchover(ctx context.Context) error {
	return f.perform(ctx, "switchover")
}

// perform runs pg_autoctl perform switchover or failover on the monitor.
// The monitor's perform_failover can deadlock with a keeper's report
// landing at the same moment (PostgreSQL then rolls its transaction back
// whole, and nothing changed): that one error is tried again, a few
// times, after a pause.
func (f *Formation) perform(ctx context.Context, what string) error {
	for attempt := 1; ; attempt++ {
		_, err := f.output(ctx, "perform", what, "--pgdata", filepath.Join(f.dir, "monitor"))
		if err == nil || attempt == 5 || !strings.Contains(err.Error(), "deadlock detected") {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
}

// Events is the monitor's event log, newest last (pg_autoctl show
// events): what to print when a scenario fails.
func (f *Formation) Events(ctx context.Context) string {
	out, err := f.output(ctx, "show", "events", "--count", "40", "--pgdata", filepath.Join(f.dir, "monitor"))
	if err != nil {
		return err.Error()
	}
	return string(out)
}

// Event is one of the monitor's events: a node reporting a state, or the
// monitor assigning one.
type Event struct {
	At       time.Time `json:"eventtime"`
	Node     string    `json:"nodename"`
	Reported string    `json:"reportedstate"`
	Assigned string    `json:"goalstate"`
}

// EventList is the monitor's last count events, oldest first.
func (f *Formation) EventList(ctx context.Context, count int) ([]Event, error) {
	out, err := f.output(ctx, "show", "events", "--count", strconv.Itoa(count), "--pgdata", filepath.Join(f.dir, "monitor"), "--json")
	if err != nil {
		return nil, err
	}
	var evs []Event
	if err := json.Unmarshal(out, &evs); err != nil {
		return nil, fmt.Errorf("pg_autoctl show events: %w: %s", err, out)
	}
	slices.SortStableFunc(evs, func(a, b Event) int { return a.At.Compare(b.At) })
	return evs, nil
}

// Failover has the monitor fail the primary over to its standby now
// (pg_autoctl perform failover), as an operator does when the primary is
// up but unreachable for its clients, and returns once it is done.
func (f *Formation) Failover(ctx context.Context) error {
	return f.perform(ctx, "failover")
}

// SetSynchronous makes node n's replication synchronous (it takes part in
// the primary's quorum: a commit waits for it, the formation's default) or
// asynchronous (pg_autoctl set node replication-quorum): a commit is then
// acknowledged before the standby has it, and a failover loses the
// commits still in flight.
func (f *Formation) SetSynchronous(ctx context.Context, n *Node, on bool) error {
	_, err := f.output(ctx, "set", "node", "replication-quorum", "--pgdata", n.data, strconv.FormatBool(on))
	return err
}

// Kill kills node n outright: its keeper and its postmaster (SIGKILL to
// the process group), as a machine lost would. The node stays down until
// Restart.
func (f *Formation) Kill(n *Node) error {
	n.mu.Lock()
	k := n.keeper
	n.keeper = nil
	n.mu.Unlock()
	if k == nil {
		return fmt.Errorf("%s is down already", n.Name)
	}
	k.kill()
	// The postmaster is in the keeper's group; if it left it, its pid file
	// still names it.
	if pid, ok := postmasterPID(n.data); ok {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	fmt.Fprintf(f.log, "formation: %s killed (keeper and postmaster)\n", n.Name)
	return nil
}

// KillPostmaster sends SIGKILL to node n's postmaster only: its keeper
// lives on and restarts PostgreSQL in place (crash recovery), and the
// monitor fails over only if that takes longer than its unhealthy timeout.
func (f *Formation) KillPostmaster(n *Node) error {
	pid, ok := postmasterPID(n.data)
	if !ok {
		return fmt.Errorf("%s: no postmaster.pid", n.Name)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("%s: kill postmaster %d: %w", n.Name, pid, err)
	}
	fmt.Fprintf(f.log, "formation: %s's postmaster (pid %d) killed\n", n.Name, pid)
	return nil
}

// PostmasterPID is the pid in node n's postmaster.pid (0 when there is
// none): it changes when the keeper restarts PostgreSQL in place.
func (n *Node) PostmasterPID() int {
	pid, _ := postmasterPID(n.data)
	return pid
}

// Restart starts a killed node's keeper again: it rejoins the formation
// (as a secondary, rewinding if it has to).
func (f *Formation) Restart(n *Node) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.keeper != nil {
		return fmt.Errorf("%s is running", n.Name)
	}
	k, err := f.spawn(n.Name, "run", "--pgdata", n.data)
	if err != nil {
		return err
	}
	n.keeper = k
	return nil
}

// Stop kills every process of the formation and removes its directory. It
// is safe to call more than once, and after a failed start.
func (f *Formation) Stop() {
	f.once.Do(func() {
		for _, n := range f.nodes {
			n.mu.Lock()
			if n.keeper != nil {
				n.keeper.kill()
				n.keeper = nil
			}
			n.mu.Unlock()
			if pid, ok := postmasterPID(n.data); ok {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if f.mon != nil {
			f.mon.kill()
			if pid, ok := postmasterPID(filepath.Join(f.dir, "monitor")); ok {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if f.dir != "" {
			// Backends orphaned by a killed postmaster exit on their own
			// (they watch for its death); their files may linger a moment.
			var err error
			for range 50 {
				if err = os.RemoveAll(f.dir); err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				fmt.Fprintf(f.log, "formation: remove %s: %v\n", f.dir, err)
			}
		}
	})
}

// waitFor polls the monitor until cond holds or ctx ends.
func (f *Formation) waitFor(ctx context.Context, what string, cond func([]NodeState) bool) error {
	var last []NodeState
	var lastErr error
	for {
		s, err := f.State(ctx)
		if err == nil {
			last = s
			if cond(s) {
				return nil
			}
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("formation: waiting for %s: %w (last state %+v, last error %v)", what, ctx.Err(), last, lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func find(s []NodeState, name string) (NodeState, bool) {
	for _, n := range s {
		if n.Name == name {
			return n, true
		}
	}
	return NodeState{}, false
}

// process is a long-running pg_autoctl (a monitor or a node's keeper) in a
// process group of its own.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

func (p *process) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	p.log.Close()
}

// spawn starts pg_autoctl args in the background, its output appended to
// name.log in the formation's directory.
func (f *Formation) spawn(name string, args ...string) (*process, error) {
	logf, err := os.OpenFile(filepath.Join(f.dir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := f.command(args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("pg_autoctl %s: %w", strings.Join(args[:2], " "), err)
	}
	p := &process{cmd: cmd, done: make(chan struct{}), log: logf}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// run runs pg_autoctl args to its end.
func (f *Formation) run(ctx context.Context, args ...string) error {
	_, err := f.output(ctx, args...)
	return err
}

func (f *Formation) output(ctx context.Context, args ...string) ([]byte, error) {
	cmd := f.command(args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		case <-done:
		}
	}()
	err := cmd.Wait()
	close(done)
	if err != nil {
		return nil, fmt.Errorf("pg_autoctl %s: %w: %s", strings.Join(args[:2], " "), err, tail(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

func (f *Formation) command(args ...string) *exec.Cmd {
	cmd := exec.Command(Program, args...)
	cmd.Dir = f.dir
	cmd.Env = f.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: f.cred}
	return cmd
}

// postmasterPID reads the first line of data/postmaster.pid.
func postmasterPID(data string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	return pid, err == nil && pid > 0
}

func appendFile(name, text string) error {
	fh, err := os.OpenFile(name, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = fh.WriteString(text)
	return errors.Join(err, fh.Close())
}

func tail(out []byte) string {
	const keep = 2000
	s := strings.TrimSpace(string(out))
	if len(s) > keep {
		s = "…" + s[len(s)-keep:]
	}
	return s
}
