package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hopperq/hopper/db"
)

// SequencePlans is EXPLAIN (ANALYZE, BUFFERS) of the two statements a
// sequence's turn goes through, over a table of Jobs sequence jobs spread
// over Keys keys and four queues (so about Jobs/Keys per key, all but the
// head waiting), analyzed as autovacuum would: the promotion (the UPDATE
// of hopper_sequence_promote, which the ack of a head runs in a trigger)
// for one key, and the multi-queue claim (DequeueQueues) of the heads.
// Each runs in a transaction that is rolled back, with its custom plan
// (planned for its arguments) and its generic plan (what a prepared
// statement, or the function's cached plan, may settle on after five
// runs).
type SequencePlans struct {
	Jobs    int          `json:"jobs"`
	Keys    int          `json:"keys"`
	Waiting int64        `json:"waiting"`
	Plans   []PlanReport `json:"plans"`
}

// PlanReport is one statement's plan, as EXPLAIN prints it.
type PlanReport struct {
	Name    string `json:"name"`
	Generic bool   `json:"generic"`
	// Indexes are the indexes of hopper_jobs the plan reads; SeqScan says
	// it scans the table.
	Indexes []string `json:"indexes"`
	SeqScan bool     `json:"seq_scan"`
	Plan    string   `json:"plan"`
}

// The names of the statements explained.
const (
	PlanPromote       = "sequence promotion (hopper_sequence_promote's UPDATE)"
	PlanPromoteKeys   = "batch promotion of a quarter of the keys (hopper_sequence_promote_keys' statement, as an acknowledgement's trigger runs it)"
	PlanDequeueQueues = "DequeueQueues"
)

// Print writes the plans.
func (p *SequencePlans) Print(w io.Writer) {
	fmt.Fprintf(w, "EXPLAIN (ANALYZE, BUFFERS) over %d sequence jobs in %d keys (%d waiting), analyzed; in transactions rolled back:\n",
		p.Jobs, p.Keys, p.Waiting)
	for _, pl := range p.Plans {
		kind := "custom plan"
		if pl.Generic {
			kind = "generic plan"
		}
		fmt.Fprintf(w, "  %s, %s (indexes: %s; seq scan of hopper_jobs: %v):\n", pl.Name, kind, strings.Join(pl.Indexes, ", "), pl.SeqScan)
		for _, line := range strings.Split(strings.TrimRight(pl.Plan, "\n"), "\n") {
			fmt.Fprintf(w, "    %s\n", line)
		}
	}
}

// explainSequences fills a scratch schema with n sequence jobs over keys
// keys and explains the promotion and the claim (SequencePlans).
func explainSequences(ctx context.Context, dbURL string, n, keys int) (*SequencePlans, error) {
	s, err := newScratch(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	queues := queueNames(4)
	const batch = 5000
	items := sequenceItems(benchJob{}, min(batch, n), keys, "seq-", queues)
	for left := n; left > 0; left -= len(items) {
		if _, err := noop.EnqueueMany(ctx, s.pool, items[:min(len(items), left)]); err != nil {
			return nil, err
		}
	}
	if err := maintain(ctx, s.pool, "analyze.sql"); err != nil {
		return nil, err
	}
	p := &SequencePlans{Jobs: n, Keys: keys}
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM hopper_jobs WHERE state = 'waiting'").Scan(&p.Waiting); err != nil {
		return nil, err
	}

	// The promotion: the UPDATE as the migration wrote it, read from the
	// function's source (so that it is the statement the server runs),
	// its variable made a parameter. A key in the middle of the table.
	var src string
	if err := s.pool.QueryRow(ctx, "SELECT prosrc FROM pg_proc WHERE oid = 'hopper_sequence_promote(text)'::regprocedure").Scan(&src); err != nil {
		return nil, err
	}
	promote, err := promoteStatement(src)
	if err != nil {
		return nil, err
	}
	key := fmt.Sprintf("seq-%d", keys/2)
	// The batch promotion, for a quarter of the keys (an acknowledgement
	// batch's heads), from hopper_sequence_promote_keys' source.
	if err := s.pool.QueryRow(ctx, "SELECT prosrc FROM pg_proc WHERE oid = 'hopper_sequence_promote_keys(text[])'::regprocedure").Scan(&src); err != nil {
		return nil, err
	}
	promoteKeys, err := promoteKeysStatement(src)
	if err != nil {
		return nil, err
	}
	var quarter []string
	for k := 0; k < keys; k += 4 {
		quarter = append(quarter, fmt.Sprintf("seq-%d", k))
	}

	// The claim: DequeueQueues as the generated code sends it, each queue
	// from the start of its cursor, as many jobs as there are heads.
	var c capture
	_, err = db.New(&c).DequeueQueues(ctx, db.DequeueQueuesParams{
		Owner: "bench-explain", LeaseMs: 60_000, Queues: queues,
		MaxJobs:         repeat(int32(max(1, keys/len(queues))), len(queues)),
		AfterPriorities: repeat(int16(-1), len(queues)), AfterRunAts: repeat(time.Time{}, len(queues)),
		AfterIds: repeat(int64(0), len(queues)), Kinds: []string{noop.Name()}, MaxVersions: []int32{int32(noop.Version())},
	})
	if !errors.Is(err, errCaptured) {
		return nil, fmt.Errorf("capture DequeueQueues: %v", err)
	}

	// The promotion runs once its key's head is gone: the head is deleted
	// first, in the same transaction, with the trigger that would promote
	// at once disabled (rolled back with the rest).
	headsGone := func(keys ...string) func(tx pgx.Tx) error {
		return func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "ALTER TABLE hopper_jobs DISABLE TRIGGER hopper_jobs_sequence_advance"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "DELETE FROM hopper_jobs WHERE (meta ->> 'hopper.sequence') = ANY ($1) AND state <> 'waiting'", keys)
			return err
		}
	}
	for _, st := range []struct {
		name   string
		sql    string
		args   []any
		before func(pgx.Tx) error
	}{
		{PlanPromote, promote, []any{key}, headsGone(key)},
		{PlanPromoteKeys, promoteKeys, []any{quarter}, headsGone(quarter...)},
		{PlanDequeueQueues, c.sql, c.args, nil},
	} {
		for _, generic := range []bool{false, true} {
			plan, err := explain(ctx, s, st.sql, st.args, st.before, generic)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", st.name, err)
			}
			plan.Name = st.name
			p.Plans = append(p.Plans, plan)
		}
	}
	return p, nil
}

