package bench

import (
	"context"
	"fmt"
	"time"
)

// DrainResult is working off a backlog enqueued beforehand.
type DrainResult struct {
	Jobs               int     `json:"jobs"`
	Seconds            float64 `json:"seconds"`
	JobsPerSecond      float64 `json:"jobs_per_second"`
	WorkerPeakRSSBytes int64   `json:"worker_peak_rss_bytes"`
	// Statements is what each of Hopper's statements cost the server
	// during the drain, the most expensive first (pg_stat_statements).
	Statements []StatementCost `json:"statements,omitempty"`
}

func runDrain(ctx context.Context, cfg Config) (*DrainResult, error) {
	s, err := newScratch(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	if err := addScheduled(ctx, s.pool, cfg.Scheduled); err != nil {
		return nil, err
	}
	if cfg.sequenced > 0 {
		err = enqueueSequenced(ctx, s.pool, cfg.Jobs, cfg.sequenced, cfg.payload())
	} else {
		err = enqueueSpread(ctx, s.pool, cfg.Jobs, queueNames(cfg.queues), cfg.payload())
	}
	if err != nil {
		return nil, err
	}
	// What autovacuum does after a burst of inserts: the statistics then
	// describe a table of pending jobs only.
	if err := maintain(ctx, s.pool, "vacuum.sql"); err != nil {
		return nil, err
	}
	statements := newStatementMeter(ctx, s.pool)
	p, err := startWorkers(cfg, s.url, cfg.workerLabel(fmt.Sprintf("drain-%d", cfg.Jobs)))
	if err != nil {
		return nil, err
	}
	began := time.Now()
	if err := waitWorked(ctx, p, s.pool, int64(cfg.Jobs), int64(cfg.Scheduled)); err != nil {
		_, _ = p.stop()
		return nil, err
	}
	secs := time.Since(began).Seconds()
	peak, err := p.stop()
	if err != nil {
		return nil, err
	}
	if err := checkTable(ctx, s.pool, p, int64(cfg.Jobs), cfg.Scheduled); err != nil {
		return nil, err
	}
	return &DrainResult{Jobs: cfg.Jobs, Seconds: secs, JobsPerSecond: float64(cfg.Jobs) / secs, WorkerPeakRSSBytes: peak,
		Statements: statements.costs(ctx)}, nil
}
