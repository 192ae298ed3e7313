package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/internal/pgurl"
	"github.com/hopperq/hopper/internal/testbed/citusbed"
	"github.com/hopperq/hopper/internal/testbed/pgcluster"
)

// CitusOptions shape the citus mode: the same drain on plain PostgreSQL
// and on a Citus formation started for the run (a coordinator and two
// worker nodes, internal/testbed/citusbed), in turn, Rounds times.
type CitusOptions struct {
	Jobs   int `json:"jobs"`   // each run's backlog, split evenly over its shards
	Rounds int `json:"rounds"` // every setup's run, repeated in turn
}

// CitusRun is one drain of a setup.
type CitusRun struct {
	Setup         string  `json:"setup"`
	Round         int     `json:"round"`
	Shards        int     `json:"shards"`
	Nodes         int     `json:"nodes"`  // worker nodes holding the shards (0: plain PostgreSQL)
	Pinned        bool    `json:"pinned"` // each worker node's processes on a core of its own
	Jobs          int     `json:"jobs"`
	Seconds       float64 `json:"seconds"`
	JobsPerSecond float64 `json:"jobs_per_second"`
	// CPUPer1000 is each server's PostgreSQL CPU seconds per 1,000 jobs it
	// took part in: plain and the coordinator all of them, a worker node
	// those of the shards it holds.
	CPUPer1000 map[string]float64 `json:"postgres_cpu_seconds_per_1000_jobs"`
}

// CitusResult is the citus mode's runs and the ratios of their medians
// that issue 64's aims name.
type CitusResult struct {
	Version string     `json:"citus_version"`
	Runs    []CitusRun `json:"runs"`
	// OneShardToPlain: one shard's jobs/s on Citus over plain PostgreSQL's
	// (the aim: at least 0.7).
	OneShardToPlain float64 `json:"one_shard_to_plain"`
	// NodeCPUTwoToOne: with two shards on two nodes, the larger of the two
	// nodes' CPU per 1,000 jobs, over the one node's with both shards on it
	// (the aim: at most 1.2, so that capacity adds up node by node).
	NodeCPUTwoToOne float64 `json:"node_cpu_two_nodes_to_one"`
	// PinnedTwoToOne: jobs/s with each node pinned to a core of its own,
	// two shards on two nodes over two shards on one node.
	PinnedTwoToOne float64 `json:"pinned_two_nodes_to_one"`
}

// citusSetup is where one run's shards live: nodes[i] is shard i's worker
// node (an index into the formation's workers); nil is plain PostgreSQL.
type citusSetup struct {
	label  string
	nodes  []int
	pinned bool
	// direct: each shard's worker process connects to the shard's node,
	// not to the coordinator (Citus syncs its metadata to every node, and
	// a node runs a statement on a schema it holds itself, locally).
	direct bool
}

var citusSetups = []citusSetup{
	{label: "plain PostgreSQL"},
	{label: "Citus, 1 shard", nodes: []int{0}},
	{label: "Citus, 2 shards on 1 node", nodes: []int{0, 0}},
	{label: "Citus, 2 shards on 2 nodes", nodes: []int{0, 1}},
	{label: "Citus, 1 shard, worker on its node", nodes: []int{0}, direct: true},
	{label: "Citus, 2 shards on 2 nodes, workers on their nodes", nodes: []int{0, 1}, direct: true},
	{label: "Citus, 2 shards on 1 node, pinned", nodes: []int{0, 0}, pinned: true},
	{label: "Citus, 2 shards on 2 nodes, pinned", nodes: []int{0, 1}, pinned: true},
}

// citusBed is the run's servers: a plain cluster and a formation, each
// started with production defaults.
type citusBed struct {
	plain     *pgcluster.Cluster
	formation *citusbed.Formation
	names     map[*pgcluster.Cluster]string
}

