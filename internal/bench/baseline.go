package bench

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/internal/pgurl"
)

//go:embed sql/*.sql
var benchSQL embed.FS

// BaselineResult is pgbench running the minimal insert / SKIP LOCKED claim
// / delete cycle at the same batch size and duration.
type BaselineResult struct {
	Clients       int     `json:"clients"`
	BatchSize     int     `json:"batch_size"`
	Seconds       float64 `json:"seconds"`
	Inserted      int64   `json:"inserted"`
	Deleted       int64   `json:"deleted"`
	JobsPerSecond float64 `json:"jobs_per_second"`
	// CPU per 1000 jobs, to set beside Hopper's worker and PostgreSQL
	// figures: what the database spends, and what pgbench (the "client")
	// spends.
	PostgresCPUPer1000 float64 `json:"postgres_cpu_seconds_per_1000_jobs,omitempty"`
	ClientCPUPer1000   float64 `json:"pgbench_cpu_seconds_per_1000_jobs"`
}

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
	secs := int(cfg.Duration.Round(time.Second).Seconds())
	args := []string{"-n", "-c", fmt.Sprint(clients), "-j", fmt.Sprint(clients),
		"-T", fmt.Sprint(secs), "-D", fmt.Sprintf("batch=%d", cfg.BatchSize),
		"-f", filepath.Join(dir, "produce.sql") + "@1", "-f", filepath.Join(dir, "claim.sql") + "@1"}
	if cfg.DatabaseURL != "" { // else libpq's defaults, as pgx used
		args = append(args, pgurl.ForLibpq(cfg.DatabaseURL))
	}
	cmd := exec.CommandContext(ctx, pgbench, args...)
	cmd.Env = append(os.Environ(), "PGOPTIONS=-c search_path="+s.name)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	meter := startPGMeter()
	err = cmd.Run()
	pgCPU, pgOK := meter.seconds()
	if err != nil {
		return nil, fmt.Errorf("pgbench: %v: %s", err, lastLines(out.String(), 5))
	}
	clientCPU := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	result, _ := benchSQL.ReadFile("sql/result.sql")
	r := &BaselineResult{Clients: clients, BatchSize: cfg.BatchSize, Seconds: float64(secs)}
	var remaining int64
	if err := s.pool.QueryRow(ctx, string(result)).Scan(&r.Inserted, &remaining); err != nil {
		return nil, err
	}
	r.Deleted = r.Inserted - remaining
	if r.Deleted <= 0 {
		return nil, fmt.Errorf("pgbench moved no jobs: %s", lastLines(out.String(), 5))
	}
	r.JobsPerSecond = float64(r.Deleted) / r.Seconds
	r.ClientCPUPer1000 = 1000 * clientCPU / float64(max(r.Deleted, 1))
	if pgOK {
		r.PostgresCPUPer1000 = 1000 * pgCPU / float64(max(r.Deleted, 1))
	}
	return r, nil
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
