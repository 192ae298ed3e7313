package hopper_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestErrorTextsSayHopperOnce holds the library to CONTRIBUTING.md's rule
// for error texts, so that no message says "hopper:" twice: a sentinel (a
// package-level errors.New) starts with "hopper: " and lives in its
// package's errors.go; any other error text, which wraps a sentinel or a
// database error with context, never starts with it.
func TestErrorTextsSayHopperOnce(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{".", "jobs", "worker", "schema", "shard", "hoppertest", "dashboard", "internal/schemascope", "internal/migrated", "internal/grants"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			require.NoError(t, err)
			sentinels := map[*ast.CallExpr]bool{}
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.VAR {
					continue
				}
				for _, spec := range gd.Specs {
					for _, v := range spec.(*ast.ValueSpec).Values {
						if call, ok := v.(*ast.CallExpr); ok && isCall(call, "errors", "New") {
							sentinels[call] = true
						}
					}
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || !(isCall(call, "errors", "New") || isCall(call, "fmt", "Errorf")) || len(call.Args) == 0 {
					return true
				}
				lit, ok := call.Args[0].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				text, _ := strconv.Unquote(lit.Value)
				where := fset.Position(call.Pos())
				switch {
				case sentinels[call] && !strings.HasPrefix(text, "hopper: "):
					t.Errorf("%s: sentinel %q must start with \"hopper: \"", where, text)
				case sentinels[call] && !strings.HasPrefix(dir, "internal/") && filepath.Base(path) != "errors.go" && ast.IsExported(sentinelName(f, call)):
					t.Errorf("%s: exported sentinel %q belongs in %s", where, text, filepath.Join(dir, "errors.go"))
				case !sentinels[call] && strings.HasPrefix(text, "hopper:"):
					t.Errorf("%s: %q: only sentinels start with \"hopper:\"; wrap one instead, with context before it", where, text)
				}
				return true
			})
		}
	}
}

func isCall(call *ast.CallExpr, pkg, name string) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg && sel.Sel.Name == name
}

// sentinelName is the name a package-level errors.New is assigned to.
func sentinelName(f *ast.File, call *ast.CallExpr) string {
	for _, decl := range f.Decls {
		if gd, ok := decl.(*ast.GenDecl); ok {
			for _, spec := range gd.Specs {
				vs, ok := spec.(*ast.ValueSpec)
				if !ok {
					continue
				}
				for i, v := range vs.Values {
					if v == call && i < len(vs.Names) {
						return vs.Names[i].Name
					}
				}
			}
		}
	}
	return ""
}