func runCitus(ctx context.Context, cfg Config, logf func(string, ...any)) (_ *CitusResult, err error) {
	o := cfg.Citus
	if o.Jobs < 2 || o.Rounds < 1 {
		return nil, fmt.Errorf("citus: jobs (at least 2) and rounds (at least 1) are needed")
	}
	b := &citusBed{}
	if b.plain, err = pgcluster.Start(ctx, cfg.Log); err != nil {
		return nil, fmt.Errorf("plain cluster: %w", err)
	}
	defer b.plain.Stop()
	if b.formation, err = citusbed.Start(ctx, citusbed.Options{Log: cfg.Log}); err != nil {
		return nil, fmt.Errorf("citus formation: %w", err)
	}
	defer b.formation.Stop()
	b.names = map[*pgcluster.Cluster]string{b.plain: "plain", b.formation.Coordinator: "coordinator"}
	for i, w := range b.formation.Workers {
		b.names[w] = fmt.Sprintf("node %d", i+1)
	}
	setups := citusSetups
	if runtime.NumCPU() < 2 {
		logf("citus: one core: the pinned runs are left out")
		setups = slices.DeleteFunc(slices.Clone(setups), func(s citusSetup) bool { return s.pinned })
	}
	r := &CitusResult{Version: b.formation.Version}
	for round := 1; round <= o.Rounds; round++ {
		for _, s := range setups {
			logf("citus: round %d, %s: a drain of %d jobs", round, s.label, o.Jobs)
			run, err := b.drain(ctx, cfg, s)
			if err != nil {
				return r, fmt.Errorf("%s, round %d: %w", s.label, round, err)
			}
			run.Round = round
			r.Runs = append(r.Runs, *run)
		}
	}
	r.ratios()
	return r, nil
}

// drain runs one setup's drain: its shards created and placed, the jobs
// enqueued through the coordinator (or into the plain schema), then a
// worker process per shard until every job is done, the servers' CPU
// measured meanwhile.
func (b *citusBed) drain(ctx context.Context, cfg Config, s citusSetup) (_ *CitusRun, err error) {
	servers := []*pgcluster.Cluster{b.plain}
	if s.nodes != nil {
		servers = append([]*pgcluster.Cluster{b.formation.Coordinator}, b.formation.Workers...)
	}
	if s.pinned {
		if err := b.pin(); err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, b.unpin()) }()
	}
	shards, err := b.shards(ctx, s)
	defer func() {
		for _, sh := range shards {
			sh.drop()
		}
	}()
	if err != nil {
		return nil, err
	}
	o := cfg.Citus
	jobsOn := map[*pgcluster.Cluster]int{}
	for i, sh := range shards {
		share := o.Jobs / len(shards)
		if i < o.Jobs%len(shards) {
			share++
		}
		if err := enqueueSpread(ctx, sh.pool, share, queueNames(0), cfg.payload()); err != nil {
			return nil, err
		}
		if err := maintain(ctx, sh.pool, "vacuum.sql"); err != nil {
			return nil, err
		}
		if s.nodes != nil {
			jobsOn[b.formation.Workers[s.nodes[i]]] += share
		}
	}
	meters := map[*pgcluster.Cluster]*pgMeter{}
	for _, c := range servers {
		pid, err := c.PID()
		if err != nil {
			return nil, err
		}
		meters[c] = startMeterOf(clusterProcs(pid))
	}
	began := time.Now()
	if err := drainAll(ctx, cfg, shards); err != nil {
		for _, m := range meters {
			m.seconds()
		}
		return nil, err
	}
	secs := time.Since(began).Seconds()
	run := &CitusRun{Setup: s.label, Shards: len(shards), Nodes: countNodes(s.nodes), Pinned: s.pinned, Jobs: o.Jobs,
		Seconds: secs, JobsPerSecond: float64(o.Jobs) / secs, CPUPer1000: map[string]float64{}}
	for c, m := range meters {
		cpu, _ := m.seconds()
		jobs := o.Jobs
		if s.nodes != nil && c != b.formation.Coordinator {
			jobs = jobsOn[c]
		}
		if jobs > 0 {
			run.CPUPer1000[b.names[c]] = 1000 * cpu / float64(jobs)
		}
	}
	return run, nil
}

