package worker

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the worker's Prometheus counters and histograms. They are
// registered only when Config.Registerer is set.
type metrics struct {
	claimedC, completedC, failedC, deadC, leaseLostC, refusedC *prometheus.CounterVec
	unconfirmedC, unrecordedC, abandonedC                      *prometheus.CounterVec
	cancelledC, snoozedC                                       *prometheus.CounterVec
	scheduleFiredC, scheduleFailedC                            *prometheus.CounterVec
	stuckG                                                     *prometheus.GaugeVec
	durationH, waitH                                           *prometheus.HistogramVec
	batchH                                                     *prometheus.HistogramVec

	// Children per queue and kind, looked up once: label hashing on every
	// job showed in profiles.
	mu    sync.RWMutex
	bound map[[2]string]*kindMetrics
}

type kindMetrics struct {
	claimed, completed prometheus.Counter
	wait, duration     prometheus.Observer
}

func (m *metrics) forKind(queue, kind string) *kindMetrics {
	key := [2]string{queue, kind}
	m.mu.RLock()
	km := m.bound[key]
	m.mu.RUnlock()
	if km != nil {
		return km
	}
	km = &kindMetrics{
		claimed: m.claimedC.WithLabelValues(queue, kind), completed: m.completedC.WithLabelValues(queue, kind),
		wait: m.waitH.WithLabelValues(queue, kind), duration: m.durationH.WithLabelValues(queue, kind),
	}
	m.mu.Lock()
	m.bound[key] = km
	m.mu.Unlock()
	return km
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	qk := []string{"queue", "kind"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "hopper", Name: name, Help: help}, qk)
	}
	m := &metrics{
		bound:      map[[2]string]*kindMetrics{},
		claimedC:   counter("jobs_claimed_total", "Jobs claimed by this worker."),
		completedC: counter("jobs_completed_total", "Jobs whose handler succeeded and whose ack was recorded."),
		failedC:    counter("jobs_failed_total", "Failed attempts rescheduled for a retry."),
		deadC:      counter("jobs_dead_total", "Jobs moved to the dead table (by a nack or by this worker's sweeps; kind is empty for sweeps)."),
		leaseLostC: counter("jobs_lease_lost_total", "Running jobs whose lease was lost; their handlers were cancelled."),
		refusedC:   counter("jobs_result_refused_total", "Acks and nacks refused by fencing (the claim was no longer current)."),
		unconfirmedC: counter("jobs_unconfirmed_total",
			"Results whose statement may have committed while its reply was lost, and the database no longer shows whether it did."),
		unrecordedC: counter("jobs_unrecorded_total",
			"Results not recorded before the shutdown deadline; their jobs run again once their leases expire."),
		cancelledC: counter("jobs_cancelled_total",
			"Jobs that ended as cancelled: by their handler (worker.Cancel), or by an operator while they ran."),
		snoozedC: counter("jobs_snoozed_total", "Runs that ended with a snooze (worker.Snooze): the job waits, uncharged."),
		scheduleFiredC: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "hopper", Name: "schedule_fired_total",
			Help: "Jobs enqueued by the schedules this worker fired."}, []string{"schedule"}),
		scheduleFailedC: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "hopper", Name: "schedule_failures_total",
			Help: "Fires of a schedule that failed (payload function, enqueue): the schedule waits out a backoff."}, []string{"schedule"}),
		abandonedC: counter("handlers_abandoned_total",
			"Handlers still running past their timeout plus AbandonAfter: their jobs were given up to run again elsewhere."),
		stuckG: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "hopper", Name: "handlers_stuck", Help: "Abandoned handlers that have not returned yet.",
		}, qk),
		durationH: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "hopper", Name: "handler_duration_seconds", Help: "Time handlers ran.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, qk),
		waitH: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "hopper", Name: "job_wait_seconds", Help: "Time from a job's run_at to its claim.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, qk),
		batchH: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "hopper", Name: "fetch_batch_size", Help: "Jobs claimed per dequeue.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}, []string{"queue"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.claimedC, m.completedC, m.failedC, m.deadC, m.leaseLostC, m.refusedC,
		m.unconfirmedC, m.unrecordedC, m.cancelledC, m.snoozedC, m.scheduleFiredC, m.scheduleFailedC, m.abandonedC, m.stuckG, m.durationH, m.waitH, m.batchH}
}

func (m *metrics) fetched(queue string, n int) { m.batchH.WithLabelValues(queue).Observe(float64(n)) }
func (m *metrics) claimed(queue, kind string, wait time.Duration) {
	km := m.forKind(queue, kind)
	km.claimed.Inc()
	km.wait.Observe(wait.Seconds())
}
func (m *metrics) ran(queue, kind string, d time.Duration) {
	m.forKind(queue, kind).duration.Observe(d.Seconds())
}
func (m *metrics) completed(queue, kind string)   { m.forKind(queue, kind).completed.Inc() }
func (m *metrics) failed(queue, kind string)      { m.failedC.WithLabelValues(queue, kind).Inc() }
func (m *metrics) dead(queue, kind string)        { m.deadC.WithLabelValues(queue, kind).Inc() }
func (m *metrics) leaseLost(queue, kind string)   { m.leaseLostC.WithLabelValues(queue, kind).Inc() }
func (m *metrics) refused(queue, kind string)     { m.refusedC.WithLabelValues(queue, kind).Inc() }
func (m *metrics) unconfirmed(queue, kind string) { m.unconfirmedC.WithLabelValues(queue, kind).Inc() }
func (m *metrics) unrecorded(queue, kind string)  { m.unrecordedC.WithLabelValues(queue, kind).Inc() }
func (m *metrics) cancelled(queue, kind string)   { m.cancelledC.WithLabelValues(queue, kind).Inc() }
func (m *metrics) snoozed(queue, kind string)     { m.snoozedC.WithLabelValues(queue, kind).Inc() }
func (m *metrics) scheduleFired(name string, jobs int) {
	m.scheduleFiredC.WithLabelValues(name).Add(float64(jobs))
}
func (m *metrics) scheduleFailed(name string) { m.scheduleFailedC.WithLabelValues(name).Inc() }
func (m *metrics) abandoned(queue, kind string) {
	m.abandonedC.WithLabelValues(queue, kind).Inc()
	m.stuckG.WithLabelValues(queue, kind).Inc()
}
func (m *metrics) stuckReturned(queue, kind string) { m.stuckG.WithLabelValues(queue, kind).Dec() }
