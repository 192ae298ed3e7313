package worker

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hopperq/hopper/internal/schemascope"
	"github.com/hopperq/hopper/jobs"
)

// Config configures a Worker. The zero value of every field means its
// default.
type Config struct {
	// Queues maps each queue this worker serves to the most jobs of it that
	// may run at once. Default: {"default": 10}.
	Queues map[string]int

	// FlowControl shapes how the named queues' jobs are claimed: per-key
	// concurrency limits, rate limits and fairness across keys (see
	// FlowControl). Queues without an entry claim in strict order with no
	// limit, at no extra cost.
	FlowControl map[string]FlowControl

	// ID names this worker in leases, error histories and the worker
	// registry (hopper_workers). Default: host name, process id and a
	// random suffix, unique to this Worker. Neither is needed for fast
	// crash recovery: any live worker hands a gone worker's jobs back a few
	// beats after its last one, whatever its ID. A stable ID (a
	// StatefulSet's pod name) makes a restarted worker hand back its
	// previous run's jobs at start, and keeps its row in the registry under
	// one name. An ID is held by one live worker at a time, whatever their
	// host names and pids (containers run as pid 1 and may share a host
	// name): a worker started with the ID of one that still beats waits
	// out that worker's stale window, then fails with ErrWorkerIDInUse (a
	// second Worker with the ID in one process fails at once). A restart
	// under the ID of a crashed run takes it over once that run's row is
	// stale, at most its stale window after the crash.
	ID string

	// LeaseDuration is how long a claim lasts without being extended.
	// Crash recovery does not wait for it: it bounds recovery only when a
	// worker cannot reach the database to say it is alive, nor the others
	// to see that it is not. Default 30s.
	LeaseDuration time.Duration
	// BeatInterval is how often the worker says it is alive (its
	// row in hopper_workers). A worker that misses three beats is gone:
	// the next beat of any live worker hands its jobs back, charged like
	// an expired lease and fenced, so a gone worker's jobs run again
	// within about four beats of its crash. Default 1s. Run warns when
	// three beats reach LeaseDuration: recovery then waits for the leases.
	//
	// Not the old HeartbeatInterval: that field set how often leases are
	// extended, which is ExtendInterval now; it was renamed so that a
	// program written for it stops compiling instead of slowing recovery.
	BeatInterval time.Duration
	// ExtendInterval is how often the worker extends the leases of the
	// jobs it holds, in batches (the lease extension, apart from the beat:
	// BeatInterval). Default a third of LeaseDuration; negative never
	// extends them (only for tests of lease expiry).
	ExtendInterval time.Duration

	// PollInterval is how often an idle queue looks for work without being
	// woken, and how often scheduled jobs (delayed, or waiting to retry)
	// that have fallen due are made ready. Default 1s.
	PollInterval time.Duration
	// PollOnly turns LISTEN/NOTIFY off: use it behind PgBouncer in
	// transaction mode, where LISTEN does not work.
	PollOnly bool

	// Middleware wraps every kind's handler, the first outermost (see
	// Middleware; a kind's own, given with Use, run inside these).
	// OnOutcome hooks are told what became of each run; OnError hooks of
	// each run that failed or panicked. None by default: a run then takes
	// no extra step.
	Middleware []Middleware
	OnOutcome  []OutcomeHook
	OnError    []ErrorHook

	// Schema names the schema holding Hopper's tables, for a pool whose
	// search_path cannot lead there (PgBouncer in transaction mode refuses
	// search_path in the connection string). Each statement then sets
	// search_path for its own transaction only; with pgx's exec or
	// simple-protocol mode, in the same round trip. Default: the pool's
	// search_path decides.
	Schema string

	// AckBatchSize and AckFlushInterval bound how long completions wait to
	// be sent: a batch is flushed when it is this large or this old.
	// Defaults 1000 and 5ms.
	AckBatchSize     int
	AckFlushInterval time.Duration

	// SweepInterval is the mean time between sweeps of expired leases
	// (jittered ±25%). Default 5s. SweepBatch bounds one sweep statement.
	// Default 500.
	SweepInterval time.Duration
	SweepBatch    int

	// ShutdownTimeout is the whole shutdown, from Run's context ending to
	// Run returning: claiming stops at once; running handlers have until
	// the last quarter of it (at most the last 5s) to finish; then they are
	// cancelled, their jobs given back, and the last results recorded.
	// Run returns by then whatever the database does (an outage
	// included): a result not recorded by then is logged, and its job runs
	// again once its worker is taken to be gone. Default 20s, inside
	// Kubernetes' default 30s between SIGTERM and SIGKILL.
	ShutdownTimeout time.Duration

	// Timeout cancels a handler's context when a run takes longer; a
	// kind (Timeout) or a job (Timeout) may set its own. Default 1m:
	// long enough for the ordinary job, short enough that a handler stuck
	// on a dead connection does not hold its slot and its job for hours.
	// Set a longer Timeout on the kinds that need it; negative means no
	// default timeout.
	Timeout time.Duration
	// AbandonAfter is how long a handler may keep running after its
	// timeout, ignoring its cancelled context, before the worker abandons
	// it: its lease is no longer extended (the job runs again elsewhere once
	// the lease expires), its slot goes back to the queue, and it is logged
	// and counted (hopper_handlers_stuck) until it returns. Checked at every
	// lease extension (ExtendInterval). Default 10s.
	AbandonAfter time.Duration

	// RetryBackoff is the default retry delay for failed jobs. Default
	// DefaultBackoff.
	RetryBackoff Backoff

	// Logger receives the worker's logs. Default slog.Default().
	Logger *slog.Logger
	// Registerer, when set, gets the worker's Prometheus metrics.
	Registerer prometheus.Registerer
	// MetricsAddr, when set, serves at http://MetricsAddr/metrics the
	// worker's metrics plus gauges read from the database: jobs per queue,
	// kind and state, oldest ready age, paused queues, the busiest
	// concurrency keys, rate-limit budgets, and stale and paused schedules
	// (monitoring/ has alert rules and a dashboard for them). An
	// address without a host (":9464") listens on 127.0.0.1 only; name the
	// host ("0.0.0.0:9464") to expose it further.
	MetricsAddr string
	// MetricsReadPool, when set, is where the database gauges of
	// MetricsAddr read instead of the worker's pool: a standby's pool
	// (the same database, scoped by Schema like the worker's), to keep the
	// gauges' scans off the primary. hopper_read_lag_seconds then says how
	// stale they are (hopper.ReadLag). The worker itself never reads it.
	MetricsReadPool *pgxpool.Pool
	// MetricsInterval is how often the queue gauges are refreshed from the
	// Stats query (a scan of the live table). Default 15s.
	MetricsInterval time.Duration
	// FullScanInterval is how often a queue's claim scans the ready jobs
	// from the start rather than from its cursor, just past the last job it
	// claimed. Wake-ups move the cursor back for every job that becomes
	// ready behind it through Hopper (an enqueue that commits late, a
	// release, a sweep, a promotion); the full scan finds the rest: jobs
	// whose claim rolled back in a crashed worker, rows changed by hand. It
	// costs a walk over the index entries of jobs claimed since vacuum last
	// ran. Under a key limit, a job held back by its key is claimed again by
	// the worker that records a result of that key; should that worker stop
	// first, the others find the job at their next full scan. Default 10s.
	FullScanInterval time.Duration

	// KeepHistoryByQueue keeps the completed jobs of these queues in the history
	// table for so long after they complete (no entry, or 0: not kept, the
	// default). A kind's own KeepHistoryByQueue overrides its queue's. The job is
	// copied by the statement that acknowledges it, so keeping history
	// costs no extra round trip; see docs/benchmarks.md for what it costs the
	// database.
	KeepHistoryByQueue map[string]time.Duration
	// KeepWorkflowSteps keeps the completed steps of workflows in the
	// history, with their handlers' results, for at least this long: their
	// children read the results (jobs.ParentResult), and
	// hopper.Client's ListWorkflow shows the steps. A kind or queue that
	// keeps history longer keeps its steps longer. Default 7 days; negative
	// keeps none (children then find their parents "gone", and results
	// are lost).
	KeepWorkflowSteps time.Duration
	// HistoryPartitionWidth is the width of the time partitions this
	// worker creates for the history (hopper_job_history is partitioned by
	// when a row may go; docs/operating.md, "History and retention"). A
	// completed job kept at least this long goes with its whole partition,
	// by a DROP rather than a DELETE per row, at most one width after its
	// keep ends. The worker creates partitions ahead to cover the longest
	// keep it writes (KeepHistory, KeepHistoryByQueue, KeepWorkflowSteps),
	// at most MaxHistoryPartitionsAhead of them; a job kept for less than
	// the width or beyond the partitions goes to the default partition and
	// is deleted row by row when its keep ends, as are jobs kept by builds
	// before partitions. Between 1 minute and 31 days; default 1
	// hour; negative: this worker creates none (it still drops those that
	// passed).
	HistoryPartitionWidth time.Duration

	// DeadRetention, when positive, deletes the dead and cancelled jobs
	// of this worker's Queues that ended longer ago than this: every
	// worker that sets it prunes its queues' on its sweep interval, and
	// leaves other queues' to their own workers (another application in
	// the schema may keep them longer; docs/operating.md, "Several
	// applications in one schema"). From 8 minutes on, dead jobs are kept
	// in time partitions an eighth of the retention wide, and a partition
	// whose jobs have all expired is dropped whole, so a job is kept up to
	// an eighth longer; shorter retentions delete row by row in bounded
	// batches. Default 0: kept until purged.
	DeadRetention time.Duration

	// EventRetention is how long an emitted event is kept for jobs that
	// await it later (worker.AwaitEvent): every worker prunes older ones
	// on its sweep interval. Event names are shared by every application
	// in the schema, so the shortest EventRetention of any worker applies.
	// Default 7 days.
	EventRetention time.Duration

	// ScheduleStaleAfter is how long a schedule this worker defines is held
	// to be defined after the worker last said so (it says so every fifth
	// of this while it runs). A schedule no running worker has defined for
	// that long is stale: kept, not fired, and reported as such. Default
	// 5m.
	ScheduleStaleAfter time.Duration

	stableID bool // ID was given, not made up
}