// shards creates a setup's scratch schemas: one plain schema, or one
// distributed schema per shard, its enqueue trigger quiet and the schema
// moved to its node when Citus placed it elsewhere.
func (b *citusBed) shards(ctx context.Context, s citusSetup) ([]*scratch, error) {
	if s.nodes == nil {
		sh, err := newScratch(ctx, b.plain.URL())
		if err != nil {
			return nil, err
		}
		return []*scratch{sh}, nil
	}
	var out []*scratch
	for _, node := range s.nodes {
		sh, err := createScratch(ctx, b.formation.URL(), map[string]string{"citus.enable_schema_based_sharding": "on"})
		if err != nil {
			return out, err
		}
		out = append(out, sh)
		if err := quiet(ctx, sh.pool); err != nil {
			return out, err
		}
		if err := b.place(ctx, sh, b.formation.Workers[node].Port()); err != nil {
			return out, err
		}
		if s.direct {
			sh.url = pgurl.WithSearchPath(b.formation.Workers[node].URL(), sh.name)
		}
	}
	return out, nil
}

// quiet disables a distributed scratch schema's enqueue trigger's NOTIFY
// (sql/citus_quiet.sql says why).
func quiet(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, name := range []string{"citus_unsafe_triggers.sql", "citus_quiet.sql"} {
			stmt, err := benchSQL.ReadFile("sql/" + name)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, string(stmt)); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		return nil
	})
}

// place moves a distributed scratch schema to the node on port, unless
// it is there.
func (b *citusBed) place(ctx context.Context, sh *scratch, port int) error {
	where, err := benchSQL.ReadFile("sql/citus_shard_port.sql")
	if err != nil {
		return err
	}
	var at int
	if err := sh.pool.QueryRow(ctx, string(where), sh.name+".hopper_jobs").Scan(&at); err != nil {
		return fmt.Errorf("the node of %s: %w", sh.name, err)
	}
	if at == port {
		return nil
	}
	move, err := benchSQL.ReadFile("sql/citus_schema_move.sql")
	if err != nil {
		return err
	}
	if _, err := sh.pool.Exec(ctx, string(move), sh.name, port); err != nil {
		return fmt.Errorf("move %s to the node on %d: %w", sh.name, port, err)
	}
	return nil
}

// drainAll starts a worker process per shard and waits until each has
// worked its shard's jobs, then checks every shard's table.
func drainAll(ctx context.Context, cfg Config, shards []*scratch) error {
	procs := make([]*workerProc, 0, len(shards))
	stopAll := func() {
		for _, p := range procs {
			_, _ = p.stop()
		}
	}
	for i, sh := range shards {
		p, err := startWorkers(cfg, sh.url, cfg.workerLabel(fmt.Sprintf("citus-%d", i)))
		if err != nil {
			stopAll()
			return err
		}
		procs = append(procs, p)
	}
	enqueued := make([]int64, len(shards))
	for i, sh := range shards {
		live, _, err := TableCounts(ctx, sh.pool)
		if err != nil {
			stopAll()
			return err
		}
		enqueued[i] = live
	}
	for i, p := range procs {
		if err := waitWorked(ctx, p, shards[i].pool, enqueued[i], 0); err != nil {
			stopAll()
			return fmt.Errorf("%s: %w", shards[i].name, err)
		}
	}
	for i, p := range procs {
		if _, err := p.stop(); err != nil {
			stopAll()
			return err
		}
		if err := checkTable(ctx, shards[i].pool, p, enqueued[i], 0); err != nil {
			stopAll()
			return fmt.Errorf("%s: %w", shards[i].name, err)
		}
	}
	return nil
}

// waitWorked waits until p has reported n jobs done and, when some
// acknowledgement is unconfirmed (it may not have committed, and the job
// then runs again once its lease expires), until the table holds only the
// scheduled jobs it held before: the table has the last word.
func waitWorked(ctx context.Context, p *workerProc, pool *pgxpool.Pool, n, scheduled int64) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.exited:
			_ = p.cmd.Wait()
			return fmt.Errorf("worker process died")
		case <-time.After(5 * time.Millisecond):
		}
		if p.finished() < n {
			continue
		}
		if p.unconfirmed.Load() == 0 {
			return nil
		}
		live, _, err := TableCounts(ctx, pool)
		if err != nil {
			return err
		}
		if live == scheduled {
			return nil
		}
	}
}

