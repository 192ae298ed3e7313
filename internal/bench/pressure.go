package bench

import (
	"context"
	"fmt"
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
