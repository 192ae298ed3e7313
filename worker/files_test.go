package worker_test

// The file-level drawing of worker/ (issue 66): an arrow runs from file F
// to file G when F uses a name declared in G (a type, func, var or const
// of the package, or a method or field of one of its types). What stays in
// worker/ is layered: the drawing has no cycle, so every arrow runs down.

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fileGraph is the drawing: for each non-test file of the package in dir,
// the files it uses names of, and for each arrow the names it uses.
type fileGraph struct {
	files  []string
	arrows map[string]map[string][]string // from → to → names
}

// exportData maps each package dir's build depends on to its compiled
// export data, as the go command's build cache holds it; the importer
// reads those rather than type-checking every dependency from source.
func exportData(t *testing.T, dir string) map[string]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-export", "-deps", "-f", "{{if .Export}}{{.ImportPath}}={{.Export}}{{end}}", ".")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list -export: %s", stderr.String())
	paths := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if path, file, ok := strings.Cut(sc.Text(), "="); ok {
			paths[path] = file
		}
	}
	require.NoError(t, sc.Err())
	return paths
}

// drawFiles type-checks the non-test files of the package in dir and draws
// its file graph. A selector's name (a method, a field) is resolved by the
// type checker to the file that declares it.
func drawFiles(t *testing.T, dir string) fileGraph {
	t.Helper()
	p, err := build.ImportDir(dir, 0)
	require.NoError(t, err)
	fset := token.NewFileSet()
	var parsed []*ast.File
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		parsed = append(parsed, f)
	}
	exports := exportData(t, dir)
	lookup := func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", lookup)}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	_, err = conf.Check(p.ImportPath, fset, parsed, info)
	require.NoError(t, err)

	g := fileGraph{files: slices.Clone(p.GoFiles), arrows: map[string]map[string][]string{}}
	ours := map[string]bool{}
	for _, name := range p.GoFiles {
		ours[name] = true
	}
	for id, obj := range info.Uses {
		if obj == nil || obj.Pkg() == nil || obj.Pkg().Path() != p.ImportPath || !obj.Pos().IsValid() {
			continue
		}
		from := filepath.Base(fset.Position(id.Pos()).Filename)
		to := filepath.Base(fset.Position(obj.Pos()).Filename)
		if from == to || !ours[to] {
			continue
		}
		if g.arrows[from] == nil {
			g.arrows[from] = map[string][]string{}
		}
		name := qualified(obj)
		if !slices.Contains(g.arrows[from][to], name) {
			g.arrows[from][to] = append(g.arrows[from][to], name)
		}
	}
	for _, tos := range g.arrows {
		for _, names := range tos {
			sort.Strings(names)
		}
	}
	return g
}

// qualified names obj as a reader looks for it: a method or field with its
// type's name.
func qualified(obj types.Object) string {
	switch o := obj.(type) {
	case *types.Func:
		if recv := o.Signature().Recv(); recv != nil {
			return typeName(recv.Type()) + "." + o.Name()
		}
	case *types.Var:
		if o.IsField() {
			return "(field) " + o.Name()
		}
	}
	return obj.Name()
}

func typeName(t types.Type) string {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	if n, ok := t.(*types.Named); ok {
		return n.Obj().Name()
	}
	return t.String()
}

// count is how many arrows the drawing has.
func (g fileGraph) count() int {
	n := 0
	for _, tos := range g.arrows {
		n += len(tos)
	}
	return n
}

