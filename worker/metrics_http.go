package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hopperq/hopper/db"
)

// metricsServer serves /metrics: the worker's own metrics, Go runtime
// metrics, and the database's gauges (queues, keys, rate limits,
// schedules), refreshed every MetricsInterval. The database's gauges say
// the same on every worker: sum the worker's counters across instances,
// but take the max of these. It also serves /healthz and /readyz, for an
// orchestrator's probes.
type metricsServer struct {
	q        *db.Queries
	log      *slog.Logger
	interval time.Duration // Config.MetricsInterval
	registry *prometheus.Registry
	*dbGauges
	listener net.Listener
	server   *http.Server
	ready    readiness
}

// readiness is what /readyz answers from: the outcome of the metrics
// server's last read of the database (its refresh, every
// MetricsInterval, on the worker's pool).
type readiness struct {
	mu         sync.Mutex
	staleAfter time.Duration // no read went through for this long: not ready
	lastOK     time.Time     // the last read that went through; zero before the first
	lastErr    error         // the last read's error, nil when it went through
	now        func() time.Time
}

// record notes the outcome of a read of the database.
func (r *readiness) record(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastErr = err
	if err == nil {
		r.lastOK = r.now()
	}
}

// healthz answers 200 while the process serves HTTP: a liveness probe.
// It reads nothing from the database, so that an outage of the database
// does not get every worker restarted.
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}

// ServeHTTP answers /readyz: 200 when the worker is running (the endpoint
// is served from the time the worker has registered in hopper_workers
// until its shutdown ends) and its last read of the database went
// through within staleAfter; 503 with the reason otherwise.
func (r *readiness) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	lastOK, lastErr := r.lastOK, r.lastErr
	r.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	switch {
	case lastErr != nil:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: the last read of the database failed: %v\n", lastErr)
	case lastOK.IsZero():
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "not ready: the first read of the database has not finished\n")
	case r.now().Sub(lastOK) > r.staleAfter:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: no read of the database went through for %v\n", r.now().Sub(lastOK).Round(time.Second))
	default:
		_, _ = io.WriteString(w, "ok\n")
	}
}

// dbGauges are the gauges read from the database.
type dbGauges struct {
	jobs        *prometheus.GaugeVec
	depth       *prometheus.GaugeVec // QueueDepths: ready, scheduled, running, up to metricDepthLimit
	oldest      *prometheus.GaugeVec
	queuePaused *prometheus.GaugeVec // 1 for a paused queue
	keys        *prometheus.GaugeVec // the top keys' jobs (flow control)
	rateUsed    *prometheus.GaugeVec // global rate limits: claimed in the window
	rateMax     *prometheus.GaugeVec // and the limit
	schedStale  prometheus.Gauge     // schedules that should fire but that no running worker defines
	schedPaused prometheus.Gauge     // paused schedules
	suspended   *prometheus.GaugeVec // jobs in a durable wait, per queue and wait (sleep, event)
	readLag     prometheus.Gauge     // with MetricsReadPool: how stale the rest are; else nil
}

func newDBGauges() *dbGauges {
	return &dbGauges{
		jobs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "hopper", Name: "queue_jobs", Help: "Jobs per queue, kind and state (ready, scheduled, running, dead).",
		}, []string{"queue", "kind", "state"}),
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "hopper", Name: "queue_depth",
			Help: fmt.Sprintf("Jobs per queue and state (ready, scheduled, running), read from bounded index ranges: each stops at %d.", metricDepthLimit),
		}, []string{"queue", "state"}),
		oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "hopper", Name: "queue_oldest_ready_seconds", Help: "Age of the oldest ready job per queue (claim lag).",
		}, []string{"queue"}),
		queuePaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "hopper", Name: "queue_paused", Help: "1 for a paused queue (no worker claims its jobs), 0 for one that runs; per queue with jobs.",
		}, []string{"queue"}),
		keys: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "hopper", Name: "key_jobs",
			Help: fmt.Sprintf("Jobs per concurrency key and state (ready, running), for the %d keys with the most ready jobs.", metricKeys),
		}, []string{"queue", "key", "state"}),
		rateUsed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "hopper", Name: "rate_limit_used", Help: "Jobs claimed in a global rate limit's current window, per queue and group.",
		}, []string{"queue", "group"}),
		rateMax: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "hopper", Name: "rate_limit_jobs", Help: "A global rate limit: jobs allowed per window, per queue and group.",
		}, []string{"queue", "group"}),
		schedStale: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "hopper", Name: "schedules_stale",
			Help: "Schedules not paused that no running worker defines (stale): kept, but their slots pass unfired.",
		}),
		schedPaused: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "hopper", Name: "schedules_paused", Help: "Paused schedules.",
		}),
		suspended: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "hopper", Name: "jobs_suspended",
			Help: "Jobs in a durable wait, per queue and wait: sleep (worker.Sleep) or event (worker.AwaitEvent, until its deadline).",
		}, []string{"queue", "wait"}),
	}
}

