package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
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
// but take the max of these.
type metricsServer struct {
	q        *db.Queries
	log      *slog.Logger
	interval time.Duration // Config.MetricsInterval
	registry *prometheus.Registry
	*dbGauges
	listener net.Listener
	server   *http.Server
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
	}
}

func (g *dbGauges) collectors() []prometheus.Collector {
	return []prometheus.Collector{g.jobs, g.depth, g.oldest, g.queuePaused, g.keys, g.rateUsed, g.rateMax, g.schedStale, g.schedPaused}
}

// newMetricsServer registers the worker's metrics (m) with the database's
// gauges and listens on cfg.MetricsAddr; serve serves it.
func newMetricsServer(q *db.Queries, log *slog.Logger, m *metrics, cfg *Config) (*metricsServer, error) {
	ms := &metricsServer{q: q, log: log, interval: cfg.MetricsInterval, registry: prometheus.NewRegistry(), dbGauges: newDBGauges()}
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
	ms.server = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return ms, nil
}

// MetricsAddr is the address the metrics endpoint listens on (useful with
// port 0), or "" when it is off or not started yet.
func (w *Worker) MetricsAddr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.metricsSrv == nil {
		return ""
	}
	return w.metricsSrv.listener.Addr().String()
}

// serve runs the endpoint and refreshes the queue gauges until ctx
// ends.
func (ms *metricsServer) serve(ctx context.Context) {
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
		ms.refreshDepthGauges(ctx)
		ms.refreshFlowGauges(ctx)
		ms.refreshScheduleGauges(ctx)
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

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
