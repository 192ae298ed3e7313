package schema_test

import (
	"context"
	"io/fs"
	"os"
	osexec "os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/schema"
)

// TestStatementSplitter: the lexer's cases, one table row each: where a
// statement ends (never inside a string, quoted name, comment, dollar
// quote, parentheses or a BEGIN ATOMIC body) and how an ALTER TABLE's
// subcommands are split (never at a comma inside parentheses, brackets or
// a string).
func TestStatementSplitter(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		in   string
		want []string
	}{
		{"two statements, comments left out", "-- a\nSELECT 1;\n/* b */ SELECT 2; -- c\n", []string{"SELECT 1;", "SELECT 2;"}},
		{"no final semicolon", "SELECT 1", []string{"SELECT 1"}},
		{"semicolons in strings and names", `SELECT 'a;''b', "c;""d", E'e\';f';`, []string{`SELECT 'a;''b', "c;""d", E'e\';f';`}},
		{"nested block comment", "SELECT /* a /* ; */ ; */ 1; SELECT 2;", []string{"SELECT /* a /* ; */ ; */ 1;", "SELECT 2;"}},
		{"dollar quotes", "DO $$ BEGIN PERFORM 1; END $$; CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $x$ SELECT 1; $$ $x$; SELECT $1;",
			[]string{"DO $$ BEGIN PERFORM 1; END $$;", "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $x$ SELECT 1; $$ $x$;", "SELECT $1;"}},
		{"a dollar inside a name", "SELECT a$b; SELECT 1;", []string{"SELECT a$b;", "SELECT 1;"}},
		{"BEGIN ATOMIC body", "CREATE OR REPLACE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT CASE WHEN true THEN 1 END; SELECT 2; END; SELECT 3;",
			[]string{"CREATE OR REPLACE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT CASE WHEN true THEN 1 END; SELECT 2; END;", "SELECT 3;"}},
		{"BEGIN outside a function", "BEGIN; SELECT 1; END;", []string{"BEGIN;", "SELECT 1;", "END;"}},
		{"semicolon in parentheses", "CREATE RULE r AS ON INSERT TO t DO (SELECT 1; SELECT 2); SELECT 3;", []string{"CREATE RULE r AS ON INSERT TO t DO (SELECT 1; SELECT 2);", "SELECT 3;"}},
		{"ALTER TABLE split", "ALTER TABLE t\n    ADD COLUMN a numeric(10, 2) DEFAULT f(1, ','),\n    ADD CONSTRAINT c CHECK (a = ANY (ARRAY[1, 2])) NOT VALID;",
			[]string{"ALTER TABLE t ADD COLUMN a numeric(10, 2) DEFAULT f(1, ',');", "ALTER TABLE t ADD CONSTRAINT c CHECK (a = ANY (ARRAY[1, 2])) NOT VALID;"}},
		{"ALTER TABLE head kept", `ALTER TABLE IF EXISTS ONLY s."T x" ALTER COLUMN a SET DEFAULT 1, DROP COLUMN b;`,
			[]string{`ALTER TABLE IF EXISTS ONLY s."T x" ALTER COLUMN a SET DEFAULT 1;`, `ALTER TABLE IF EXISTS ONLY s."T x" DROP COLUMN b;`}},
		{"one subcommand", "ALTER TABLE t ADD CONSTRAINT c CHECK (a IN (1, 2));", []string{"ALTER TABLE t ADD CONSTRAINT c CHECK (a IN (1, 2));"}},
		{"not ALTER TABLE", "ALTER INDEX i SET (fillfactor = 70, deduplicate_items = off);", []string{"ALTER INDEX i SET (fillfactor = 70, deduplicate_items = off);"}},
	} {
		got, err := schema.CitusStatements(c.in)
		require.NoError(t, err, c.name)
		require.Equal(t, c.want, got, c.name)
	}
	for _, bad := range []string{"SELECT 'a", `SELECT "a`, "SELECT $$ a", "SELECT /* a /* */"} {
		_, err := schema.CitusStatements(bad)
		require.Error(t, err, "%q does not lex", bad)
	}
}