func (g *dbGauges) collectors() []prometheus.Collector {
	c := []prometheus.Collector{g.jobs, g.depth, g.oldest, g.queuePaused, g.keys, g.rateUsed, g.rateMax, g.schedStale, g.schedPaused, g.suspended}
	if g.readLag != nil {
		c = append(c, g.readLag)
	}
	return c
}

// newReadLagGauge is hopper_read_lag_seconds, registered only with
// Config.MetricsReadPool.
func newReadLagGauge() prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "hopper", Name: "read_lag_seconds",
		Help: "With MetricsReadPool: how stale the database gauges are, read from a standby (0 while it has replayed all the WAL it received, else the age of its last replayed transaction).",
	})
}

// newMetricsServer registers the worker's metrics (m) with the database's
// gauges and listens on cfg.MetricsAddr; run serves it.
func newMetricsServer(q *db.Queries, log *slog.Logger, m *metrics, cfg *Config) (*metricsServer, error) {
	ms := &metricsServer{q: q, log: log, interval: cfg.MetricsInterval, registry: prometheus.NewRegistry(), dbGauges: newDBGauges()}
	if cfg.MetricsReadPool != nil {
		ms.readLag = newReadLagGauge()
	}
	ms.ready.staleAfter, ms.ready.now = readyStaleAfter(cfg.MetricsInterval), time.Now
	cs := append(m.collectors(), ms.dbGauges.collectors()...)
	for _, c := range append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})) {
		if err := ms.registry.Register(c); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("worker: metrics listener: %w", err)
	}
	ms.listener = ln
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(ms.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", healthz)
	mux.Handle("/readyz", &ms.ready)
	ms.server = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return ms, nil
}

// readyStaleAfter is how long /readyz waits for a read of the database
// to go through before it says the worker is not ready: three refreshes,
// and at least 30s, so that one slow refresh does not flap the probe.
func readyStaleAfter(interval time.Duration) time.Duration {
	return max(3*interval, 30*time.Second)
}

// Run serves the endpoint and refreshes the queue gauges until ctx
// ends.
func (ms *metricsServer) Run(ctx context.Context) {
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := ms.server.Serve(ms.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			ms.log.Error("metrics endpoint failed", "error", err)
		}
	}()
	defer func() { <-served }()
	refresh := func() {
		stats, err := ms.q.Stats(ctx)
		if ctx.Err() == nil {
			ms.ready.record(err)
		}
		if err != nil {
			if ctx.Err() == nil {
				ms.log.Warn("metrics: stats query failed", "error", err)
			}
			return
		}
		ms.jobs.Reset()
		ms.oldest.Reset()
		ms.queuePaused.Reset()
		oldest := map[string]float64{}
		for _, r := range stats {
			ms.jobs.WithLabelValues(r.Queue, r.Kind, "ready").Set(float64(r.Ready))
			ms.jobs.WithLabelValues(r.Queue, r.Kind, "scheduled").Set(float64(r.Scheduled))
			ms.jobs.WithLabelValues(r.Queue, r.Kind, "running").Set(float64(r.Running))
			ms.jobs.WithLabelValues(r.Queue, r.Kind, "waiting").Set(float64(r.Waiting))
			ms.jobs.WithLabelValues(r.Queue, r.Kind, "dead").Set(float64(r.Dead))
			oldest[r.Queue] = max(oldest[r.Queue], r.OldestReadySeconds)
			ms.queuePaused.WithLabelValues(r.Queue).Set(b2f(r.Paused))
		}
		for q, age := range oldest {
			ms.oldest.WithLabelValues(q).Set(age)
		}
		ms.refreshReadLag(ctx)
		ms.refreshDepthGauges(ctx)
		ms.refreshFlowGauges(ctx)
		ms.refreshScheduleGauges(ctx)
		ms.refreshSuspendedGauge(ctx)
	}
	refresh()
	t := time.NewTicker(ms.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = ms.server.Shutdown(sctx)
			return
		case <-t.C:
			refresh()
		}
	}
}

