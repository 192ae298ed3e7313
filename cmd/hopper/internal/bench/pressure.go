package bench

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TableStats is the job table at the end of a run.
type TableStats struct {
	DeadTuples      int64 `json:"dead_tuples"`
	LiveTuples      int64 `json:"live_tuples"`
	TableBytes      int64 `json:"table_bytes"`
	IndexBytes      int64 `json:"index_bytes"`
	ReadyIndexBytes int64 `json:"ready_index_bytes"`
	Autovacuums     int64 `json:"autovacuums"`
	Vacuums         int64 `json:"vacuums"`
}

func readTableStats(ctx context.Context, pool *pgxpool.Pool) (*TableStats, error) {
	stmt, err := benchSQL.ReadFile("sql/table_stats.sql")
	if err != nil {
		return nil, err
	}
	var t TableStats
	err = pool.QueryRow(ctx, string(stmt)).Scan(&t.DeadTuples, &t.LiveTuples, &t.TableBytes, &t.IndexBytes,
		&t.ReadyIndexBytes, &t.Autovacuums, &t.Vacuums)
	if err != nil {
		return nil, fmt.Errorf("table stats: %w", err)
	}
	return &t, nil
}

// claimMeter reads the claim statement's buffer use from pg_stat_statements;
// it is off (ok false) when the extension is not there.
type claimMeter struct {
	pool              *pgxpool.Pool
	stmt              string
	ok                bool
	calls, rows, blks int64
}

func newClaimMeter(ctx context.Context, pool *pgxpool.Pool) *claimMeter {
	stmt, err := benchSQL.ReadFile("sql/claim_buffers.sql")
	m := &claimMeter{pool: pool, stmt: string(stmt)}
	if err == nil {
		m.ok = m.read(ctx) == nil
	}
	return m
}

func (m *claimMeter) read(ctx context.Context) error {
	return m.pool.QueryRow(ctx, m.stmt).Scan(&m.calls, &m.rows, &m.blks)
}

// window returns the buffers per claimed job since the last reading, or -1
// when unknown.
func (m *claimMeter) window(ctx context.Context) float64 {
	if !m.ok {
		return -1
	}
	rows, blks := m.rows, m.blks
	if err := m.read(ctx); err != nil || m.rows == rows {
		return -1
	}
	return float64(m.blks-blks) / float64(m.rows-rows)
}

// StatementCost is what one of Hopper's statements cost the server during
// a run (pg_stat_statements): where the time went.
type StatementCost struct {
	Name           string  `json:"name"`
	Calls          int64   `json:"calls"`
	TotalMs        float64 `json:"total_ms"`
	MeanMs         float64 `json:"mean_ms"`
	BuffersPerCall float64 `json:"buffers_per_call"`
}

type statementTotals struct {
	calls, blks int64
	ms          float64
}

// statementMeter reads Hopper's statements' totals; off (nil readings)
// without pg_stat_statements.
type statementMeter struct {
	pool  *pgxpool.Pool
	stmt  string
	start map[string]statementTotals
}

func newStatementMeter(ctx context.Context, pool *pgxpool.Pool) *statementMeter {
	stmt, err := benchSQL.ReadFile("sql/statement_costs.sql")
	m := &statementMeter{pool: pool, stmt: string(stmt)}
	if err == nil {
		m.start = m.read(ctx)
	}
	return m
}

func (m *statementMeter) read(ctx context.Context) map[string]statementTotals {
	rows, err := m.pool.Query(ctx, m.stmt)
	if err != nil {
		return nil
	}
	out := map[string]statementTotals{}
	for rows.Next() {
		var name string
		var t statementTotals
		if rows.Scan(&name, &t.calls, &t.ms, &t.blks) == nil {
			out[name] = t
		}
	}
	if rows.Err() != nil {
		return nil
	}
	return out
}

