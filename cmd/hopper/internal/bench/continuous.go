package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ContinuousResult is produce + work at once.
type ContinuousResult struct {
	Seconds            float64   `json:"seconds"`
	WorkedPerSecond    float64   `json:"worked_per_second"`
	EnqueuedPerSecond  float64   `json:"enqueued_per_second"`
	Samples            []float64 `json:"samples_worked_per_second"`
	WorkerPeakRSSBytes int64     `json:"worker_peak_rss_bytes"`
	WorkerCPUPer1000   float64   `json:"worker_cpu_seconds_per_1000_jobs"`
	PostgresCPUPer1000 float64   `json:"postgres_cpu_seconds_per_1000_jobs,omitempty"`
	// With a scheduled backlog: the same run again with Scheduled
	// far-future jobs in the table, and how much slower it was.
	BacklogWorkedPerSecond float64 `json:"backlog_worked_per_second,omitempty"`
	BacklogSlowdown        float64 `json:"backlog_slowdown,omitempty"`
	// With history: the same run again with the workers keeping every
	// completed job (Config.History), its steady state, how much slower
	// that is than this run's, and what it cost the server.
	History         *ContinuousResult `json:"history,omitempty"`
	HistorySlowdown float64           `json:"history_slowdown,omitempty"`

	// The steady state: the rate per window of WindowSeconds, and the
	// headline, the mean of the last half of the windows (the first half
	// is warm-up). WorkedPerSecond above is the whole run's mean.
	WindowSeconds         float64   `json:"window_seconds"`
	Windows               []float64 `json:"windows_worked_per_second"`
	SteadyWorkedPerSecond float64   `json:"steady_worked_per_second"`
	LastWindowPerSecond   float64   `json:"last_window_worked_per_second"`
	// ClaimBuffersPerJob is the claim statement's shared buffers (hit or
	// read) per job it claimed, per window, from pg_stat_statements; absent
	// when the server does not load it. A claim that walks dead index
	// entries shows here first.
	ClaimBuffersPerJob []float64 `json:"claim_buffers_per_job,omitempty"`
	// Table is the job table at the end of the run (with the snapshot, if
	// one was held, still open).
	Table *TableStats `json:"table,omitempty"`
	// Statements is what each of Hopper's statements cost the server
	// during the run, the most expensive first (pg_stat_statements).
	Statements []StatementCost `json:"statements,omitempty"`
	// EnqueueRetries counts the producers' batches of sequence jobs refused
	// at commit by the sequence head index and sent again (headRace).
	EnqueueRetries int64 `json:"enqueue_retries,omitempty"`
	// LastMinutePerSecond is the mean rate of the run's last minute.
	LastMinutePerSecond float64 `json:"last_minute_worked_per_second"`
	// The pressure the run was under.
	HoldSnapshot bool `json:"hold_snapshot,omitempty"`
	Burst        int  `json:"burst,omitempty"`
	// With a burst: how long it took to drain (the backlog back to what
	// producers keep) from its commit, and the rate meanwhile.
	BurstDrainSeconds   float64 `json:"burst_drain_seconds,omitempty"`
	BurstDrainPerSecond float64 `json:"burst_drain_worked_per_second,omitempty"`
	// Recovery is every window after a held snapshot was released, with
	// the job table's dead tuples and size at its end.
	Recovery []RecoveryWindow `json:"recovery,omitempty"`
}

func runContinuous(ctx context.Context, cfg Config) (*ContinuousResult, error) {
	r, err := continuousOnce(ctx, cfg, 0)
	if err != nil {
		return r, err
	}
	if cfg.Scheduled > 0 {
		withBacklog, err := continuousOnce(ctx, cfg, cfg.Scheduled)
		if err != nil {
			return r, err
		}
		r.BacklogWorkedPerSecond = withBacklog.WorkedPerSecond
		r.BacklogSlowdown = 1 - withBacklog.WorkedPerSecond/r.WorkedPerSecond
	}
	if cfg.History > 0 {
		kept := cfg
		kept.keep = cfg.History
		if r.History, err = continuousOnce(ctx, kept, 0); err != nil {
			return r, fmt.Errorf("with history: %w", err)
		}
		if r.SteadyWorkedPerSecond > 0 {
			r.HistorySlowdown = 1 - r.History.SteadyWorkedPerSecond/r.SteadyWorkedPerSecond
		}
	}
	return r, nil
}

