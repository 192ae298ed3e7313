package hopper_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPublicAPIMentionsNoGeneratedTypes: no exported signature, field or
// type of the public packages names a type of db (sqlc's output, exported
// only for applications that embed Hopper's SQL) or pgtype. The public API
// is the hand-written one: jobs.Row, jobs.State, time.Time, int.
func TestPublicAPIMentionsNoGeneratedTypes(t *testing.T) {
	t.Parallel()
	forbidden := map[string]bool{
		"github.com/hopperq/hopper/db":       true,
		"github.com/jackc/pgx/v5/pgtype":     true,
		"github.com/hopperq/hopper/internal": true,
	}
	for _, dir := range []string{".", "jobs", "worker", "schema", "shard", "queries"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		require.NotEmpty(t, files, dir)
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			src, err := os.ReadFile(path)
			require.NoError(t, err)
			f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.SkipObjectResolution)
			require.NoError(t, err)
			banned := map[string]string{} // the file's name for each forbidden import
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				for prefix := range forbidden {
					if p == prefix || strings.HasPrefix(p, prefix+"/") {
						name := p[strings.LastIndex(p, "/")+1:]
						if imp.Name != nil {
							name = imp.Name.Name
						}
						banned[name] = p
					}
				}
			}
			for _, where := range exportedTypeExprs(f) {
				ast.Inspect(where.expr, func(n ast.Node) bool {
					if sel, ok := n.(*ast.SelectorExpr); ok {
						if id, ok := sel.X.(*ast.Ident); ok && banned[id.Name] != "" {
							t.Errorf("%s: exported %s mentions %s.%s (%s)", path, where.what, id.Name, sel.Sel.Name, banned[id.Name])
						}
					}
					return true
				})
			}
		}
	}
}

type typeExpr struct {
	what string
	expr ast.Expr
}

// exportedTypeExprs lists the type expressions of a file's exported API:
// signatures of exported functions and of exported methods of exported
// types, exported types (their exported fields and methods), and the types
// of exported variables and constants.
func exportedTypeExprs(f *ast.File) []typeExpr {
	var out []typeExpr
	exportedRecv := func(fd *ast.FuncDecl) bool {
		if fd.Recv == nil {
			return true
		}
		t := fd.Recv.List[0].Type
		if star, ok := t.(*ast.StarExpr); ok {
			t = star.X
		}
		if idx, ok := t.(*ast.IndexExpr); ok {
			t = idx.X
		}
		if idx, ok := t.(*ast.IndexListExpr); ok {
			t = idx.X
		}
		id, ok := t.(*ast.Ident)
		return ok && id.IsExported()
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Name.IsExported() && exportedRecv(d) {
				out = append(out, typeExpr{"func " + d.Name.Name, d.Type})
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					switch st := s.Type.(type) {
					case *ast.StructType:
						for _, field := range st.Fields.List {
							if len(field.Names) == 0 || field.Names[0].IsExported() {
								out = append(out, typeExpr{"field of " + s.Name.Name, field.Type})
							}
						}
					default:
						out = append(out, typeExpr{"type " + s.Name.Name, s.Type})
					}
				case *ast.ValueSpec:
					for _, name := range s.Names {
						if name.IsExported() && s.Type != nil {
							out = append(out, typeExpr{"value " + name.Name, s.Type})
						}
					}
				}
			}
		}
	}
	return out
}
