package sqlfuncs

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the package when goroutines outlive its tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestExtractFollowsTheMigrations reads a small history: a function made,
// replaced, renamed, dropped, and a trigger made and remade. Each file
// holds what the latest migration wrote, with its comments and settings,
// and nothing of what went before.
func TestExtractFollowsTheMigrations(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"000001_a.up.sql": {Data: []byte(`-- The header.
CREATE TABLE t (id bigint);

-- f counts; a semicolon in its body; stays in it.
CREATE FUNCTION f(a integer, OUT b integer) LANGUAGE plpgsql AS $$
BEGIN
    b := a; -- ;
END;
$$;
CREATE FUNCTION g(x text DEFAULT 'a;b') RETURNS trigger LANGUAGE plpgsql AS $body$ BEGIN RETURN NULL; END; $body$;
CREATE FUNCTION old(x bigint[]) RETURNS integer LANGUAGE sql SET jit = off AS $$ SELECT 1 $$;
CREATE FUNCTION gone(x bigint) RETURNS integer LANGUAGE sql AS $$ SELECT 1 $$;
CREATE FUNCTION atomic(at timestamptz) RETURNS timestamptz LANGUAGE sql
BEGIN ATOMIC
    SELECT at;
END;
CREATE TRIGGER t_g AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION g();
`)},
		"000001_a.down.sql": {Data: []byte(`CREATE FUNCTION f() RETURNS void LANGUAGE sql AS $$ $$;`)},
		"000002_b.up.sql": {Data: []byte(`-- f now doubles.
CREATE OR REPLACE FUNCTION f(a integer, OUT b integer) LANGUAGE plpgsql AS $$
BEGIN
    UPDATE t SET id = 1;
    b := 2 * a;
END;
$$;
ALTER FUNCTION f(integer) SET jit = off;
ALTER FUNCTION old(bigint[]) RENAME TO renamed;
DROP FUNCTION gone(bigint);
DROP TRIGGER t_g ON t;
CREATE TRIGGER t_g AFTER DELETE ON t FOR EACH ROW EXECUTE FUNCTION g();
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %1$I.renamed(bigint[]) SET search_path = %1$I, pg_temp', current_schema());
END
$$;
`)},
	}
	files, err := Extract(fsys)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"f.sql", "g.sql", "renamed.sql", "atomic.sql"}, slices.Collect(maps.Keys(files)))

	f := string(files["f.sql"])
	require.Contains(t, f, "-- f(integer): defined by schema/000002_b.up.sql.\n--\n-- f now doubles.\n")
	require.Contains(t, f, "b := 2 * a;")
	require.NotContains(t, f, "b := a;", "the replaced body is gone")
	require.Contains(t, f, "-- Set by schema/000002_b.up.sql:\nALTER FUNCTION f(integer) SET jit = off;\n")
	require.Equal(t, map[string][]string{"f": {"\nBEGIN\n    UPDATE t SET id = 1;\n    b := 2 * a;\nEND;\n"}}, Bodies(f))
	require.Equal(t, []string{"jit"}, Settings(f), "the ALTER after the definition; the body's assignments are no settings")

	g := string(files["g.sql"])
	require.Contains(t, g, "$body$ BEGIN RETURN NULL; END; $body$;")
	require.Contains(t, g, "AFTER DELETE ON t")
	require.NotContains(t, g, "AFTER INSERT ON t")
	require.Equal(t, map[string]string{"t_g": "g"}, Triggers(g))

	r := string(files["renamed.sql"])
	require.Contains(t, r, "-- Then renamed from old to renamed by schema/000002_b.up.sql.")
	require.Contains(t, r, "-- EXECUTE format('ALTER FUNCTION %1$I.renamed(bigint[])")
	require.Equal(t, []string{"jit", "search_path"}, Settings(r), "the CREATE's SET clause, and the DO block's")

	a := string(files["atomic.sql"])
	require.True(t, strings.HasSuffix(a, "BEGIN ATOMIC\n    SELECT at;\nEND;\n"), a)
}

// TestExtractRefusesWhatItCannotPlace: a statement about a function no
// migration made is a misreading of the history, not a file to skip.
func TestExtractRefusesWhatItCannotPlace(t *testing.T) {
	t.Parallel()
	for _, stmt := range []string{
		"DROP FUNCTION nowhere(bigint);",
		"ALTER FUNCTION nowhere(bigint) SET jit = off;",
		"ALTER FUNCTION nowhere(bigint) RENAME TO elsewhere;",
		"DROP TRIGGER nothing ON t;",
		"CREATE TRIGGER t_x AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION nowhere();",
	} {
		_, err := Extract(fstest.MapFS{"000001_a.up.sql": {Data: []byte(stmt)}})
		require.Error(t, err, stmt)
	}
}
