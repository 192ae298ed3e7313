package schema_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// triggerRule is one rule of the triggers, told in plain SQL: the
// statements a caller of any language could run, then a query whose one
// text row says where things stand (or the error the last statement must
// fail with).
type triggerRule struct {
	name  string
	steps []string // run in order, each in a transaction of its own
	state string   // a query returning one text value
	want  string   // what state returns, or the error's text when fails is set
	fails bool     // the last step must fail with want in its error
}

// Workflow steps are inserted with explicit ids (OVERRIDING SYSTEM VALUE)
// and jobs enqueued through the SQL API take 1, 2, 3 from a fresh schema,
// so that each rule reads as a story about jobs 1, 2, 3.

func job(id, state, meta string) string {
	return `INSERT INTO hopper_jobs (id, queue, kind, payload, state, meta) OVERRIDING SYSTEM VALUE VALUES (` +
		id + `, 'default', 'k', '{}', '` + state + `', '` + meta + `')`
}

// enqueue is the SQL API's enqueue of a job with meta: a job of a
// sequence is placed by the triggers (the head, or waiting behind it).
func enqueue(meta string) string {
	return `SELECT hopper_enqueue('k', '{}', meta => '` + meta + `')`
}

func step(id, state, name string) string {
	return job(id, state, `{"hopper.workflow": "w", "hopper.step": "`+name+`"}`)
}

// cancelToDead moves job id to the dead table as cancelled, as CancelJobs does.
func cancelToDead(id string) string {
	return `WITH gone AS (DELETE FROM hopper_jobs WHERE id = ` + id + ` RETURNING *)
		INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt, max_attempts, unique_key, errors,
			reason, created_at, run_at, state, meta, concurrency_key)
		SELECT id, queue, kind, version, payload, priority, attempt, max_attempts, unique_key, errors,
			'cancelled', created_at, run_at, 'cancelled', meta, concurrency_key FROM gone`
}

const states = `SELECT string_agg(id || ':' || state, ' ' ORDER BY id) FROM hopper_all_jobs`

