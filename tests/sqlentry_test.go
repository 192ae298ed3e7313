package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/stretchr/testify/require"
)

// TestSQLEntryReproducesDB: an export plus the sqlc.yaml entry that
// hopper sql entry prints, run through the pinned sqlc, generate exactly
// Hopper's own db package: the same Go types an embedding project gets.
func TestSQLEntryReproducesDB(t *testing.T) {
	testdb.Slow(t, "sqlc compiles the exported queries")
	t.Parallel()
	dir := t.TempDir()
	r := runHopper(t, "", "", "sql", "export", filepath.Join(dir, "third_party", "hopper"))
	require.Zero(t, r.code, r.stderr)
	r = runHopper(t, "", "", "sql", "entry", "--package", "db", "--out", "db", "third_party/hopper")
	require.Zero(t, r.code, r.stderr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sqlc.yaml"), []byte("version: \"2\"\nsql:\n"+r.stdout), 0o644))

	// The pinned sqlc runs from the repository, as make generate runs it.
	cmd := exec.Command("go", "tool", "-modfile=tools/go.mod", "sqlc", "generate", "-f", filepath.Join(dir, "sqlc.yaml"))
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))

	want, err := filepath.Glob(filepath.Join("..", "db", "*.go"))
	require.NoError(t, err)
	require.NotEmpty(t, want)
	got, err := filepath.Glob(filepath.Join(dir, "db", "*.go"))
	require.NoError(t, err)
	require.Len(t, got, len(want))
	for _, w := range want {
		wantText, err := os.ReadFile(w)
		require.NoError(t, err)
		gotText, err := os.ReadFile(filepath.Join(dir, "db", filepath.Base(w)))
		require.NoError(t, err)
		require.Equal(t, string(wantText), string(gotText), filepath.Base(w))
	}
}
