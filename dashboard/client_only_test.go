package dashboard

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDashboardReadsThroughTheClient: the dashboard's code imports no
// generated query package (db): what it reads and changes goes through
// hopper.Client, whose methods are the tested, typed, schema-scoped way
// in, so that a query's change is made once, for every caller.
func TestDashboardReadsThroughTheClient(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			require.NotEqual(t, "github.com/hopperq/hopper/db", p, "%s imports db: add what it needs to hopper.Client", path)
		}
	}
}
