// Command apilist prints the exported API of a Go package, one declaration
// a line, sorted by name (a type's fields and methods right after it): what api/*.txt hold so that a review sees every change
// to Hopper's public surface in a diff (.ci/api-check.sh).
//
//	go run ./internal/tools/doccheck/apilist IMPORT_PATH
//
// Each line starts with its kind: const (with its value), var, func,
// type (its definition; a struct or interface as "struct" or
// "interface", followed by its lines), field (with its tag), embed and
// method. Signatures list parameter types, not names: renaming a
// parameter is no API change. The types come from the export data the go
// command builds (go list -export), read with go/types, so the listing
// does not depend on the Go release's export data format.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: apilist IMPORT_PATH")
		os.Exit(2)
	}
	lines, err := listing(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "apilist: %v\n", err)
		os.Exit(1)
	}
	for _, l := range lines {
		fmt.Println(l)
	}
}

// listing loads a package from its export data and lists its API.
func listing(path string) ([]string, error) {
	exports, err := exportData(path)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(p string) (io.ReadCloser, error) {
		file, ok := exports[p]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", p)
		}
		return os.Open(file)
	})
	pkg, err := imp.Import(path)
	if err != nil {
		return nil, err
	}
	return API(pkg), nil
}

// exportData builds the export data of a package and its dependencies
// and returns where each is.
func exportData(path string) (map[string]string, error) {
	cmd := exec.Command("go", "list", "-export", "-deps", "-json=ImportPath,Export", "--", path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -export %s: %v: %s", path, err, strings.TrimSpace(stderr.String()))
	}
	exports := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct{ ImportPath, Export string }
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		if p.Export != "" {
			exports[p.ImportPath] = p.Export
		}
	}
	return exports, nil
}

// API lists the exported declarations of pkg, sorted.
func API(pkg *types.Package) []string {
	q := func(p *types.Package) string {
		if p == pkg {
			return ""
		}
		return p.Name()
	}
	ts := func(t types.Type) string { return types.TypeString(t, q) }
	type entry struct{ owner, line string }
	var entries []entry
	owner := ""
	add := func(format string, args ...any) {
		entries = append(entries, entry{owner, fmt.Sprintf(format, args...)})
	}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		owner = name
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Const:
			add("const %s %s = %s", name, ts(obj.Type()), obj.Val().ExactString())
		case *types.Var:
			add("var %s %s", name, ts(obj.Type()))
		case *types.Func:
			sig := obj.Type().(*types.Signature)
			add("func %s%s%s", name, typeParams(sig.TypeParams(), q), signature(sig, q))
		case *types.TypeName:
			if alias, ok := obj.Type().(*types.Alias); ok {
				add("type %s%s = %s", name, typeParams(alias.TypeParams(), q), ts(alias.Rhs()))
				continue
			}
			named, ok := obj.Type().(*types.Named)
			if !ok {
				add("type %s %s", name, ts(obj.Type().Underlying()))
				continue
			}
			tp := typeParams(named.TypeParams(), q)
			switch u := named.Underlying().(type) {
			case *types.Struct:
				add("type %s%s struct", name, tp)
				for i := 0; i < u.NumFields(); i++ {
					f := u.Field(i)
					if !f.Exported() {
						continue
					}
					kind := "field"
					if f.Embedded() {
						kind = "embed"
					}
					line := fmt.Sprintf("%s %s.%s %s", kind, name, f.Name(), ts(f.Type()))
					if tag := u.Tag(i); tag != "" {
						line += " " + strconv.Quote(tag)
					}
					entries = append(entries, entry{owner, line})
				}
			case *types.Interface:
				if !u.IsMethodSet() {
					add("type %s%s %s", name, tp, ts(u)) // a constraint: its type set
					continue
				}
				add("type %s%s interface", name, tp)
				for i := 0; i < u.NumEmbeddeds(); i++ {
					add("embed %s.%s", name, ts(u.EmbeddedType(i)))
				}
				for i := 0; i < u.NumExplicitMethods(); i++ {
					m := u.ExplicitMethod(i)
					if m.Exported() {
						add("method (%s) %s%s", name, m.Name(), signature(m.Type().(*types.Signature), q))
					}
				}
			default:
				add("type %s%s %s", name, tp, ts(u))
			}
			for i := 0; i < named.NumMethods(); i++ {
				m := named.Method(i)
				if !m.Exported() {
					continue
				}
				sig := m.Type().(*types.Signature)
				add("method (%s) %s%s", ts(sig.Recv().Type()), m.Name(), signature(sig, q))
			}
		}
	}
	// A type's lines stay together, its definition first, then its
	// fields, embedded types and methods, each group sorted.
	rank := func(l string) string {
		for i, k := range []string{"const ", "var ", "func ", "type ", "field ", "embed ", "method "} {
			if strings.HasPrefix(l, k) {
				return strconv.Itoa(i)
			}
		}
		return "9"
	}
	sort.Slice(entries, func(i, j int) bool {
		a, b := entries[i], entries[j]
		if a.owner != b.owner {
			return a.owner < b.owner
		}
		if ra, rb := rank(a.line), rank(b.line); ra != rb {
			return ra < rb
		}
		return a.line < b.line
	})
	lines := make([]string, len(entries))
	for i, e := range entries {
		lines[i] = e.line
	}
	return lines
}

// typeParams writes [T any, K comparable], or nothing.
func typeParams(list *types.TypeParamList, q types.Qualifier) string {
	if list.Len() == 0 {
		return ""
	}
	var parts []string
	for i := 0; i < list.Len(); i++ {
		tp := list.At(i)
		parts = append(parts, tp.Obj().Name()+" "+types.TypeString(tp.Constraint(), q))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// signature writes (T1, T2) (R1, R2) without parameter names.
func signature(sig *types.Signature, q types.Qualifier) string {
	var params []string
	for i := 0; i < sig.Params().Len(); i++ {
		t := sig.Params().At(i).Type()
		if sig.Variadic() && i == sig.Params().Len()-1 {
			params = append(params, "..."+types.TypeString(t.(*types.Slice).Elem(), q))
			continue
		}
		params = append(params, types.TypeString(t, q))
	}
	s := "(" + strings.Join(params, ", ") + ")"
	switch n := sig.Results().Len(); n {
	case 0:
	case 1:
		s += " " + types.TypeString(sig.Results().At(0).Type(), q)
	default:
		var res []string
		for i := 0; i < n; i++ {
			res = append(res, types.TypeString(sig.Results().At(i).Type(), q))
		}
		s += " (" + strings.Join(res, ", ") + ")"
	}
	return s
}
