// Package internal_test checks the module's folder-level layering (issue
// 66): every package's imports point down the layers CONTRIBUTING.md
// lists, never up, so that the library's internals, the test beds and the
// tools stay apart by audience.
package internal_test

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const module = "github.com/hopperq/hopper"

// layers are the folders from the bottom up: a package may import its own
// layer's packages and those of the layers below. The first prefix that
// matches a package's folder (relative to the module root) names its
// layer; "" is the root package.
var layers = [][]string{
	{"db"},
	{"internal/"}, // the library's internals, below what they serve
	{"jobs", "schema", "queries"},
	{"internal/rows", "internal/worker/"},
	{"", "worker"},
	{"shard"}, // a sharded Hopper on Citus: the Client and the worker over many schemas
	{"internal/testbed/", "internal/tools/"},
	{"hoppertest", "dashboard", "examples/"},
	{"cmd/"},
	{"tests"},
}

// layerOf is the index in layers of the folder dir, the longest matching
// prefix winning (internal/rows over internal/).
func layerOf(t *testing.T, dir string) int {
	t.Helper()
	best, bestLen := -1, -1
	for i, names := range layers {
		for _, name := range names {
			match := dir == strings.TrimSuffix(name, "/") ||
				(strings.HasSuffix(name, "/") && strings.HasPrefix(dir, name)) ||
				(name != "" && !strings.HasSuffix(name, "/") && strings.HasPrefix(dir, name+"/"))
			if match && len(name) > bestLen {
				best, bestLen = i, len(name)
			}
		}
	}
	require.GreaterOrEqual(t, best, 0, "folder %q is in no layer: add it to layers and to CONTRIBUTING.md's layout", dir)
	return best
}

func TestNoFolderImportsUpward(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if rel == "." {
			rel = ""
		}
		name := d.Name()
		if rel != "" && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		if rel != "" {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module: its own layering
			}
		}
		p, err := build.ImportDir(path, 0)
		if err != nil {
			return nil // no buildable Go files here
		}
		checked++
		from := layerOf(t, filepath.ToSlash(rel))
		for _, imp := range p.Imports {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			to := layerOf(t, strings.TrimPrefix(strings.TrimPrefix(imp, module), "/"))
			require.LessOrEqual(t, to, from, "%s imports %s, a layer above it (CONTRIBUTING.md, Layout)", rel, imp)
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, checked, 40, "the module's packages")
}
