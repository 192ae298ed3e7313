package schema_test

import (
	"fmt"
	"os"
	"sort"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// explainedWarnings are the warnings plpgsql_check gives on the schema a
// fresh migrate up makes, each with the reason it stays. Any other warning
// fails TestPLpgSQLCheck, and so does an explanation whose warning is gone.
var explainedWarnings = map[string]string{
	"hopper_enqueue_many_checked:27:target type is different type than source type": "migration 12 (released): its twelve array variables start from untyped " +
		"literals ('{}', the fields' list), which PostgreSQL casts once, at the block's start, to each array's declared type",
	`hopper_workflow_decide:9:never read variable "woken"`: "the count of wake-ups is selected INTO woken only to run the " +
		"data-modifying WITH that promotes and notifies: PL/pgSQL cannot PERFORM a statement that starts with WITH",
}

// TestPLpgSQLCheck runs plpgsql_check (Debian's postgresql-15-plpgsql-check,
// which make test installs) on every PL/pgSQL function and trigger
// function of a freshly migrated schema, trigger functions against their
// table and transition tables, with its extra and other warnings on:
// errors a plain CREATE FUNCTION never reports (a misspelt column in a
// branch no test runs, a wrong type) surface here, before a user meets
// them.
func TestPLpgSQLCheck(t *testing.T) {
	ctx, _ := setup(t)
	d := testdb.New(t)
	var available bool
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_available_extensions WHERE name = 'plpgsql_check')`).Scan(&available))
	if !available {
		if os.Getenv("CI") != "" {
			t.Fatal("plpgsql_check is not installed (CI is set, so this fails): apt-get install postgresql-15-plpgsql-check")
		}
		t.Skip("plpgsql_check is not installed: apt-get install postgresql-15-plpgsql-check (make test does)")
	}
	// The extension is the database's, in a schema of its own; the lock
	// keeps two test binaries from creating it at once.
	tx, err := d.Pool.Begin(ctx)
	require.NoError(t, err)
	for _, stmt := range []string{
		`SELECT pg_advisory_xact_lock(hashtext('hopper tests: plpgsql_check'))`,
		`CREATE SCHEMA IF NOT EXISTS plpgsql_check`,
		`CREATE EXTENSION IF NOT EXISTS plpgsql_check SCHEMA plpgsql_check`,
	} {
		_, err := tx.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	require.NoError(t, tx.Commit(ctx))
	var ext string
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT n.nspname FROM pg_extension AS e JOIN pg_namespace AS n ON n.oid = e.extnamespace
		WHERE e.extname = 'plpgsql_check'`).Scan(&ext))

	rows, err := d.Pool.Query(ctx, `SELECT p.proname, c.lineno, c.message, c.level
		FROM pg_proc AS p
		JOIN pg_language AS l ON l.oid = p.prolang AND l.lanname = 'plpgsql'
		LEFT JOIN LATERAL (SELECT tg.tgrelid, tg.tgoldtable, tg.tgnewtable FROM pg_trigger AS tg
		                   WHERE tg.tgfoid = p.oid ORDER BY tg.tgname LIMIT 1) AS tg ON true
		CROSS JOIN LATERAL `+pgx.Identifier{ext, "plpgsql_check_function_tb"}.Sanitize()+`(p.oid, coalesce(tg.tgrelid, 0),
		    oldtable => tg.tgoldtable, newtable => tg.tgnewtable, other_warnings => true, extra_warnings => true) AS c
		WHERE p.pronamespace = $1::regnamespace`, d.Schema)
	require.NoError(t, err)
	type finding struct {
		Function string
		Line     *int32
		Message  string
		Level    string
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[finding])
	require.NoError(t, err)
	seen := map[string]bool{}
	var unexplained []string
	for _, f := range found {
		line := int32(0)
		if f.Line != nil {
			line = *f.Line
		}
		key := fmt.Sprintf("%s:%d:%s", f.Function, line, f.Message)
		seen[key] = true
		if _, ok := explainedWarnings[key]; !ok {
			unexplained = append(unexplained, f.Level+": "+key)
		}
	}
	sort.Strings(unexplained)
	require.Empty(t, unexplained, "plpgsql_check found what no explanation covers: fix the function, or explain it in explainedWarnings")
	for key := range explainedWarnings {
		require.True(t, seen[key], "explainedWarnings explains %q, which plpgsql_check no longer reports: remove it", key)
	}

	var checked int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_proc AS p JOIN pg_language AS l ON l.oid = p.prolang
		WHERE l.lanname = 'plpgsql' AND p.pronamespace = $1::regnamespace`, d.Schema).Scan(&checked))
	require.Greater(t, checked, 20, "the PL/pgSQL functions checked")
	t.Logf("plpgsql_check: %d PL/pgSQL functions checked, %d warnings, each explained", checked, len(found))
}