// pin puts each worker node's processes on a core of its own (node i on
// core i): the postmaster's children forked later inherit it.
func (b *citusBed) pin() error {
	for i, w := range b.formation.Workers {
		if err := b.affinity(w, fmt.Sprint(i%runtime.NumCPU())); err != nil {
			return err
		}
	}
	return nil
}

// unpin gives the worker nodes' processes every core again.
func (b *citusBed) unpin() error {
	var errs []error
	for _, w := range b.formation.Workers {
		errs = append(errs, b.affinity(w, fmt.Sprintf("0-%d", runtime.NumCPU()-1)))
	}
	return errors.Join(errs...)
}

// affinity sets the CPU list of a cluster's processes with taskset.
func (b *citusBed) affinity(c *pgcluster.Cluster, cpus string) error {
	pid, err := c.PID()
	if err != nil {
		return err
	}
	for p := range clusterProcs(pid)() {
		out, err := exec.Command("taskset", "-p", "-c", cpus, fmt.Sprint(p)).CombinedOutput()
		// A backend may exit between the listing and taskset.
		if err != nil && p == pid {
			return fmt.Errorf("taskset %s %s: %w: %s", cpus, b.names[c], err, out)
		}
	}
	return nil
}

func countNodes(nodes []int) int {
	seen := map[int]bool{}
	for _, n := range nodes {
		seen[n] = true
	}
	return len(seen)
}

// ratios sets the aims' ratios from the medians over the rounds.
func (r *CitusResult) ratios() {
	median := func(setup string, value func(CitusRun) float64) float64 {
		var v []float64
		for _, run := range r.Runs {
			if run.Setup == setup {
				v = append(v, value(run))
			}
		}
		if len(v) == 0 {
			return 0
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	rate := func(run CitusRun) float64 { return run.JobsPerSecond }
	if plain := median("plain PostgreSQL", rate); plain > 0 {
		r.OneShardToPlain = median("Citus, 1 shard", rate) / plain
	}
	one := median("Citus, 2 shards on 1 node", func(run CitusRun) float64 { return run.CPUPer1000["node 1"] })
	two := median("Citus, 2 shards on 2 nodes", func(run CitusRun) float64 {
		return max(run.CPUPer1000["node 1"], run.CPUPer1000["node 2"])
	})
	if one > 0 {
		r.NodeCPUTwoToOne = two / one
	}
	if pinnedOne := median("Citus, 2 shards on 1 node, pinned", rate); pinnedOne > 0 {
		r.PinnedTwoToOne = median("Citus, 2 shards on 2 nodes, pinned", rate) / pinnedOne
	}
}

// Print writes the runs and the ratios.
func (r *CitusResult) Print(w io.Writer) {
	fmt.Fprintf(w, "citus (%s): drains on plain PostgreSQL and on a formation, in turn\n", r.Version)
	fmt.Fprintf(w, "  %-50s %5s %8s %8s %12s %12s %12s %12s\n", "setup", "round", "jobs", "jobs/s", "plain", "coordinator", "node 1", "node 2")
	cpu := func(run CitusRun, server string) string {
		if v, ok := run.CPUPer1000[server]; ok {
			return fmt.Sprintf("%.3f", v)
		}
		return "-"
	}
	for _, run := range r.Runs {
		fmt.Fprintf(w, "  %-50s %5d %8d %8.0f %12s %12s %12s %12s\n", run.Setup, run.Round, run.Jobs, run.JobsPerSecond,
			cpu(run, "plain"), cpu(run, "coordinator"), cpu(run, "node 1"), cpu(run, "node 2"))
	}
	fmt.Fprintf(w, "  (PostgreSQL CPU seconds per 1,000 jobs each server took part in)\n")
	fmt.Fprintf(w, "  one shard on Citus / plain PostgreSQL, jobs/s: %.2f (aim: at least 0.7)\n", r.OneShardToPlain)
	fmt.Fprintf(w, "  a node's CPU per 1,000 jobs, shards on two nodes / on one: %.2f (aim: at most 1.2)\n", r.NodeCPUTwoToOne)
	if r.PinnedTwoToOne > 0 {
		fmt.Fprintf(w, "  pinned, jobs/s, shards on two nodes / on one: %.2f\n", r.PinnedTwoToOne)
	}
}