// refreshReadLag sets hopper_read_lag_seconds, when there is one.
func (ms *metricsServer) refreshReadLag(ctx context.Context) {
	if ms.readLag == nil {
		return
	}
	lag, err := ms.q.ReadLag(ctx)
	if err != nil {
		if ctx.Err() == nil {
			ms.log.Warn("metrics: read lag query failed", "error", err)
		}
		return
	}
	ms.readLag.Set(lag.LagSeconds)
}

// metricDepthLimit caps each count of hopper_queue_depth: the statement
// reads at most this many index entries (plus one) per count, so its cost
// does not grow with the table.
const metricDepthLimit = 10_000

// refreshDepthGauges sets hopper_queue_depth for every queue known
// (QueueDepths with no queue named): ready, scheduled and running jobs,
// each up to metricDepthLimit.
func (ms *metricsServer) refreshDepthGauges(ctx context.Context) {
	depths, err := ms.q.QueueDepths(ctx, db.QueueDepthsParams{Queues: []string{}, ScanLimit: metricDepthLimit + 1})
	if err != nil {
		if ctx.Err() == nil {
			ms.log.Warn("metrics: queue depth query failed", "error", err)
		}
		return
	}
	ms.depth.Reset()
	for _, d := range depths {
		ms.depth.WithLabelValues(d.Queue, "ready").Set(float64(min(d.Ready, metricDepthLimit)))
		ms.depth.WithLabelValues(d.Queue, "scheduled").Set(float64(min(d.Scheduled, metricDepthLimit)))
		ms.depth.WithLabelValues(d.Queue, "running").Set(float64(min(d.Running, metricDepthLimit)))
	}
}

// metricKeys bounds the keys exported as gauges: a label per key would
// otherwise grow with the number of tenants.
const metricKeys = 20

// refreshFlowGauges sets the flow-control gauges: the top keys' ready and
// running jobs, and each global rate limit's window.
func (ms *metricsServer) refreshFlowGauges(ctx context.Context) {
	keys, err := ms.q.KeyStats(ctx, db.KeyStatsParams{MaxKeys: metricKeys})
	if err != nil {
		if ctx.Err() == nil {
			ms.log.Warn("metrics: key stats query failed", "error", err)
		}
		return
	}
	ms.keys.Reset()
	for _, k := range keys {
		ms.keys.WithLabelValues(k.Queue, k.ConcurrencyKey, "ready").Set(float64(k.Ready))
		ms.keys.WithLabelValues(k.Queue, k.ConcurrencyKey, "running").Set(float64(k.Running))
	}
	rates, err := ms.q.RateStats(ctx)
	if err != nil {
		if ctx.Err() == nil {
			ms.log.Warn("metrics: rate stats query failed", "error", err)
		}
		return
	}
	ms.rateUsed.Reset()
	ms.rateMax.Reset()
	for i, r := range rates {
		if i == metricKeys*5 { // a limit by key has a group per key
			break
		}
		ms.rateUsed.WithLabelValues(r.Queue, r.RateGroup).Set(float64(r.Used))
		ms.rateMax.WithLabelValues(r.Queue, r.RateGroup).Set(float64(r.RateLimit))
	}
}

// refreshScheduleGauges counts the stale schedules and the paused ones. A
// stale schedule that is paused is counted as paused only: it would not
// fire anyway, and pausing a schedule retired from the code is how an
// operator says it is meant to be gone.
func (ms *metricsServer) refreshScheduleGauges(ctx context.Context) {
	rows, err := ms.q.ListSchedules(ctx)
	if err != nil {
		if ctx.Err() == nil {
			ms.log.Warn("metrics: schedules query failed", "error", err)
		}
		return
	}
	var stale, paused int
	for _, r := range rows {
		switch {
		case r.PausedAt != nil:
			paused++
		case r.Stale:
			stale++
		}
	}
	ms.schedStale.Set(float64(stale))
	ms.schedPaused.Set(float64(paused))
}

// refreshSuspendedGauge sets hopper_jobs_suspended: the scheduled jobs
// whose last durable record is a wait not over yet.
func (ms *metricsServer) refreshSuspendedGauge(ctx context.Context) {
	rows, err := ms.q.CountSuspended(ctx)
	if err != nil {
		if ctx.Err() == nil {
			ms.log.Warn("metrics: suspended jobs query failed", "error", err)
		}
		return
	}
	ms.suspended.Reset()
	for _, r := range rows {
		ms.suspended.WithLabelValues(r.Queue, r.Kind).Set(float64(r.Jobs))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
