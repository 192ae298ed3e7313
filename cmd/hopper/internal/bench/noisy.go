package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// NoisyReport is the noisy-neighbour mode: the same flood worked with
// fairness off (strict priority, run_at, id) and on.
type NoisyReport struct {
	Off *NoisyResult `json:"fairness_off"`
	On  *NoisyResult `json:"fairness_on"`
}

// NoisyResult is one run: tenant A's flood is draining when its neighbours
// enqueue; their jobs are timed from their enqueue's commit.
type NoisyResult struct {
	Fair          bool `json:"fair"`
	Flood         int  `json:"flood"`
	Neighbours    int  `json:"neighbours"`
	NeighbourJobs int  `json:"neighbour_jobs"`
	// The neighbours' pickup latency (commit to handler start), and the
	// time from the commit to the last neighbour job's end.
	PickupP50Ms    float64 `json:"pickup_p50_ms"`
	PickupP99Ms    float64 `json:"pickup_p99_ms"`
	PickupMaxMs    float64 `json:"pickup_max_ms"`
	CompletedAfter float64 `json:"completed_after_seconds"`
	// A's jobs worked per second from the neighbours' commit until they
	// were done (at least a second), and A's jobs still waiting or running
	// when they were.
	FloodPerSecond float64 `json:"flood_worked_per_second"`
	FloodLeft      int64   `json:"flood_left"`
}

func runNoisy(ctx context.Context, cfg Config, logf func(string, ...any)) (*NoisyReport, error) {
	r := &NoisyReport{}
	var err error
	if r.Off, err = noisyOnce(ctx, cfg, false); err != nil {
		return r, fmt.Errorf("fairness off: %w", err)
	}
	logf("  fairness off: neighbours done %.2fs after their enqueue", r.Off.CompletedAfter)
	if r.On, err = noisyOnce(ctx, cfg, true); err != nil {
		return r, fmt.Errorf("fairness on: %w", err)
	}
	return r, nil
}

func noisyOnce(ctx context.Context, cfg Config, fair bool) (*NoisyResult, error) {
	s, err := newScratch(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	wcfg := cfg
	wcfg.Concurrency, wcfg.HandlerTime, wcfg.keep = cfg.NoisyConcurrency, cfg.NoisyHandlerTime, 0
	wcfg.flow = workerFlow{fair: fair}
	p, err := startWorkers(wcfg, s.url, wcfg.workerLabel("noisy"))
	if err != nil {
		return nil, err
	}
	defer func() { _, _ = p.stop() }()

	// The flood, all at once (COPY in large batches), then the neighbours
	// once the workers are busy with it.
	flood := jobs.Items(repeat(cfg.payload(), min(cfg.Flood, 5000))...)
	for i := range flood {
		flood[i].Options = []jobs.EnqueueOption{jobs.ConcurrencyKey(tenant(0))}
	}
	for left := cfg.Flood; left > 0; left -= len(flood) {
		if _, err := noop.EnqueueMany(ctx, s.pool, flood[:min(len(flood), left)]); err != nil {
			return nil, err
		}
	}
	busy := int64(min(1000, cfg.Flood/4))
	if err := waitFor(ctx, p, func() bool { return p.completed.Load() >= busy }); err != nil {
		return nil, err
	}
	total := cfg.Neighbours * cfg.NeighbourJobs
	neighbours := make([]jobs.Item[benchJob], 0, total)
	for n := 1; n <= cfg.Neighbours; n++ {
		for range cfg.NeighbourJobs {
			neighbours = append(neighbours, jobs.Item[benchJob]{Payload: cfg.payload(), Options: []jobs.EnqueueOption{jobs.ConcurrencyKey(tenant(n))}})
		}
	}
	if _, err := traced.EnqueueMany(ctx, s.pool, neighbours); err != nil {
		return nil, err
	}
	committed, completedThen := time.Now(), p.completed.Load()

	if err := waitFor(ctx, p, func() bool { return p.traced() >= total }); err != nil {
		return nil, err
	}
	left, err := keyLeft(ctx, s.pool, tenant(0))
	if err != nil {
		return nil, err
	}
	// A's rate over at least a second (the counters move every 50ms).
	if err := waitFor(ctx, p, func() bool {
		return time.Since(committed) >= time.Second || p.completed.Load() >= int64(cfg.Flood+total)
	}); err != nil {
		return nil, err
	}
	doneAt, completedNow := time.Now(), p.completed.Load()
	r := &NoisyResult{Fair: fair, Flood: cfg.Flood, Neighbours: cfg.Neighbours, NeighbourJobs: cfg.NeighbourJobs, FloodLeft: left}
	pickups := make([]time.Duration, 0, total)
	var last time.Time
	p.mu.Lock()
	for _, tr := range p.traces {
		pickups = append(pickups, max(tr.Started.Sub(committed), 0))
		if tr.Ended.After(last) {
			last = tr.Ended
		}
	}
	p.mu.Unlock()
	r.PickupP50Ms, r.PickupP99Ms, r.PickupMaxMs = ms(percentile(pickups, 50)), ms(percentile(pickups, 99)), ms(percentile(pickups, 100))
	r.CompletedAfter = last.Sub(committed).Seconds()
	r.FloodPerSecond = float64(max(completedNow-completedThen-int64(total), 0)) / doneAt.Sub(committed).Seconds()
	return r, nil
}

// traced is how many traced jobs the process has reported.
func (p *workerProc) traced() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.traces)
}

// waitFor polls done every 5ms until it holds, the process dies or ctx
// ends. A benchmark waits as long as its work takes.
func waitFor(ctx context.Context, p *workerProc, done func() bool) error {
	for !done() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.exited:
			return fmt.Errorf("worker process died")
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// keyLeft is the jobs of a concurrency key not done yet.
func keyLeft(ctx context.Context, pool *pgxpool.Pool, key string) (int64, error) {
	keys, err := hopper.NewClient(pool).ListKeys(ctx, jobs.DefaultQueue, hopper.MaxKeysLimit)
	if err != nil {
		return 0, err
	}
	for _, k := range keys {
		if k.Key == key {
			return k.Ready + k.Running + k.Scheduled, nil
		}
	}
	return 0, nil
}
