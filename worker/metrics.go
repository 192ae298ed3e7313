package worker

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hopperq/hopper/internal/buildinfo"
)

// metrics are the worker's Prometheus counters and histograms. They are
// registered only when Config.Registerer is set. What became of each run is
// one counter, hopper_job_outcomes_total, with the Outcome as a label: a
// dashboard sums or splits it without knowing every outcome's name.
type metrics struct {
	claimedC, outcomesC, leaseLostC *prometheus.CounterVec
	scheduleFiresC, releasedC       *prometheus.CounterVec
	stuckG                          *prometheus.GaugeVec
	durationH, waitH                *prometheus.HistogramVec
	batchH                          *prometheus.HistogramVec
	readOnlyC                       prometheus.Counter // statements a read-only session refused
	listenerG                       prometheus.Gauge   // 1 while the LISTEN session is subscribed
	buildG                          *prometheus.GaugeVec

	// Children per queue and kind, looked up once: label hashing on every
	// job showed in profiles.
	mu    sync.RWMutex
	bound map[[2]string]*kindMetrics
}

type kindMetrics struct {
	claimed, done  prometheus.Counter
	wait, duration prometheus.Observer
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
		claimed: m.claimedC.WithLabelValues(queue, kind), done: m.outcomesC.WithLabelValues(queue, kind, string(OutcomeDone)),
		wait: m.waitH.WithLabelValues(queue, kind), duration: m.durationH.WithLabelValues(queue, kind),
	}
	m.mu.Lock()
	m.bound[key] = km
	m.mu.Unlock()
	return km
}

// Schedule fire outcomes (the outcome label of hopper_schedule_fires_total).
const (
	fireEnqueued = "enqueued"
	fireFailed   = "failed"
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	qk := []string{"queue", "kind"}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "hopper", Name: name, Help: help}, labels)
	}
	m := &metrics{
		bound:    map[[2]string]*kindMetrics{},
		claimedC: counter("jobs_claimed_total", "Jobs claimed by this worker.", qk...),
		outcomesC: counter("job_outcomes_total",
			"What became of the runs this worker recorded, by outcome: done, failed (retrying), dead, cancelled, snoozed, "+
				"refused (fenced: no longer this worker's), released (given back at shutdown), abandoned (stuck past its timeout), "+
				"unconfirmed (the reply was lost), unrecorded (not recorded by the shutdown deadline). Dead by a sweep has kind \"\".",
			"queue", "kind", "outcome"),
		leaseLostC: counter("leases_lost_total", "Running jobs whose lease was lost; their handlers were cancelled.", qk...),
		releasedC: counter("worker_jobs_released_total",
			"Running jobs of other workers this worker handed back, by reason: worker gone (no beat within its stale window), worker restarted (a stable ID's previous run).",
			"queue", "reason"),
		scheduleFiresC: counter("schedule_fires_total",
			"Schedule fires: outcome enqueued counts the jobs enqueued, failed the fires that failed (payload function, enqueue) and wait out a backoff.",
			"schedule", "outcome"),
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
			Namespace: "hopper", Name: "claim_batch_size", Help: "Jobs claimed per claim statement.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}, []string{"queue"}),
		readOnlyC: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "hopper", Name: "read_only_refusals_total",
			Help: "Statements of this worker a read-only session refused (SQLSTATE 25006: a standby, or a primary demoted by a failover); each replaces the pool's sessions, at most once a second.",
		}),
		listenerG: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "hopper", Name: "listener_up",
			Help: "1 while this worker's wake-up listener is subscribed (LISTEN) on a live session, 0 while it reconnects and the queues only poll.",
		}),
		buildG: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "hopper", Name: "build_info",
			Help: "Always 1; its labels say which build this worker is: Hopper's module version, the program's main package, " +
				"its commit (12 hex digits, +dirty with uncommitted changes; unstamped when the build recorded none) and that commit's time, and the Go that built it.",
		}, []string{"version", "program", "revision", "vcs_time", "go_version"}),
	}
	b := buildinfo.Read()
	m.buildG.WithLabelValues(b.Version, b.Program, b.Commit(), b.Time, b.Go).Set(1)
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
	return []prometheus.Collector{m.claimedC, m.outcomesC, m.leaseLostC, m.releasedC, m.scheduleFiresC, m.stuckG, m.durationH, m.waitH, m.batchH,
		m.readOnlyC, m.listenerG, m.buildG}
}

// BatchClaimed observes the jobs one claim of queue took.
func (m *metrics) BatchClaimed(queue string, n int) {
	m.batchH.WithLabelValues(queue).Observe(float64(n))
}

func (m *metrics) claimed(queue, kind string, wait time.Duration) {
	km := m.forKind(queue, kind)
	km.claimed.Inc()
	km.wait.Observe(wait.Seconds())
}
func (m *metrics) ran(queue, kind string, d time.Duration) {
	m.forKind(queue, kind).duration.Observe(d.Seconds())
}

// outcome counts a run's outcome; done, the common one, has its counter
// bound already.
func (m *metrics) outcome(queue, kind string, o Outcome) {
	if o == OutcomeDone {
		m.forKind(queue, kind).done.Inc()
		return
	}
	m.outcomesC.WithLabelValues(queue, kind, string(o)).Inc()
}
func (m *metrics) leaseLost(queue, kind string) { m.leaseLostC.WithLabelValues(queue, kind).Inc() }

// JobDead counts a job of queue gone dead outside a handler's run (a sweep,
// a release), its kind unknown: the sweeper's and the releaser's Metrics.
func (m *metrics) JobDead(queue string) { m.outcome(queue, "", OutcomeDead) }

// JobReleased counts a job of queue handed back for reason: the releaser's
// Metrics.
func (m *metrics) JobReleased(queue, reason string) { m.releasedC.WithLabelValues(queue, reason).Inc() }

// ScheduleFired counts the jobs a fire of the schedule name enqueued: the
// scheduler's Metrics.
func (m *metrics) ScheduleFired(name string, jobs int) {
	m.scheduleFiresC.WithLabelValues(name, fireEnqueued).Add(float64(jobs))
}

// ScheduleFailed counts a failed fire of the schedule name: the
// scheduler's Metrics.
func (m *metrics) ScheduleFailed(name string) {
	m.scheduleFiresC.WithLabelValues(name, fireFailed).Inc()
}

// ListenerUp sets hopper_listener_up: the notifier's Metrics.
func (m *metrics) ListenerUp(up bool) {
	v := 0.0
	if up {
		v = 1
	}
	m.listenerG.Set(v)
}
func (m *metrics) abandoned(queue, kind string) {
	m.outcome(queue, kind, OutcomeAbandoned)
	m.stuckG.WithLabelValues(queue, kind).Inc()
}
func (m *metrics) stuckReturned(queue, kind string) { m.stuckG.WithLabelValues(queue, kind).Dec() }
