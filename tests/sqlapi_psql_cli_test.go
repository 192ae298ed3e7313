package tests

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// TestSQLAPIPsqlContext: a refusal in psql prints the PL/pgSQL functions it
// passed through (CONTEXT) after ERROR and HINT; \set SHOW_CONTEXT never,
// which docs/sql-api.md gives to hide them, leaves exactly ERROR and HINT.
func TestSQLAPIPsqlContext(t *testing.T) {
	t.Parallel()
	psql, err := exec.LookPath("psql")
	if err != nil {
		missingTool(t, "psql is not installed (Debian: postgresql-client)")
	}
	d := testdb.New(t)
	refuse := `SELECT * FROM hopper_enqueue(kind => 'email', payload => '{}', priority => 12);` + "\n"
	run := func(script string) string {
		t.Helper()
		cmd := exec.Command(psql, "-X", "-q", "-t", "-A", "-f", "-", libpqURL(t, d))
		cmd.Stdin = strings.NewReader(script)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out) // without ON_ERROR_STOP, psql goes on and exits 0
		return string(out)
	}
	require.Contains(t, run(refuse), "CONTEXT:  PL/pgSQL function", "psql's default shows the context")
	out := run(`\set SHOW_CONTEXT never` + "\n" + refuse)
	require.Equal(t, "psql:<stdin>:2: ERROR:  enqueue email: hopper: invalid priority: 12 is outside 0 (first) to 9 (last)\n"+
		"HINT:  priority runs from 0 (runs first, the default) to 9 (runs last)\n", out)
}
