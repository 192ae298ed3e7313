package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// LatencyResult is pickup latency at idle: enqueue commit to handler start.
type LatencyResult struct {
	Samples int     `json:"samples"`
	P50Ms   float64 `json:"p50_ms"`
	P95Ms   float64 `json:"p95_ms"`
	P99Ms   float64 `json:"p99_ms"`
}

func runLatency(ctx context.Context, cfg Config) (*LatencyResult, error) {
	s, err := newScratch(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	started := make(chan time.Time, 1)
	w, err := worker.New(s.pool, worker.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	if err := worker.Handle(w, noop, func(context.Context, *jobs.Job[benchJob]) error {
		started <- time.Now()
		return nil
	}); err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(runCtx) }()
	defer func() { stop(); <-errc }()
	time.Sleep(200 * time.Millisecond) // let it reach idle

	lat := make([]time.Duration, 0, cfg.Samples)
	for range cfg.Samples {
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		if _, err := noop.Enqueue(ctx, tx, benchJob{}); err != nil {
			return nil, err
		}
		if err := tx.Commit(ctx); err != nil {
			return nil, err
		}
		committed := time.Now()
		select {
		case at := <-started:
			lat = append(lat, max(at.Sub(committed), 0))
		case <-time.After(time.Minute): // a stuck worker, not a slow one
			return nil, fmt.Errorf("a job was not picked up within a minute")
		case err := <-errc:
			return nil, fmt.Errorf("worker stopped: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // idle again
	}
	return &LatencyResult{Samples: len(lat), P50Ms: ms(percentile(lat, 50)), P95Ms: ms(percentile(lat, 95)), P99Ms: ms(percentile(lat, 99))}, nil
}