func continuousOnce(ctx context.Context, cfg Config, scheduled int) (*ContinuousResult, error) {
	s, err := newScratch(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	if err := addScheduled(ctx, s.pool, scheduled); err != nil {
		return nil, err
	}
	if err := addTiers(ctx, s.pool, cfg.tiers, cfg.tierLimit); err != nil {
		return nil, err
	}
	p, err := startWorkers(cfg, s.url, cfg.workerLabel("continuous"))
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = p.stop()
		}
	}()

	var enqueued, enqueueRetries atomic.Int64
	prodCtx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	maxBacklog := int64(max(20*cfg.BatchSize, 4*cfg.Workers*cfg.Concurrency))
	items := keyedItems(cfg.payload(), cfg.BatchSize, cfg.keyed, "key-")
	if cfg.sequenced > 0 {
		items = sequenceItems(cfg.payload(), cfg.BatchSize, cfg.sequenced, "seq-", nil)
	}
	var pwg sync.WaitGroup
	perr := make(chan error, cfg.Producers)
	for range cfg.Producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for prodCtx.Err() == nil {
				if enqueued.Load()-p.finished() > maxBacklog {
					time.Sleep(200 * time.Microsecond)
					continue
				}
				// Not cancelled midway: a batch that commits is counted,
				// so that the table can be checked against the counters.
				res, err := noop.EnqueueMany(context.WithoutCancel(prodCtx), s.pool, items)
				if cfg.sequenced > 0 && headRace(err) {
					enqueueRetries.Add(1) // the batch rolled back: send it again
					continue
				}
				if err != nil {
					perr <- err
					return
				}
				enqueued.Add(int64(res.Inserted))
			}
		}()
	}

	pressure := scheduled == 0 // the backlog run repeats the clean one only
	release := func() {}
	if pressure && cfg.HoldSnapshot {
		rollback, err := holdSnapshot(ctx, s.url)
		if err != nil {
			return nil, err
		}
		release = sync.OnceFunc(rollback)
		defer release()
	}

	// Warm up, then measure for cfg.Duration, and on until a job has been
	// worked: a starved run reports a low figure, not none.
	select {
	case err := <-perr:
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.exited:
		return nil, fmt.Errorf("worker process died")
	case <-time.After(2 * time.Second):
	}
	startDone, startEnq, startAt := p.completed.Load(), enqueued.Load(), time.Now()
	startCPU := p.cpu()
	meter := startPGMeter()
	claims := newClaimMeter(ctx, s.pool)
	statements := newStatementMeter(ctx, s.pool)
	perWindow := max(int(cfg.window().Round(time.Second)/time.Second), 1)
	var claimBuffers []float64
	burstDone := make(chan error, 1)
	// burstAt is when the burst committed (0: not yet), burstFrom the jobs
	// finished then; the burst has drained when the backlog is back to
	// what the producers keep (they pause above maxBacklog).
	var burstAt, burstFrom atomic.Int64
	var burstDrained time.Duration
	var burstDrainedJobs int64
	if pressure && cfg.Burst > 0 {
		go func() {
			select {
			case <-prodCtx.Done():
				burstDone <- nil
				return
			case <-time.After(cfg.Duration / 3):
			}
			// A burst arrives at once: COPY, as an import would. Not cut
			// off midway, so that what committed is counted.
			err := enqueueCopy(context.WithoutCancel(prodCtx), s.pool, noop, cfg.Burst, 5000, cfg.payload())
			if err == nil {
				burstFrom.Store(p.finished())
				enqueued.Add(int64(cfg.Burst))
				burstAt.Store(time.Now().UnixNano())
			}
			burstDone <- err
		}()
	} else {
		burstDone <- nil
	}
	var samples []float64
	last := startDone
	for t := time.Now(); time.Since(startAt) < cfg.Duration || last == startDone; {
		if time.Since(startAt) > cfg.Duration+time.Minute {
			meter.seconds()
			return nil, fmt.Errorf("no job worked in %v", time.Since(startAt).Round(time.Second))
		}
		select {
		case err := <-perr:
			meter.seconds()
			return nil, err
		case <-ctx.Done():
			meter.seconds()
			return nil, ctx.Err()
		case <-p.exited:
			meter.seconds()
			return nil, fmt.Errorf("worker process died")
		case <-time.After(time.Until(t.Add(time.Second))):
		}
		t = t.Add(time.Second)
		now := p.completed.Load()
		samples = append(samples, float64(now-last))
		last = now
		if len(samples)%perWindow == 0 {
			if b := claims.window(ctx); b >= 0 {
				claimBuffers = append(claimBuffers, b)
			}
		}
		if at := burstAt.Load(); at != 0 && burstDrained == 0 && enqueued.Load()-p.finished() <= maxBacklog {
			burstDrained = time.Since(time.Unix(0, at))
			burstDrainedJobs = p.finished() - burstFrom.Load()
		}
	}
	secs := time.Since(startAt).Seconds()
	done, enq := p.completed.Load()-startDone, enqueued.Load()-startEnq
	workerCPU := p.cpu() - startCPU
	pgCPU, pgOK := meter.seconds()
	// The table as the pressure left it, then (with a snapshot held) the
	// recovery after releasing it, producers still at work.
	table, err := readTableStats(ctx, s.pool)
	if err != nil {
		return nil, err
	}
	costs := statements.costs(ctx)
	var recovery []RecoveryWindow
	if pressure && cfg.HoldSnapshot && cfg.Recover > 0 {
		release()
		if recovery, err = measureRecovery(ctx, s.pool, p, cfg.Recover, perWindow); err != nil {
			return nil, err
		}
	}
	stopProducing()
	pwg.Wait()
	if err := <-burstDone; err != nil {
		return nil, fmt.Errorf("burst: %w", err)
	}
	r := &ContinuousResult{Table: table, Statements: costs, Recovery: recovery,
		Seconds: secs, WorkedPerSecond: float64(done) / secs, EnqueuedPerSecond: float64(enq) / secs,
		Samples: samples, WorkerCPUPer1000: 1000 * workerCPU / float64(done),
	}
	if pgOK {
		r.PostgresCPUPer1000 = 1000 * pgCPU / float64(done)
	}
	r.WindowSeconds = float64(perWindow)
	r.Windows = windows(samples, perWindow)
	r.SteadyWorkedPerSecond = steady(r.Windows)
	if len(r.Windows) > 0 {
		r.LastWindowPerSecond = r.Windows[len(r.Windows)-1]
	}
	r.LastMinutePerSecond = lastMean(samples, 60)
	r.ClaimBuffersPerJob = claimBuffers
	r.EnqueueRetries = enqueueRetries.Load()
	if pressure {
		r.HoldSnapshot, r.Burst = cfg.HoldSnapshot, cfg.Burst
	}
	if burstDrained > 0 {
		r.BurstDrainSeconds = burstDrained.Seconds()
		r.BurstDrainPerSecond = float64(burstDrainedJobs) / burstDrained.Seconds()
	}
	stopped = true
	if r.WorkerPeakRSSBytes, err = p.stop(); err != nil {
		return nil, err
	}
	select {
	case err := <-perr: // a producer failed after the measurement
		return nil, err
	default:
	}
	// The throughput comes from the worker's counters: check them against
	// the table.
	if err := checkTable(ctx, s.pool, p, enqueued.Load(), scheduled); err != nil {
		return nil, err
	}
	return r, nil
}