// TestCitusStatementsAreEquivalent: on plain PostgreSQL, every migration
// file, up and down, sent as the statements the migrator sends Citus (one
// at a time, ALTER TABLEs split, migration 24's check moved) leaves the
// same catalog as the file sent whole, as golang-migrate sends it: the
// two schemas are compared after each file whose statements are split or
// moved, at the latest version and after the last down (tables, columns, defaults,
// constraints with their inheritance, indexes, partitions, triggers,
// functions with their bodies and settings, views, grants, sequences),
// and with pg_dump at the latest version.
func TestCitusStatementsAreEquivalent(t *testing.T) {
	testdb.Slow(t, "every migration applied twice, up and down, the catalog compared after each")
	_, whole := setup(t)
	// setup's context gives a minute; two schemas' 62 files, compared
	// after each, take longer on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	split := testdb.NewEmpty(t)

	var ups, downs []string
	entries, err := fs.ReadDir(schema.Files, ".")
	require.NoError(t, err)
	for _, e := range entries {
		switch {
		case strings.HasSuffix(e.Name(), ".up.sql"):
			ups = append(ups, e.Name())
		case strings.HasSuffix(e.Name(), ".down.sql"):
			downs = append(downs, e.Name())
		}
	}
	slices.Reverse(downs)
	require.Len(t, ups, len(schema.Versions()))

	var compared []string
	apply := func(name string) {
		text, err := fs.ReadFile(schema.Files, name)
		require.NoError(t, err)
		_, err = whole.Pool.Exec(ctx, string(text))
		require.NoError(t, err, "%s sent whole", name)
		stmts, err := schema.CitusStatements(string(text))
		require.NoError(t, err, name)
		tx, err := split.Pool.Begin(ctx)
		require.NoError(t, err)
		for _, s := range stmts {
			_, err := tx.Exec(ctx, s)
			require.NoError(t, err, "%s, statement by statement: %s", name, s)
		}
		require.NoError(t, tx.Commit(ctx))
		// The file's own statements one by one in a transaction are the
		// file; the catalogs are compared after each file whose
		// statements Citus is sent split or moved (and at the ends).
		own, err := schema.SplitStatements(string(text))
		require.NoError(t, err)
		if !slices.Equal(own, stmts) {
			compared = append(compared, name)
			require.Equal(t, catalog(t, ctx, whole, whole.Schema), catalog(t, ctx, split, split.Schema),
				"%s: the catalog differs between the file sent whole and statement by statement", name)
		}
	}
	for _, name := range ups {
		apply(name)
	}
	require.Equal(t, catalog(t, ctx, whole, whole.Schema), catalog(t, ctx, split, split.Schema), "at the latest version")
	if _, err := osexec.LookPath("pg_dump"); err == nil {
		require.Equal(t, dump(t, whole), dump(t, split), "pg_dump at the latest version")
	} else if os.Getenv("CI") != "" {
		t.Fatal("pg_dump is missing")
	}
	for _, name := range downs {
		apply(name)
	}
	require.Empty(t, catalog(t, ctx, split, split.Schema), "every down applied")
	t.Logf("compared after %s", strings.Join(compared, ", "))
	require.Subset(t, compared, []string{"000003_operate.up.sql", "000024_dead_partitions.up.sql", "000028_meta_room.down.sql"})
}

// TestCitusPathMigratesPlainPostgreSQL: the migrator's Citus path (the
// statements sent one by one on a session of its own, the settings on its
// sessions) migrates a plain PostgreSQL schema up, to a schema Check
// passes with the catalog of one migrated the usual way, and down again.
func TestCitusPathMigratesPlainPostgreSQL(t *testing.T) {
	ctx, d := setup(t)
	usual := testdb.NewEmpty(t)
	require.NoError(t, schema.Up(ctx, usual.Pool))

	var lines []string
	mg, err := schema.NewMigrator(ctx, d.Pool, schema.CitusPath(), schema.Logf(func(f string, args ...any) {
		lines = append(lines, f)
	}))
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close()) }()
	require.NoError(t, mg.Up(ctx))
	require.Contains(t, lines, "migrate: Citus %s: each migration is sent statement by statement, in one transaction")
	v, dirty, err := mg.Version()
	require.NoError(t, err)
	require.Equal(t, schema.Latest(), v)
	require.False(t, dirty)
	require.NoError(t, schema.Check(ctx, d.Pool))
	require.Equal(t, catalog(t, ctx, usual, usual.Schema), catalog(t, ctx, d, d.Schema))

	require.NoError(t, mg.Down(ctx, 0))
	require.Equal(t, []string{"relation hopper_schema_migrations", "relation hopper_schema_migrations_pkey"},
		objects(t, ctx, d, d.Schema), "down leaves nothing but the migrations table")
}