// cycles are the drawing's strongly connected components of more than one
// file (Tarjan's algorithm), each sorted, largest first.
func (g fileGraph) cycles() [][]string {
	index := map[string]int{}
	low := map[string]int{}
	on := map[string]bool{}
	var stack []string
	var out [][]string
	next := 0
	var visit func(string)
	visit = func(v string) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		on[v] = true
		tos := make([]string, 0, len(g.arrows[v]))
		for w := range g.arrows[v] {
			tos = append(tos, w)
		}
		sort.Strings(tos)
		for _, w := range tos {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if on[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] != index[v] {
			return
		}
		var scc []string
		for {
			w := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			on[w] = false
			scc = append(scc, w)
			if w == v {
				break
			}
		}
		if len(scc) > 1 {
			sort.Strings(scc)
			out = append(out, scc)
		}
	}
	for _, f := range g.files {
		if _, seen := index[f]; !seen {
			visit(f)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// layers is how many layers an acyclic drawing stands on: the files of
// its longest chain of arrows.
func (g fileGraph) layers() int {
	depth := map[string]int{}
	var of func(string) int
	of = func(f string) int {
		if d, ok := depth[f]; ok {
			return d
		}
		d := 1
		for to := range g.arrows[f] {
			d = max(d, of(to)+1)
		}
		depth[f] = d
		return d
	}
	n := 0
	for _, f := range g.files {
		n = max(n, of(f))
	}
	return n
}

// inside describes the arrows between the files of scc, with the names
// each uses: what to move to break the cycle.
func (g fileGraph) inside(scc []string) (string, int) {
	in := map[string]bool{}
	for _, f := range scc {
		in[f] = true
	}
	var b strings.Builder
	n := 0
	for _, from := range scc {
		tos := make([]string, 0, len(g.arrows[from]))
		for to := range g.arrows[from] {
			if in[to] {
				tos = append(tos, to)
			}
		}
		sort.Strings(tos)
		for _, to := range tos {
			n++
			fmt.Fprintf(&b, "  %s → %s: %s\n", from, to, strings.Join(g.arrows[from][to], ", "))
		}
	}
	return b.String(), n
}

// report is the failure's text: each cycle, its files and the arrows
// inside it.
func (g fileGraph) report(cycles [][]string) (string, int) {
	var b strings.Builder
	total := 0
	for _, scc := range cycles {
		text, n := g.inside(scc)
		total += n
		fmt.Fprintf(&b, "a cycle of %d files (%d arrows): %s\n%s", len(scc), n, strings.Join(scc, " "), text)
	}
	return b.String(), total
}

func TestFileGraphHasNoCycle(t *testing.T) {
	t.Parallel()
	g := drawFiles(t, ".")
	cycles := g.cycles()
	text, inCycles := g.report(cycles)
	largest := 0
	if len(cycles) > 0 {
		largest = len(cycles[0])
	}
	t.Logf("figure: worker/ non-test files %d, arrows %d, arrows in cycles %d, cycles %d, largest %d files",
		len(g.files), g.count(), inCycles, len(cycles), largest)
	if len(cycles) == 0 {
		t.Logf("figure: worker/'s files stand on %d layers (the longest chain of arrows, plus one)", g.layers())
	}
	require.Empty(t, cycles, "worker/'s files use each other in a cycle; move a name down so that every arrow runs one way:\n%s", text)
}

// TestFileGraphFindsCycles checks the checker on a package of three files
// that use each other in a ring through a method, a field and a func.
func TestFileGraphFindsCycles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module ring\n\ngo 1.25\n",
		"a.go":   "package ring\n\ntype A struct{ n int }\n\nfunc (a A) Go() int { return b().n }\n",
		"b.go":   "package ring\n\nfunc b() C { var c C; return c }\n",
		"c.go":   "package ring\n\ntype C struct{ n int }\n\nfunc (c C) Use(a A) int { return a.Go() }\n",
		"d.go":   "package ring\n\nfunc d() int { return b().n }\n",
	}
	for name, text := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	g := drawFiles(t, dir)
	require.Equal(t, map[string]map[string][]string{
		"a.go": {"b.go": {"b"}, "c.go": {"(field) n"}},
		"b.go": {"c.go": {"C"}},
		"c.go": {"a.go": {"A", "A.Go"}},
		"d.go": {"b.go": {"b"}, "c.go": {"(field) n"}},
	}, g.arrows)
	require.Equal(t, [][]string{{"a.go", "b.go", "c.go"}}, g.cycles())
	text, n := g.report(g.cycles())
	require.Equal(t, 4, n)
	require.Contains(t, text, "c.go → a.go: A, A.Go")
	delete(g.arrows, "c.go") // the ring broken: its longest chain is a → b → c
	require.Empty(t, g.cycles())
	require.Equal(t, 3, g.layers())
}