var triggerRules = []triggerRule{
	// Sequences (migration 13): one head per key, promoted by its end.
	{name: "a sequence's second job waits behind its head",
		steps: []string{enqueue(`{"hopper.sequence": "k"}`), enqueue(`{"hopper.sequence": "k"}`)},
		state: states, want: "1:pending 2:waiting"},
	{name: "the head's acknowledgement promotes the next job, in the same transaction",
		steps: []string{enqueue(`{"hopper.sequence": "k"}`), enqueue(`{"hopper.sequence": "k"}`),
			`DELETE FROM hopper_jobs WHERE id = 1`},
		state: states, want: "2:pending"},
	{name: "a dead head blocks its key (policy block)",
		steps: []string{enqueue(`{"hopper.sequence": "k"}`), enqueue(`{"hopper.sequence": "k"}`), cancelToDead("1")},
		state: `SELECT string_agg(sequence_key || ':' || job_id, ' ') FROM hopper_sequence_blocks`, want: "k:1"},
	{name: "a dead head under policy continue passes the turn",
		steps: []string{enqueue(`{"hopper.sequence": "k", "hopper.sequence_policy": "continue"}`),
			enqueue(`{"hopper.sequence": "k"}`), cancelToDead("1")},
		state: states, want: "1:cancelled 2:pending"},
	{name: "skipping a blocked key promotes its next job",
		steps: []string{enqueue(`{"hopper.sequence": "k"}`), enqueue(`{"hopper.sequence": "k"}`), cancelToDead("1"),
			`SELECT hopper_sequence_skip('k')`},
		state: states, want: "1:cancelled 2:pending"},
	{name: "other keys and keyless jobs are not held",
		steps: []string{enqueue(`{"hopper.sequence": "k"}`), enqueue(`{"hopper.sequence": "j"}`), job("3", "pending", `{}`)},
		state: states, want: "1:pending 2:pending 3:pending"},

	// Workflows (migrations 14 and 15): counted down by the parents' ends.
	{name: "a step waits until its last parent ends",
		steps: []string{step("1", "pending", "a") + `; ` + step("2", "pending", "b") + `; ` + step("3", "waiting", "c") +
			`; SELECT hopper_workflow_link('{1,2}', '{3,3}')`,
			`DELETE FROM hopper_jobs WHERE id = 1`},
		state: states, want: "2:pending 3:waiting"},
	{name: "the last parent's acknowledgement makes the step ready",
		steps: []string{step("1", "pending", "a") + `; ` + step("2", "pending", "b") + `; ` + step("3", "waiting", "c") +
			`; SELECT hopper_workflow_link('{1,2}', '{3,3}')`,
			`DELETE FROM hopper_jobs WHERE id = 1`, `DELETE FROM hopper_jobs WHERE id = 2`},
		state: states, want: "3:pending"},
	{name: "edges recorded one call at a time are all counted",
		steps: []string{step("1", "pending", "a") + `; ` + step("2", "pending", "b") + `; ` + step("3", "waiting", "c") +
			`; SELECT hopper_workflow_link('{1}', '{3}'); SELECT hopper_workflow_link('{2}', '{3}')`,
			`DELETE FROM hopper_jobs WHERE id = 1`},
		state: states, want: "2:pending 3:waiting"},
	{name: "a cancelled parent cancels its step (policy cancel, the default)",
		steps: []string{step("1", "pending", "a") + `; ` + step("2", "pending", "b") + `; ` + step("3", "waiting", "c") +
			`; SELECT hopper_workflow_link('{1,2}', '{3,3}')`,
			cancelToDead("1"), `DELETE FROM hopper_jobs WHERE id = 2`},
		state: states, want: "1:cancelled 3:cancelled"},
	{name: "a parent's failure outlives its purge",
		steps: []string{step("1", "pending", "a") + `; ` + step("2", "pending", "b") + `; ` + step("3", "waiting", "c") +
			`; SELECT hopper_workflow_link('{1,2}', '{3,3}')`,
			cancelToDead("1"), `DELETE FROM hopper_dead_jobs WHERE id = 1`, `DELETE FROM hopper_jobs WHERE id = 2`},
		state: states, want: "3:cancelled"},
	{name: "a parent that is no job is refused",
		steps: []string{step("3", "waiting", "c") + `; SELECT hopper_workflow_link('{99}', '{3}')`},
		want:  "SQLSTATE 22023", fails: true},
	{name: "a workflow's job is refused under REPEATABLE READ",
		steps: []string{step("1", "pending", "a"), `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; DELETE FROM hopper_jobs WHERE id = 1`},
		want:  "hopper: read committed required", fails: true},

	// The SQL API (migrations 12 and 16): Go's checks, in SQL.
	{name: "the SQL API enqueues with Go's defaults",
		steps: []string{`SELECT hopper_enqueue('email', '{"to": "a"}')`},
		state: `SELECT queue || ' ' || state || ' ' || max_attempts FROM hopper_jobs`, want: "default pending 25"},
	{name: "the SQL API refuses a run time Go cannot read back",
		steps: []string{`SELECT hopper_enqueue('email', '{}', run_at => 'infinity')`},
		want:  "SQLSTATE 22023", fails: true},
	{name: "the SQL API refuses a batch that is not an array",
		steps: []string{`SELECT * FROM hopper_enqueue_many('{"kind": "email"}')`},
		want:  "not a JSON array", fails: true},
}

// TestTriggerRules: the rules the triggers and the SQL API's functions
// keep, each as plain SQL against a freshly migrated schema, so that a
// change to a migration's PL/pgSQL is judged here, next to the schema,
// before the Go layers above it. Each migration's header names these
// tests.
func TestTriggerRules(t *testing.T) {
	t.Parallel()
	for _, rule := range triggerRules {
		t.Run(rule.name, func(t *testing.T) {
			b := testdb.Setup(t)
			for i, stmt := range rule.steps {
				err := pgx.BeginFunc(b.Ctx, b.Pool, func(tx pgx.Tx) error {
					_, err := tx.Exec(b.Ctx, stmt)
					return err
				})
				if rule.fails && i == len(rule.steps)-1 {
					require.Error(t, err, "step %d must fail", i+1)
					require.Contains(t, err.Error(), rule.want)
					return
				}
				require.NoError(t, err, "step %d: %s", i+1, strings.TrimSpace(stmt))
			}
			var got string
			require.NoError(t, b.Pool.QueryRow(b.Ctx, rule.state).Scan(&got))
			require.Equal(t, rule.want, got)
		})
	}
}
