package bench

import (
	"context"
	"time"
)

// EnqueueResult is COPY batches and single transactional enqueues.
type EnqueueResult struct {
	CopyJobs          int     `json:"copy_jobs"`
	CopyBatchSize     int     `json:"copy_batch_size"`
	CopyJobsPerSecond float64 `json:"copy_jobs_per_second"`
	Singles           int     `json:"singles"`
	SingleP50Ms       float64 `json:"single_p50_ms"`
	SingleP99Ms       float64 `json:"single_p99_ms"`
}

func runEnqueue(ctx context.Context, cfg Config) (*EnqueueResult, error) {
	s, err := newScratch(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	r := &EnqueueResult{CopyJobs: cfg.Jobs, CopyBatchSize: cfg.BatchSize, Singles: cfg.Singles}
	began := time.Now()
	if err := enqueueCopy(ctx, s.pool, noop, cfg.Jobs, cfg.BatchSize, cfg.payload()); err != nil {
		return nil, err
	}
	r.CopyJobsPerSecond = float64(cfg.Jobs) / time.Since(began).Seconds()

	lat := make([]time.Duration, 0, cfg.Singles)
	payload := cfg.payload()
	for range cfg.Singles {
		t0 := time.Now()
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		if _, err := noop.Enqueue(ctx, tx, payload); err != nil {
			_ = tx.Rollback(ctx)
			return nil, err
		}
		if err := tx.Commit(ctx); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t0))
	}
	r.SingleP50Ms, r.SingleP99Ms = ms(percentile(lat, 50)), ms(percentile(lat, 99))
	return r, nil
}