// promoteStatement is the promotion's UPDATE out of hopper_sequence_promote's
// source, with sequence_key as $1 and without its INTO.
func promoteStatement(src string) (string, error) {
	start := strings.Index(src, "UPDATE hopper_jobs")
	end := strings.Index(src, " INTO next;")
	if start < 0 || end < start {
		return "", fmt.Errorf("hopper_sequence_promote: no UPDATE … INTO next in its source")
	}
	return withClock(regexp.MustCompile(`\bsequence_key\b`).ReplaceAllLiteralString(src[start:end], "$1")), nil
}

// withClock puts now() back where the function reads its clock variable
// (migration 33: a PL/pgSQL variable, which Citus takes as a constant):
// the same timestamp, and the same plan.
func withClock(sql string) string {
	return regexp.MustCompile(`\bclock\b`).ReplaceAllLiteralString(sql, "now()")
}

// promoteKeysStatement is the statement of hopper_sequence_promote_keys'
// source (WITH promoted AS (UPDATE …) … SELECT …), with keys as $1 and
// without its INTO.
func promoteKeysStatement(src string) (string, error) {
	start := strings.Index(src, "WITH promoted AS (")
	end := strings.Index(src, "WHERE woken.sent >= 0;")
	if start < 0 || end < start {
		return "", fmt.Errorf("hopper_sequence_promote_keys: no WITH promoted AS (…) … WHERE woken.sent >= 0; in its source")
	}
	sql := strings.Replace(src[start:end], " INTO done", "", 1)
	return withClock(regexp.MustCompile(`\bunnest\(keys\)`).ReplaceAllLiteralString(sql, "unnest($1::text[])")), nil
}

var (
	indexName = regexp.MustCompile(`Index (?:Only )?Scan (?:Backward )?using (\S+) on hopper_jobs|Bitmap Index Scan on (\S+)`)
	seqScan   = regexp.MustCompile(`Seq Scan on hopper_jobs\b`)
)

// explain runs sql under EXPLAIN (ANALYZE, BUFFERS) in a transaction that
// is rolled back, planned for its arguments or (generic) as a prepared
// statement forced to its generic plan; before runs first, in the same
// transaction.
func explain(ctx context.Context, s *scratch, sql string, args []any, before func(pgx.Tx) error, generic bool) (PlanReport, error) {
	r := PlanReport{Generic: generic}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return r, err
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return r, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SET LOCAL jit = off"); err != nil {
		return r, err
	}
	if before != nil {
		if err := before(tx); err != nil {
			return r, err
		}
	}
	const prefix = "EXPLAIN (ANALYZE, BUFFERS) "
	var rows pgx.Rows
	if !generic {
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_custom_plan"); err != nil {
			return r, err
		}
		rows, err = tx.Query(ctx, prefix+sql, args...)
	} else {
		name := fmt.Sprintf("hopper_bench_explain_%d", time.Now().UnixNano())
		sd, err := tx.Conn().Prepare(ctx, name, sql)
		if err != nil {
			return r, err
		}
		defer func() { _ = conn.Conn().Deallocate(context.WithoutCancel(ctx), name) }()
		lits := make([]string, len(args))
		for i, arg := range args {
			var typ, lit string
			if err := tx.QueryRow(ctx, "SELECT format_type($1, NULL)", sd.ParamOIDs[i]).Scan(&typ); err != nil {
				return r, err
			}
			if err := tx.QueryRow(ctx, "SELECT quote_nullable(($1::"+typ+")::text)", arg).Scan(&lit); err != nil {
				return r, err
			}
			lits[i] = lit + "::" + typ
		}
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
			return r, err
		}
		rows, err = tx.Query(ctx, prefix+"EXECUTE "+name+"("+strings.Join(lits, ", ")+")")
		if err != nil {
			return r, err
		}
	}
	if err != nil {
		return r, err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return r, err
	}
	r.Plan = strings.Join(lines, "\n")
	seen := map[string]bool{}
	for _, m := range indexName.FindAllStringSubmatch(r.Plan, -1) {
		name := m[1] + m[2]
		if !seen[name] {
			seen[name] = true
			r.Indexes = append(r.Indexes, name)
		}
	}
	r.SeqScan = seqScan.MatchString(r.Plan)
	return r, nil
}

// capture records the statement a generated method sends, and sends
// nothing.
type capture struct {
	sql  string
	args []any
}

var errCaptured = errors.New("captured")

func (c *capture) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.sql, c.args = sql, args
	return pgconn.CommandTag{}, errCaptured
}

func (c *capture) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.sql, c.args = sql, args
	return nil, errCaptured
}

func (c *capture) QueryRow(context.Context, string, ...any) pgx.Row { return errRow{} }

func (c *capture) CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error) {
	return 0, errCaptured
}

type errRow struct{}

func (errRow) Scan(...any) error { return errCaptured }
