package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hopperq/hopper/db"
)

// RetentionOptions configure the retention mode: what it costs to remove
// an hour's worth of expired completed jobs from a history that keeps a
// day of them, deleted row by row (the default partition, as every
// history was before migration 21) against a partition dropped whole.
type RetentionOptions struct {
	// Kept is the rows in the history; a 24th of them expired.
	Kept int64 `json:"kept"`
}

// RetentionResult is the retention mode's answer: the two cases, and how
// many times longer the delete took than the drop.
type RetentionResult struct {
	Cases []*RetentionCase `json:"cases"`
	// DeleteToDrop: the delete's seconds over the drop's.
	DeleteToDrop float64 `json:"delete_to_drop"`
}

// RetentionCase is one way of removing the expired rows, measured in a
// schema of its own.
type RetentionCase struct {
	Name    string `json:"name"` // "delete" or "drop"
	How     string `json:"how"`
	Kept    int64  `json:"kept"`
	Expired int64  `json:"expired"`
	// Removed: the rows the removal took away (counted before and after).
	Removed     int64   `json:"removed"`
	FillSeconds float64 `json:"fill_seconds"`
	// Seconds: the removal's wall time; Statements: how many it took.
	Seconds    float64 `json:"seconds"`
	Statements int     `json:"statements"`
	// WALBytes: the write-ahead log the removal wrote.
	WALBytes int64 `json:"wal_bytes"`
	// DeadTuples: left behind for vacuum; VacuumSeconds: the VACUUM of the
	// history that followed (the history was vacuumed after the fill, so
	// this is the removal's share).
	DeadTuples    int64   `json:"dead_tuples"`
	VacuumSeconds float64 `json:"vacuum_seconds"`
	BytesBefore   int64   `json:"bytes_before"`
	BytesAfter    int64   `json:"bytes_after"`
}

// retentionBatch is the pruner's batch (internal/worker/pruner): the
// delete case deletes as a worker does.
const retentionBatch = 1000

func runRetention(ctx context.Context, cfg Config, logf func(string, ...any)) (*RetentionResult, error) {
	r := &RetentionResult{}
	for _, name := range []string{"delete", "drop"} {
		c, err := retentionCase(ctx, cfg, name, logf)
		if err != nil {
			return r, fmt.Errorf("%s: %w", name, err)
		}
		r.Cases = append(r.Cases, c)
	}
	if drop := r.Cases[1].Seconds; drop > 0 {
		r.DeleteToDrop = r.Cases[0].Seconds / drop
	}
	return r, nil
}

func retentionCase(ctx context.Context, cfg Config, name string, logf func(string, ...any)) (*RetentionCase, error) {
	kept := cfg.Retention.Kept
	c := &RetentionCase{Name: name, Kept: kept, Expired: kept / 24}
	s, err := newScratch(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	sql := map[string]string{}
	for _, f := range []string{"retention_fill", "retention_parts", "retention_stats"} {
		b, err := benchSQL.ReadFile("sql/" + f + ".sql")
		if err != nil {
			return nil, err
		}
		sql[f] = string(b)
	}
	// One session does everything, so that the statistics it flushes
	// count all of the removal's dead tuples.
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	partitioned := name == "drop"
	logf("retention, %s: filling the history with %d kept jobs, %d of them expired", name, kept, c.Expired)
	start := time.Now()
	if partitioned {
		c.How = "hopper_history_partitions_drop: the passed partition dropped whole"
		if _, err := conn.Exec(ctx, sql["retention_parts"]); err != nil {
			return nil, fmt.Errorf("partitions: %w", err)
		}
	} else {
		c.How = fmt.Sprintf("PruneHistory in batches of %d, as workers prune the default partition", retentionBatch)
	}
	if _, err := conn.Exec(ctx, sql["retention_fill"], kept, c.Expired, partitioned); err != nil {
		return nil, fmt.Errorf("fill: %w", err)
	}
	if _, err := conn.Exec(ctx, "VACUUM (ANALYZE) hopper_job_history"); err != nil {
		return nil, err
	}
	c.FillSeconds = time.Since(start).Seconds()
	count := func() (n int64, err error) {
		err = conn.QueryRow(ctx, "SELECT count(*) FROM hopper_job_history").Scan(&n)
		return n, err
	}
	stats := func() (bytes, dead int64, err error) {
		if _, err = conn.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
			return 0, 0, err
		}
		// The flush happens when the session goes idle: a statement of its
		// own, then a read in the next.
		err = conn.QueryRow(ctx, sql["retention_stats"]).Scan(&bytes, &dead)
		return bytes, dead, err
	}
	before, err := count()
	if err != nil {
		return nil, err
	}
	if c.BytesBefore, _, err = stats(); err != nil {
		return nil, err
	}
	var lsn0 string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn0); err != nil {
		return nil, err
	}

	q := db.New(conn)
	start = time.Now()
	if partitioned {
		n, err := q.DropHistoryPartitions(ctx)
		if err != nil {
			return nil, err
		}
		c.Statements = 1
		if n != 1 {
			return nil, fmt.Errorf("dropped %d partitions, want the 1 whose range passed", n)
		}
	} else {
		for {
			n, err := q.PruneHistory(ctx, db.PruneHistoryParams{MaxJobs: retentionBatch})
			if err != nil {
				return nil, err
			}
			c.Statements++
			if n < retentionBatch {
				break
			}
		}
	}
	c.Seconds = time.Since(start).Seconds()
	if err := conn.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint", lsn0).Scan(&c.WALBytes); err != nil {
		return nil, err
	}
	after, err := count()
	if err != nil {
		return nil, err
	}
	c.Removed = before - after
	if _, c.DeadTuples, err = stats(); err != nil {
		return nil, err
	}
	start = time.Now()
	if _, err := conn.Exec(ctx, "VACUUM hopper_job_history"); err != nil {
		return nil, err
	}
	c.VacuumSeconds = time.Since(start).Seconds()
	if c.BytesAfter, _, err = stats(); err != nil {
		return nil, err
	}
	logf("retention, %s: %d rows removed in %.2fs by %d statements, %.1f MB of WAL, %d dead tuples, vacuum %.2fs",
		name, c.Removed, c.Seconds, c.Statements, float64(c.WALBytes)/1e6, c.DeadTuples, c.VacuumSeconds)
	return c, nil
}

// Print writes the retention mode's table.
func (r *RetentionResult) Print(w io.Writer) {
	if len(r.Cases) == 0 {
		return
	}
	fmt.Fprintf(w, "retention: %d completed jobs kept, the %d that expired in one hour removed\n", r.Cases[0].Kept, r.Cases[0].Expired)
	fmt.Fprintf(w, "  %-7s %9s %9s %11s %10s %12s %10s %12s %12s\n", "case", "removed", "seconds", "statements", "WAL MB", "dead tuples", "vacuum s", "MB before", "MB after")
	for _, c := range r.Cases {
		fmt.Fprintf(w, "  %-7s %9d %9.3f %11d %10.1f %12d %10.2f %12.0f %12.0f\n", c.Name, c.Removed, c.Seconds, c.Statements,
			float64(c.WALBytes)/1e6, c.DeadTuples, c.VacuumSeconds, float64(c.BytesBefore)/1e6, float64(c.BytesAfter)/1e6)
	}
	for _, c := range r.Cases {
		fmt.Fprintf(w, "  %s: %s (filled in %.0fs)\n", c.Name, c.How, c.FillSeconds)
	}
	fmt.Fprintf(w, "  the delete took %.0f× the drop's time\n", r.DeleteToDrop)
}