// catalog describes what a schema holds, line by line, its own name
// replaced by $schema.
func catalog(t *testing.T, ctx context.Context, d *testdb.DB, name string) []string {
	t.Helper()
	rows, err := d.Pool.Query(ctx, `
		WITH ns AS (SELECT oid FROM pg_namespace WHERE nspname = $1)
		SELECT replace(line, $1, '$schema') FROM (
			SELECT concat_ws(' ', 'relation', c.relname, c.relkind, c.relpersistence, c.relispartition, c.relacl::text, c.reloptions::text,
			                 pg_get_expr(c.relpartbound, c.oid), pg_get_partkeydef(c.oid),
			                 c.relhastriggers, c.relrowsecurity, c.relreplident) AS line
			FROM pg_class c WHERE c.relnamespace = (SELECT oid FROM ns) AND c.relkind <> 'i' AND c.relkind <> 'I'
			UNION ALL
			SELECT concat_ws(' ', 'column', c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
			                 pg_get_expr(ad.adbin, ad.adrelid), a.attcollation::regcollation::text, a.attidentity, a.attgenerated,
			                 a.attislocal, a.attinhcount)
			FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
			LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
			WHERE c.relnamespace = (SELECT oid FROM ns) AND a.attnum > 0 AND NOT a.attisdropped
			UNION ALL
			SELECT concat_ws(' ', 'constraint', c.relname, k.conname, pg_get_constraintdef(k.oid), k.convalidated, k.conislocal,
			                 k.coninhcount, k.connoinherit, k.condeferrable)
			FROM pg_constraint k LEFT JOIN pg_class c ON c.oid = k.conrelid WHERE k.connamespace = (SELECT oid FROM ns)
			UNION ALL
			SELECT concat_ws(' ', 'index', c.relname, pg_get_indexdef(c.oid), i.indisvalid, p.relname)
			FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
			LEFT JOIN pg_inherits h ON h.inhrelid = c.oid LEFT JOIN pg_class p ON p.oid = h.inhparent
			WHERE c.relnamespace = (SELECT oid FROM ns)
			UNION ALL
			SELECT concat_ws(' ', 'trigger', pg_get_triggerdef(tg.oid), tg.tgenabled)
			FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid WHERE c.relnamespace = (SELECT oid FROM ns) AND NOT tg.tgisinternal
			UNION ALL
			SELECT concat_ws(' ', 'function', pg_get_functiondef(p.oid), p.proacl::text)
			FROM pg_proc p WHERE p.pronamespace = (SELECT oid FROM ns)
			UNION ALL
			SELECT concat_ws(' ', 'view', c.relname, pg_get_viewdef(c.oid))
			FROM pg_class c WHERE c.relnamespace = (SELECT oid FROM ns) AND c.relkind IN ('v', 'm')
			UNION ALL
			SELECT concat_ws(' ', 'sequence', c.relname, q.seqtypid::regtype::text, q.seqstart, q.seqincrement, q.seqmin, q.seqmax, q.seqcache, q.seqcycle)
			FROM pg_sequence q JOIN pg_class c ON c.oid = q.seqrelid WHERE c.relnamespace = (SELECT oid FROM ns)
			UNION ALL
			SELECT concat_ws(' ', 'type', ty.typname, ty.typtype)
			FROM pg_type ty WHERE ty.typnamespace = (SELECT oid FROM ns) AND ty.typrelid = 0 AND ty.typelem = 0
		) AS all_lines ORDER BY 1`, name)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return lines
}

// dump is pg_dump's schema-only text of d's schema, its name replaced.
func dump(t *testing.T, d *testdb.DB) string {
	t.Helper()
	url := testdb.Server(t)
	out, err := osexec.Command("pg_dump", url, "--schema-only", "--no-owner", "--schema="+d.Schema).Output()
	require.NoError(t, err)
	text := regexp.MustCompile(`(?m)^(\\(un)?restrict .*|-- Dumped (from|by) .*)$`).ReplaceAllString(string(out), "")
	return strings.ReplaceAll(text, d.Schema, "$schema")
}
