package schema_test

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/tools/sqlfuncs"
)

// TestFunctionSources proves that schema/functions/ is the truth of
// today: every function of a freshly migrated schema has its file
// (NAME.sql), each file's bodies are the ones the database holds for that
// name (pg_proc.prosrc, overloads included) with the settings it gives
// them (pg_proc.proconfig's names), no file names a function the schema
// lacks, and each trigger (partitions' clones aside) runs the
// function whose file defines it. make check-generated proves the other
// half: that the files are what the migrations define.
func TestFunctionSources(t *testing.T) {
	ctx, _ := setup(t)
	d := testdb.New(t)

	files := map[string][]string{}
	definitions := map[string][]string{}
	settings := map[string][]string{}
	fileTriggers := map[string]string{}
	paths, err := filepath.Glob(filepath.Join("functions", "*.sql"))
	require.NoError(t, err)
	require.NotEmpty(t, paths, "schema/functions/ is empty: run make generate")
	for _, p := range paths {
		src, err := os.ReadFile(p)
		require.NoError(t, err)
		name := strings.TrimSuffix(filepath.Base(p), ".sql")
		// A renamed function's CREATE names it as it was made
		// (hopper_enqueue_many_checked): every body in the file is the
		// file's function's.
		for _, bodies := range sqlfuncs.Bodies(string(src)) {
			files[name] = sorted(append(files[name], bodies...))
		}
		settings[name] = sqlfuncs.Settings(string(src))
		for _, defs := range sqlfuncs.Definitions(string(src)) {
			definitions[name] = append(definitions[name], defs...)
		}
		for tg, fn := range sqlfuncs.Triggers(string(src)) {
			require.Equal(t, name, fn, "%s: trigger %s runs another function", p, tg)
			fileTriggers[tg] = fn
		}
	}

	rows, err := d.Pool.Query(ctx, `SELECT p.proname, p.prosrc FROM pg_proc AS p
		WHERE p.pronamespace = $1::regnamespace ORDER BY 1`, d.Schema)
	require.NoError(t, err)
	held := map[string][]string{}
	for _, r := range must(pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Name, Src string }]))(t) {
		held[r.Name] = append(held[r.Name], r.Src)
	}
	for name := range held {
		held[name] = sorted(held[name])
	}
	for name, bodies := range held {
		_, ok := files[name]
		require.True(t, ok, "function %s has no schema/functions/%s.sql: run make generate", name, name)
		require.Equal(t, bodies, files[name], "schema/functions/%s.sql differs from the function the migrations make", name)
	}
	for name := range files {
		_, ok := held[name]
		require.True(t, ok, "schema/functions/%s.sql names a function the schema lacks", name)
	}

	// The settings each function holds (search_path, jit, plan_cache_mode)
	// are the ones its file gives it: a CREATE OR REPLACE sets them anew,
	// so a file shows only those made with or after its latest definition.
	rows, err = d.Pool.Query(ctx, `SELECT p.proname, coalesce(array_agg(DISTINCT lower(split_part(c, '=', 1)))
		    FILTER (WHERE c IS NOT NULL), '{}')
		FROM pg_proc AS p LEFT JOIN LATERAL unnest(p.proconfig) AS c ON true
		WHERE p.pronamespace = $1::regnamespace GROUP BY p.proname`, d.Schema)
	require.NoError(t, err)
	for _, f := range must(pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		Name     string
		Settings []string
	}]))(t) {
		require.Equal(t, sorted(f.Settings), settings[f.Name], "schema/functions/%s.sql: the settings differ from the function's", f.Name)
	}

	// A SQL-standard body (BEGIN ATOMIC) is stored parsed, with no source:
	// the file's statement is run under another name, and the two bodies
	// PostgreSQL prints back are compared.
	rows, err = d.Pool.Query(ctx, `SELECT p.proname, pg_get_function_sqlbody(p.oid) FROM pg_proc AS p
		WHERE p.pronamespace = $1::regnamespace AND p.prosqlbody IS NOT NULL ORDER BY 1`, d.Schema)
	require.NoError(t, err)
	atomic := must(pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Name, Body string }]))(t)
	require.NotEmpty(t, atomic, "no BEGIN ATOMIC function left: drop this part of the test")
	for _, f := range atomic {
		require.Len(t, definitions[f.Name], 1, "schema/functions/%s.sql: one definition", f.Name)
		copyName := f.Name + "_file_copy"
		stmt := strings.Replace(definitions[f.Name][0], f.Name+"(", copyName+"(", 1)
		_, err := d.Pool.Exec(ctx, stmt)
		require.NoError(t, err, "schema/functions/%s.sql", f.Name)
		var body string
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT pg_get_function_sqlbody(p.oid) FROM pg_proc AS p
			WHERE p.pronamespace = $1::regnamespace AND p.proname = $2`, d.Schema, copyName).Scan(&body))
		// PostgreSQL qualifies the parameters with the function's name.
		body = strings.ReplaceAll(body, copyName+".", f.Name+".")
		require.Equal(t, f.Body, body, "schema/functions/%s.sql differs from the function the migrations make", f.Name)
	}

	rows, err = d.Pool.Query(ctx, `SELECT tg.tgname, p.proname FROM pg_trigger AS tg
		JOIN pg_class AS c ON c.oid = tg.tgrelid
		JOIN pg_proc AS p ON p.oid = tg.tgfoid
		WHERE c.relnamespace = $1::regnamespace AND NOT tg.tgisinternal AND tg.tgparentid = 0`, d.Schema)
	require.NoError(t, err)
	dbTriggers := map[string]string{}
	for _, r := range must(pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Trigger, Function string }]))(t) {
		dbTriggers[r.Trigger] = r.Function
	}
	require.NotEmpty(t, dbTriggers)
	require.Equal(t, dbTriggers, fileTriggers, "the triggers in schema/functions/ differ from the schema's")
}

func sorted(s []string) []string {
	s = append([]string{}, s...)
	sort.Strings(s)
	return s
}

// must turns a value and an error into a function that fails the test on
// the error, so that a collected result reads in one line.
func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		require.NoError(t, err)
		return v
	}
}
