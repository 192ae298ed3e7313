package bench

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/internal/pgurl"
)

//go:embed sql/*.sql
var benchSQL embed.FS

// BaselineResult is pgbench running the minimal insert / SKIP LOCKED claim
// / delete cycle at the same batch size and duration. Inserted and Deleted
// come from the table; the transaction counts from pgbench's report.
type BaselineResult struct {
	Clients   int `json:"clients"`
	BatchSize int `json:"batch_size"`
	// Seconds is the time pgbench measured (its transactions over its
	// tps), summed over Rounds: a starved run that moved no job at all is
	// followed by another, so the figure always measures some work.
	Seconds             float64 `json:"seconds"`
	Rounds              int     `json:"rounds"`
	Inserted            int64   `json:"inserted"`
	Deleted             int64   `json:"deleted"`
	ProduceTransactions int64   `json:"produce_transactions"`
	ClaimTransactions   int64   `json:"claim_transactions"`
	FailedTransactions  int64   `json:"failed_transactions"`
	JobsPerSecond       float64 `json:"jobs_per_second"`
	// The steady state, measured as for the continuous run: jobs deleted
	// per window (from the table's statistics), and the mean of the last
	// half of the windows.
	WindowSeconds       float64   `json:"window_seconds,omitempty"`
	Windows             []float64 `json:"windows_jobs_per_second,omitempty"`
	SteadyJobsPerSecond float64   `json:"steady_jobs_per_second,omitempty"`
	// CPU per 1000 jobs, to set beside Hopper's worker and PostgreSQL
	// figures: what the database spends, and what pgbench (the "client")
	// spends.
	PostgresCPUPer1000 float64 `json:"postgres_cpu_seconds_per_1000_jobs,omitempty"`
	ClientCPUPer1000   float64 `json:"pgbench_cpu_seconds_per_1000_jobs"`
}

// maxBaselineRounds bounds the pgbench runs made to see at least one job
// moved: only a broken claim script moves none in that many.
const maxBaselineRounds = 10

func runBaseline(ctx context.Context, cfg Config) (*BaselineResult, error) {
	pgbench, err := exec.LookPath("pgbench")
	if err != nil {
		return nil, fmt.Errorf("pgbench not found (apt install postgresql-client): %w", err)
	}
	s, err := newScratch(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	setup, _ := benchSQL.ReadFile("sql/setup.sql")
	if _, err := s.pool.Exec(ctx, string(setup)); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "hopper-baseline")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	for _, name := range []string{"produce.sql", "claim.sql"} {
		data, _ := benchSQL.ReadFile("sql/" + name)
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return nil, err
		}
	}
	clients := cfg.Producers + cfg.Workers
	secs := max(int(cfg.Duration.Round(time.Second).Seconds()), 1)
	args := []string{"-n", "-c", fmt.Sprint(clients), "-j", fmt.Sprint(clients),
		"-T", fmt.Sprint(secs), "-D", fmt.Sprintf("batch=%d", cfg.BatchSize),
		"-f", filepath.Join(dir, "produce.sql") + "@1", "-f", filepath.Join(dir, "claim.sql") + "@1"}
	if cfg.DatabaseURL != "" { // else libpq's defaults, as pgx used
		args = append(args, pgurl.ForLibpq(cfg.DatabaseURL))
	}
	r := &BaselineResult{Clients: clients, BatchSize: cfg.BatchSize}
	meter := startPGMeter()
	clientCPU, err := baselineRounds(ctx, cfg, s, pgbench, args, secs, r)
	pgCPU, pgOK := meter.seconds()
	if err != nil {
		return nil, err
	}
	r.JobsPerSecond = float64(r.Deleted) / r.Seconds
	r.ClientCPUPer1000 = 1000 * clientCPU / float64(r.Deleted)
	if pgOK {
		r.PostgresCPUPer1000 = 1000 * pgCPU / float64(r.Deleted)
	}
	return r, nil
}

// baselineRounds runs pgbench for secs seconds until the table shows at
// least one job moved (inserted, claimed and deleted), adding each run's
// figures to r, and returns the CPU pgbench spent.
func baselineRounds(ctx context.Context, cfg Config, s *scratch, pgbench string, args []string, secs int, r *BaselineResult) (float64, error) {
	result, _ := benchSQL.ReadFile("sql/result.sql")
	var clientCPU float64
	var out bytes.Buffer
	checkable := true // every report parsed, and no produce transaction failed
	for r.Deleted <= 0 {
		if r.Rounds == maxBaselineRounds {
			return 0, fmt.Errorf("pgbench moved no jobs in %d runs of %ds: %s", r.Rounds, secs, lastLines(out.String(), 5))
		}
		if r.Rounds > 0 {
			fmt.Fprintf(cfg.Log, "baseline: pgbench moved no job in %ds (a starved machine?); running it again\n", secs)
		}
		r.Rounds++
		cmd := exec.CommandContext(ctx, pgbench, args...)
		cmd.Env = append(os.Environ(), "PGOPTIONS=-c search_path="+s.name)
		out.Reset()
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			return 0, fmt.Errorf("pgbench: %w", err)
		}
		ran := make(chan struct{})
		sampled := make(chan []float64, 1)
		go func() { sampled <- sampleDeletes(ctx, s.pool, cfg.window(), cfg.Duration, ran) }()
		err := cmd.Wait()
		close(ran)
		if ws := <-sampled; r.Rounds == 1 {
			r.WindowSeconds, r.Windows, r.SteadyJobsPerSecond = cfg.window().Seconds(), ws, steady(ws)
		}
		if err != nil {
			return 0, fmt.Errorf("pgbench: %v: %s", err, lastLines(out.String(), 5))
		}
		clientCPU += (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
		rep := parsePgbench(out.String())
		produce := rep.scripts["produce.sql"]
		r.ProduceTransactions += produce.transactions
		r.ClaimTransactions += rep.scripts["claim.sql"].transactions
		r.FailedTransactions += rep.failed
		checkable = checkable && rep.parsed && produce.failed == 0
		if rep.seconds > 0 {
			r.Seconds += rep.seconds
		} else { // nothing ran, or a report this parser does not know
			r.Seconds += float64(secs)
		}
		var remaining int64
		if err := s.pool.QueryRow(ctx, string(result)).Scan(&r.Inserted, &remaining); err != nil {
			return 0, err
		}
		r.Deleted = r.Inserted - remaining
		// Every produce transaction inserts batch rows in one statement,
		// so the table and pgbench must agree, give or take the produce
		// transactions the end of the run cut off (one per client at most:
		// their ids were taken from the sequence; counting them as inserted
		// and deleted can only flatter the baseline).
		batch := int64(cfg.BatchSize)
		excess := r.Inserted - r.ProduceTransactions*batch
		if checkable && (excess < 0 || excess%batch != 0 || excess > int64(r.Clients)*batch) {
			return 0, fmt.Errorf("pgbench reports %d produce transactions of %d jobs, the table %d jobs inserted: %s",
				r.ProduceTransactions, cfg.BatchSize, r.Inserted, lastLines(out.String(), 12))
		}
	}
	return clientCPU, nil
}