// Defaults of Config's durations that others name.
const (
	// DefaultEventRetention is Config.EventRetention's default.
	DefaultEventRetention = 7 * 24 * time.Hour
	// DefaultHistoryPartitionWidth is Config.HistoryPartitionWidth's default.
	DefaultHistoryPartitionWidth = time.Hour
)

// statementTimeout bounds one statement of the worker's recording and
// shutdown paths, given Config.LeaseDuration. It is never a fraction of a
// short lease: a statement cut off by the client may still commit, and
// then only a second look at the database can tell what happened.
func statementTimeout(lease time.Duration) time.Duration { return max(lease, 10*time.Second) }

func (c Config) withDefaults() (Config, error) {
	if len(c.Queues) == 0 {
		c.Queues = map[string]int{jobs.DefaultQueue: 10}
	}
	for q, n := range c.Queues {
		if err := jobs.ValidateQueue(q); err != nil {
			return c, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		if n < 1 {
			return c, fmt.Errorf("%w: queue %q: concurrency %d is below 1", ErrInvalidConfig, q, n)
		}
	}
	if err := validateFlow(c.FlowControl, c.Queues); err != nil {
		return c, err
	}
	for i, mw := range c.Middleware {
		if mw == nil {
			return c, fmt.Errorf("%w: Middleware[%d] is nil", ErrInvalidConfig, i)
		}
	}
	for i, h := range c.OnOutcome {
		if h == nil {
			return c, fmt.Errorf("%w: OnOutcome[%d] is nil", ErrInvalidConfig, i)
		}
	}
	for i, h := range c.OnError {
		if h == nil {
			return c, fmt.Errorf("%w: OnError[%d] is nil", ErrInvalidConfig, i)
		}
	}
	if c.Schema != "" {
		if err := schemascope.CheckName(c.Schema); err != nil {
			return c, fmt.Errorf("%w: schema: %w", ErrInvalidConfig, err)
		}
	}
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), rand.Uint32()&0xffff)
	} else {
		c.stableID = true
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = 30 * time.Second
	}
	if c.LeaseDuration < 100*time.Millisecond {
		return c, fmt.Errorf("%w: lease duration %v is below 100ms", ErrInvalidConfig, c.LeaseDuration)
	}
	if c.BeatInterval == 0 {
		c.BeatInterval = time.Second
	}
	if c.BeatInterval < 10*time.Millisecond {
		return c, fmt.Errorf("%w: beat interval %v is below 10ms", ErrInvalidConfig, c.BeatInterval)
	}
	if c.ExtendInterval == 0 {
		c.ExtendInterval = c.LeaseDuration / 3
	}
	if c.ExtendInterval >= c.LeaseDuration {
		return c, fmt.Errorf("%w: extend interval %v must be shorter than the lease (%v)", ErrInvalidConfig, c.ExtendInterval, c.LeaseDuration)
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.PollInterval < 0 {
		return c, fmt.Errorf("%w: negative poll interval", ErrInvalidConfig)
	}
	if c.AckBatchSize == 0 {
		c.AckBatchSize = 1000
	}
	if c.AckFlushInterval == 0 {
		c.AckFlushInterval = 5 * time.Millisecond
	}
	if c.AckBatchSize < 1 || c.AckFlushInterval < 0 {
		return c, fmt.Errorf("%w: ack batch size %d / flush interval %v", ErrInvalidConfig, c.AckBatchSize, c.AckFlushInterval)
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = 5 * time.Second
	}
	if c.SweepBatch == 0 {
		c.SweepBatch = 500
	}
	if c.SweepInterval < 0 || c.SweepBatch < 1 {
		return c, fmt.Errorf("%w: sweep interval %v / batch %d", ErrInvalidConfig, c.SweepInterval, c.SweepBatch)
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 20 * time.Second
	}
	if c.ShutdownTimeout < 0 {
		return c, fmt.Errorf("%w: negative shutdown timeout", ErrInvalidConfig)
	}
	if c.Timeout == 0 {
		c.Timeout = time.Minute
	}
	if c.AbandonAfter == 0 {
		c.AbandonAfter = 10 * time.Second
	}
	if c.AbandonAfter < 0 {
		return c, fmt.Errorf("%w: negative abandon-after", ErrInvalidConfig)
	}
	if c.RetryBackoff == (Backoff{}) {
		c.RetryBackoff = DefaultBackoff
	}
	if err := c.RetryBackoff.validate(); err != nil {
		return c, err
	}
	if c.FullScanInterval == 0 {
		c.FullScanInterval = 10 * time.Second
	}
	if c.FullScanInterval < 0 {
		return c, fmt.Errorf("%w: full scan interval %v is negative", ErrInvalidConfig, c.FullScanInterval)
	}
	if c.MetricsInterval == 0 {
		c.MetricsInterval = 15 * time.Second
	}
	if c.MetricsInterval < 0 {
		return c, fmt.Errorf("%w: negative metrics interval", ErrInvalidConfig)
	}
	if strings.HasPrefix(c.MetricsAddr, ":") {
		c.MetricsAddr = "127.0.0.1" + c.MetricsAddr
	}
	for q, d := range c.KeepHistoryByQueue {
		if err := jobs.ValidateQueue(q); err != nil {
			return c, fmt.Errorf("%w: KeepHistory: %w", ErrInvalidConfig, err)
		}
		if d < 0 {
			return c, fmt.Errorf("%w: KeepHistory of queue %q: negative duration %v", ErrInvalidConfig, q, d)
		}
	}
	if c.KeepWorkflowSteps == 0 {
		c.KeepWorkflowSteps = 7 * 24 * time.Hour
	}
	if c.HistoryPartitionWidth == 0 {
		c.HistoryPartitionWidth = DefaultHistoryPartitionWidth
	}
	if w := c.HistoryPartitionWidth; w > 0 && (w < time.Minute || w > 31*24*time.Hour) {
		return c, fmt.Errorf("%w: history partition width %v: it must be between 1m and 31 days (negative: none)", ErrInvalidConfig, w)
	}
	if c.ScheduleStaleAfter == 0 {
		c.ScheduleStaleAfter = 5 * time.Minute
	}
	if c.ScheduleStaleAfter < time.Second {
		return c, fmt.Errorf("%w: schedule stale-after %v is below 1s", ErrInvalidConfig, c.ScheduleStaleAfter)
	}
	if c.EventRetention < 0 {
		return c, fmt.Errorf("%w: negative event retention %v", ErrInvalidConfig, c.EventRetention)
	}
	if c.EventRetention == 0 {
		c.EventRetention = DefaultEventRetention
	}
	if c.DeadRetention < 0 {
		return c, fmt.Errorf("%w: negative dead retention %v", ErrInvalidConfig, c.DeadRetention)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}