// costs returns each statement's cost since the meter started, the most
// expensive first.
func (m *statementMeter) costs(ctx context.Context) []StatementCost {
	if m.start == nil {
		return nil
	}
	var out []StatementCost
	for name, end := range m.read(ctx) {
		begin := m.start[name]
		calls := end.calls - begin.calls
		if calls <= 0 {
			continue
		}
		ms := end.ms - begin.ms
		out = append(out, StatementCost{Name: name, Calls: calls, TotalMs: ms, MeanMs: ms / float64(calls),
			BuffersPerCall: float64(end.blks-begin.blks) / float64(calls)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TotalMs > out[j].TotalMs })
	return out
}

// runPressure runs the pressure suite (Config.Pressure).
func runPressure(ctx context.Context, cfg Config, logf func(string, ...any)) (*PressureReport, error) {
	held := cfg
	held.HoldSnapshot, held.Burst, held.Scheduled = true, 0, 0
	held.Duration = cmp.Or(cfg.HoldFor, 5*time.Minute)
	held.Recover = cmp.Or(cfg.Recover, 6*time.Minute)
	logf("pressure: %v of produce + work with a snapshot held open, then %v after releasing it", held.Duration, held.Recover)
	snapshot, err := runContinuous(ctx, held)
	if err != nil {
		return nil, fmt.Errorf("held snapshot: %w", err)
	}
	burst := cfg
	burst.HoldSnapshot, burst.Recover, burst.Scheduled = false, 0, 0
	burst.Burst = cmp.Or(cfg.Burst, 1_000_000)
	logf("pressure: %v of produce + work, %d jobs arriving at once a third of the way in", burst.Duration, burst.Burst)
	burstRun, err := runContinuous(ctx, burst)
	if err != nil {
		return nil, fmt.Errorf("burst: %w", err)
	}
	return &PressureReport{Snapshot: snapshot, Burst: burstRun}, nil
}

// RecoveryWindow is one window after a held snapshot was released.
type RecoveryWindow struct {
	WorkedPerSecond float64 `json:"worked_per_second"`
	DeadTuples      int64   `json:"dead_tuples"`
	TableBytes      int64   `json:"table_bytes"`
	IndexBytes      int64   `json:"index_bytes"`
	Autovacuums     int64   `json:"autovacuums"`
}

// measureRecovery goes on measuring for d after a held snapshot was released: the
// rate, and the job table's dead tuples and size, per window.
func measureRecovery(ctx context.Context, pool *pgxpool.Pool, p *workerProc, d time.Duration, perWindow int) ([]RecoveryWindow, error) {
	var out []RecoveryWindow
	window := time.Duration(perWindow) * time.Second
	for start := time.Now(); time.Since(start) < d; {
		from, at := p.completed.Load(), time.Now()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-p.exited:
			return nil, fmt.Errorf("worker process died")
		case <-time.After(window):
		}
		t, err := readTableStats(ctx, pool)
		if err != nil {
			return nil, err
		}
		out = append(out, RecoveryWindow{WorkedPerSecond: float64(p.completed.Load()-from) / time.Since(at).Seconds(),
			DeadTuples: t.DeadTuples, TableBytes: t.TableBytes, IndexBytes: t.IndexBytes, Autovacuums: t.Autovacuums})
	}
	return out, nil
}

// lastMean is the mean of the last n one-second samples (all of them when
// there are fewer).
func lastMean(samples []float64, n int) float64 {
	if len(samples) == 0 {
		return 0
	}
	tail := samples[max(0, len(samples)-n):]
	sum := 0.0
	for _, v := range tail {
		sum += v
	}
	return sum / float64(len(tail))
}

// holdSnapshot opens a REPEATABLE READ transaction on a connection of its
// own and takes a snapshot, which it holds until release is called.
func holdSnapshot(ctx context.Context, url string) (release func(), err error) {
	stmt, err := benchSQL.ReadFile("sql/hold_snapshot.sql")
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("hold snapshot: %w", err)
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err == nil {
		_, err = tx.Exec(ctx, string(stmt))
	}
	if err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("hold snapshot: %w", err)
	}
	return func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = tx.Rollback(c)
		_ = conn.Close(c)
	}, nil
}

// windows folds one-second samples into windows of k samples, as rates.
func windows(samples []float64, k int) []float64 {
	k = max(k, 1)
	var out []float64
	for start := 0; start+k <= len(samples); start += k {
		sum := 0.0
		for _, s := range samples[start : start+k] {
			sum += s
		}
		out = append(out, sum/float64(k))
	}
	return out
}

// steady is the mean of the last half of the windows (the first half is
// warm-up); with one window, that window.
func steady(ws []float64) float64 {
	if len(ws) == 0 {
		return 0
	}
	half := ws[len(ws)/2:]
	sum := 0.0
	for _, w := range half {
		sum += w
	}
	return sum / float64(len(half))
}