// pgbenchReport is what runBaseline reads from pgbench's output.
type pgbenchReport struct {
	parsed  bool    // every script's transaction count was found
	failed  int64   // failed transactions, all scripts (pgbench 15+)
	seconds float64 // the time pgbench measured: transactions / tps
	scripts map[string]pgbenchScript
}

type pgbenchScript struct {
	transactions, failed int64
	tps                  float64
	counted              bool
}

var (
	pgbenchScriptRe = regexp.MustCompile(`^SQL script \d+: (.+)$`)
	pgbenchTxRe     = regexp.MustCompile(`^ - (\d+) transactions \(.*tps = ([0-9.]+)\)`)
	pgbenchFailedRe = regexp.MustCompile(`^ - number of failed transactions: (\d+)`)
	pgbenchAllFail  = regexp.MustCompile(`^number of failed transactions: (\d+)`)
)

// parsePgbench reads the per-script sections of a multi-script pgbench
// report:
//
//	SQL script 1: /tmp/…/produce.sql
//	 - weight: 1 (targets 50.0% of total)
//	 - 82 transactions (42.7% of total, tps = 82.280824)
//	 - number of failed transactions: 0 (0.000%)
//
// keyed by the script's file name. The lines before the first script hold
// the totals; only the failed count is taken from them.
func parsePgbench(out string) pgbenchReport {
	rep := pgbenchReport{scripts: map[string]pgbenchScript{}}
	current := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if m := pgbenchScriptRe.FindStringSubmatch(line); m != nil {
			current = filepath.Base(strings.TrimSpace(m[1]))
			continue
		}
		if current == "" {
			if m := pgbenchAllFail.FindStringSubmatch(line); m != nil {
				rep.failed, _ = strconv.ParseInt(m[1], 10, 64)
			}
			continue
		}
		s := rep.scripts[current]
		if m := pgbenchTxRe.FindStringSubmatch(line); m != nil {
			s.transactions, _ = strconv.ParseInt(m[1], 10, 64)
			s.tps, _ = strconv.ParseFloat(m[2], 64)
			s.counted = true
		} else if m := pgbenchFailedRe.FindStringSubmatch(line); m != nil {
			s.failed, _ = strconv.ParseInt(m[1], 10, 64)
		}
		rep.scripts[current] = s
	}
	var n int64
	var tps float64
	rep.parsed = len(rep.scripts) > 0
	for _, s := range rep.scripts {
		rep.parsed = rep.parsed && s.counted
		n += s.transactions
		tps += s.tps
	}
	if n > 0 && tps > 0 {
		rep.seconds = float64(n) / tps
	}
	return rep
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// maintain runs one of the embedded maintenance statements (ANALYZE,
// VACUUM) on the scratch schema's hopper_jobs.
func maintain(ctx context.Context, pool *pgxpool.Pool, name string) error {
	stmt, err := benchSQL.ReadFile("sql/" + name)
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, string(stmt))
	return err
}

// sampleDeletes reads the baseline table's deleted-row count every window
// until done closes or the requested duration is covered, and returns the
// rate per whole window. pgbench's tail (transactions still running when
// -T ran out) is left out, as the continuous run leaves out its own.
func sampleDeletes(ctx context.Context, pool *pgxpool.Pool, window, duration time.Duration, done <-chan struct{}) []float64 {
	stmt, err := benchSQL.ReadFile("sql/baseline_deleted.sql")
	if err != nil {
		return nil
	}
	read := func() (int64, bool) {
		var n int64
		return n, pool.QueryRow(ctx, string(stmt)).Scan(&n) == nil
	}
	last, ok := read()
	if !ok {
		return nil
	}
	t := time.NewTicker(window)
	defer t.Stop()
	var rates []float64
	for {
		select {
		case <-done:
			return rates
		case <-ctx.Done():
			return rates
		case <-t.C:
		}
		n, ok := read()
		if !ok {
			return rates
		}
		rates = append(rates, float64(n-last)/window.Seconds())
		last = n
		if time.Duration(len(rates))*window >= duration {
			<-done // pgbench's tail: not sampled
			return rates
		}
	}
}
