package doccheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/scanner"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Predeclared are the names a Go snippet may use without declaring them,
// with their types; a snippet that declares one of them itself uses its
// own.
var Predeclared = []struct{ Name, Type string }{
	{"ctx", "context.Context"},
	{"pool", "*pgxpool.Pool"},
	{"tx", "pgx.Tx"},
	{"w", "*worker.Worker"},
	{"client", "*hopper.Client"},
	{"logger", "*slog.Logger"},
}

// Packages maps the package names a snippet may use without importing
// them to their import paths.
var Packages = map[string]string{
	// the standard library
	"bytes": "bytes", "context": "context", "errors": "errors", "fmt": "fmt", "io": "io", "log": "log",
	"os": "os", "signal": "os/signal", "strconv": "strconv", "strings": "strings", "sync": "sync",
	"atomic": "sync/atomic", "syscall": "syscall", "testing": "testing", "time": "time", "math": "math",
	"rand": "math/rand/v2", "sort": "sort", "slices": "slices", "maps": "maps", "slog": "log/slog",
	"json": "encoding/json", "http": "net/http", "httptest": "net/http/httptest", "url": "net/url",
	"net": "net", "filepath": "path/filepath", "embed": "embed", "fs": "io/fs", "sql": "database/sql",
	"flag": "flag",
	// Hopper
	"hopper":     "github.com/hopperq/hopper",
	"jobs":       "github.com/hopperq/hopper/jobs",
	"worker":     "github.com/hopperq/hopper/worker",
	"schema":     "github.com/hopperq/hopper/schema",
	"shard":      "github.com/hopperq/hopper/shard",
	"hoppertest": "github.com/hopperq/hopper/hoppertest",
	"dashboard":  "github.com/hopperq/hopper/dashboard",
	"hopperotel": "github.com/hopperq/hopper/hopperotel",
	// dependencies
	"pgx":         "github.com/jackc/pgx/v5",
	"pgxpool":     "github.com/jackc/pgx/v5/pgxpool",
	"pgconn":      "github.com/jackc/pgx/v5/pgconn",
	"pgtype":      "github.com/jackc/pgx/v5/pgtype",
	"prometheus":  "github.com/prometheus/client_golang/prometheus",
	"promhttp":    "github.com/prometheus/client_golang/prometheus/promhttp",
	"otel":        "go.opentelemetry.io/otel",
	"sdktrace":    "go.opentelemetry.io/otel/sdk/trace",
	"sdkmetric":   "go.opentelemetry.io/otel/sdk/metric",
	"metric":      "go.opentelemetry.io/otel/sdk/metric", // as OpenTelemetry's own examples name it
	"trace":       "go.opentelemetry.io/otel/trace",
	"propagation": "go.opentelemetry.io/otel/propagation",
}

// otelModule is the directory of the module a snippet is checked in when
// it uses OpenTelemetry or hopperotel (a module of its own, with
// dependencies the main module does not have).
const otelModule = "hopperotel"

func inOtelModule(importPath string) bool {
	return importPath == "github.com/hopperq/hopper/hopperotel" || strings.HasPrefix(importPath, "go.opentelemetry.io/")
}

// GoChecker type-checks Go blocks against the repository's packages, read
// from the export data the go command builds (go list -export).
type GoChecker struct {
	root string
	fset *token.FileSet
	mu   sync.Mutex
	envs map[string]*goEnv // by module directory, relative to root
}

// goEnv is one module the snippets are checked in.
type goEnv struct {
	dir     string
	exports map[string]string // import path -> export data file
	errs    map[string]string // import path -> why it has none
	imp     types.Importer
}

// NewGoChecker returns a checker of the Go blocks of the repository at
// root.
func NewGoChecker(root string) *GoChecker {
	return &GoChecker{root: root, fset: token.NewFileSet(), envs: map[string]*goEnv{}}
}

// Prepare builds the export data of the packages snippets may use without
// importing them, in the main module, and returns an error when one of
// the repository's own packages has none (it does not build).
func (g *GoChecker) Prepare() error {
	var paths []string
	for _, p := range Packages {
		if !inOtelModule(p) {
			paths = append(paths, p)
		}
	}
	e := g.env(".")
	if err := e.list(g.root, paths); err != nil {
		return err
	}
	var broken []string
	for _, p := range paths {
		if _, ok := e.exports[p]; !ok && strings.HasPrefix(p, "github.com/hopperq/hopper") {
			broken = append(broken, p+": "+e.errs[p])
		}
	}
	if len(broken) > 0 {
		sort.Strings(broken)
		return fmt.Errorf("the repository's packages do not build, so no Go block can be checked:\n\t%s", strings.Join(broken, "\n\t"))
	}
	return nil
}

func (g *GoChecker) env(dir string) *goEnv {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e, ok := g.envs[dir]; ok {
		return e
	}
	e := &goEnv{dir: dir, exports: map[string]string{}, errs: map[string]string{}}
	e.imp = importer.ForCompiler(g.fset, "gc", func(p string) (io.ReadCloser, error) {
		if _, ok := e.exports[p]; !ok {
			if _, failed := e.errs[p]; !failed {
				if err := e.list(g.root, []string{p}); err != nil {
					return nil, err
				}
			}
		}
		file, ok := e.exports[p]
		if !ok {
			why := e.errs[p]
			if why == "" {
				why = "no export data"
			}
			return nil, errors.New(why)
		}
		return os.Open(file)
	})
	g.envs[dir] = e
	return e
}

// list runs go list -export on paths, and the packages they depend on, in
// the env's module.
func (e *goEnv) list(root string, paths []string) error {
	var todo []string
	for _, p := range paths {
		if _, ok := e.exports[p]; !ok && e.errs[p] == "" {
			todo = append(todo, p)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	sort.Strings(todo)
	cmd := exec.Command("go", append([]string{"list", "-e", "-export", "-deps", "-json=ImportPath,Export,Error,DepsErrors", "--"}, todo...)...)
	cmd.Dir = filepath.Join(root, e.dir)
	// The committed modules, as CI sees them: not a go.work of the
	// working tree.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go list -export in %s: %v: %s", cmd.Dir, err, strings.TrimSpace(stderr.String()))
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Export     string
			Error      *struct{ Err string }
			DepsErrors []struct{ Err string }
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("go list -export: %v", err)
		}
		switch {
		case p.Export != "":
			e.exports[p.ImportPath] = p.Export
		case p.Error != nil:
			e.errs[p.ImportPath] = oneLine(p.Error.Err)
		case len(p.DepsErrors) > 0:
			e.errs[p.ImportPath] = "a dependency does not build: " + oneLine(p.DepsErrors[0].Err)
		default:
			e.errs[p.ImportPath] = "does not build"
		}
	}
	for _, p := range todo {
		if _, ok := e.exports[p]; !ok && e.errs[p] == "" {
			e.errs[p] = "not found by go list"
		}
	}
	return nil
}

// CheckBlock type-checks one ```go block of file. A block that starts
// with a package clause is a whole file; any other is a snippet: top-level
// declarations, or statements (checked as a function body), or
// declarations at column 0 among statements. A snippet may use the
// Predeclared names and the Packages without importing them.
func (g *GoChecker) CheckBlock(file string, b Block) []Problem {
	src := b.Text
	first := b.Line + 1
	if isWholeFile(src) {
		f, err := parser.ParseFile(g.fset, "", lineDirective(file, first)+src, parser.SkipObjectResolution)
		if err != nil {
			return parseProblems(file, b, err)
		}
		env := "."
		for _, im := range f.Imports {
			if inOtelModule(strings.Trim(im.Path.Value, `"`)) {
				env = otelModule
			}
		}
		return g.typeCheck(file, b, env, []*ast.File{f})
	}
	var bestErr error
	bestLine := -1
	for _, build := range []func(string, int, string) ([]string, error){asDecls, asBody, asMixed} {
		variants, err := build(file, first, src)
		if err != nil {
			if l := firstErrorLine(err); l >= bestLine {
				bestErr, bestLine = err, l
			}
			continue
		}
		var best []Problem
		for i, text := range variants {
			files, env, err := g.snippetFiles(text)
			if err != nil {
				return parseProblems(file, b, err)
			}
			ps := g.typeCheck(file, b, env, files)
			if i == 0 || len(ps) < len(best) {
				best = ps
			}
			if len(best) == 0 || !returnProblem(best) {
				break
			}
		}
		return best
	}
	return parseProblems(file, b, bestErr)
}

// returnProblem reports whether a check failed on return statements: the
// snippet may be the body of a function that returns an error.
func returnProblem(ps []Problem) bool {
	return slices.ContainsFunc(ps, func(p Problem) bool { return strings.Contains(p.Msg, "return") })
}

// The ways to read a snippet. Each returns the texts of the candidate
// files (without imports, which snippetFiles adds), or a parse error.

// asDecls reads the snippet as top-level declarations.
func asDecls(file string, line int, src string) ([]string, error) {
	text := "package doc\n" + lineDirective(file, line) + src
	if _, err := parser.ParseFile(token.NewFileSet(), "", text, parser.SkipObjectResolution); err != nil {
		return nil, err
	}
	return []string{text}, nil
}

// asBody reads the snippet as a function body: of a function without
// results, or else one that returns an error.
func asBody(file string, line int, src string) ([]string, error) {
	plain := "package doc\nfunc _() {\n" + lineDirective(file, line) + src + "\n}\n"
	if _, err := parser.ParseFile(token.NewFileSet(), "", plain, parser.SkipObjectResolution); err != nil {
		return nil, err
	}
	withErr := "package doc\nfunc _() error {\n" + lineDirective(file, line) + src + "\nreturn nil\n}\n"
	return []string{plain, withErr}, nil
}

// asMixed reads the snippet as declarations (the lines from one that
// starts at column 0 with func, type, var, const or import, through its
// indented lines and closing brace) among statements, which make a
// function body.
func asMixed(file string, line int, src string) ([]string, error) {
	lines := strings.Split(src, "\n")
	var decls, body strings.Builder
	inDecl := false
	for i, l := range lines {
		starts := declStartRE.MatchString(l)
		switch {
		case starts:
			inDecl = true
		case inDecl && (l == "" || l[0] == ' ' || l[0] == '\t' || l[0] == '}' || l[0] == ')'):
		default:
			inDecl = false
		}
		if inDecl {
			decls.WriteString(lineDirective(file, line+i) + l + "\n")
		} else {
			body.WriteString(lineDirective(file, line+i) + l + "\n")
		}
	}
	var texts []string
	for _, sig := range []string{"func _() {\n", "func _() error {\n"} {
		end := "}\n"
		if strings.Contains(sig, "error") {
			end = "return nil\n}\n"
		}
		text := "package doc\n" + decls.String() + sig + body.String() + end
		if _, err := parser.ParseFile(token.NewFileSet(), "", text, parser.SkipObjectResolution); err != nil {
			return nil, err
		}
		texts = append(texts, text)
	}
	return texts, nil
}

var declStartRE = regexp.MustCompile(`^(func|type|var|const|import)\b`)

// snippetFiles parses a snippet's file, adds the imports of the packages
// it names, and returns it with the prelude file that declares the
// Predeclared names it does not declare itself, and the module to check
// them in.
func (g *GoChecker) snippetFiles(text string) ([]*ast.File, string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), "", text, parser.SkipObjectResolution)
	if err != nil {
		return nil, "", err
	}
	declared := map[string]bool{} // at package level, by the snippet
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				declared[d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					declared[s.Name.Name] = true
				case *ast.ValueSpec:
					for _, n := range s.Names {
						declared[n.Name] = true
					}
				case *ast.ImportSpec:
					declared[importName(s)] = true
				}
			}
		}
	}
	used := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok {
				used[id.Name] = true
			}
		}
		return true
	})
	env := "."
	var imports []string
	for name := range used {
		p, ok := Packages[name]
		if !ok || declared[name] {
			continue
		}
		imports = append(imports, fmt.Sprintf("%s %q", name, p))
		if inOtelModule(p) {
			env = otelModule
		}
	}
	for _, im := range f.Imports {
		if inOtelModule(strings.Trim(im.Path.Value, `"`)) {
			env = otelModule
		}
	}
	sort.Strings(imports)
	if len(imports) > 0 {
		// after the package clause, before the snippet's own imports
		text = strings.Replace(text, "package doc\n", "package doc\nimport (\n"+strings.Join(imports, "\n")+"\n)\n", 1)
	}
	snippet, err := parser.ParseFile(g.fset, "snippet.go", text, parser.SkipObjectResolution|parser.AllErrors)
	if err != nil {
		return nil, "", err
	}
	var prelude strings.Builder
	prelude.WriteString("package doc\nimport (\n\"context\"\n\"log/slog\"\n\"github.com/jackc/pgx/v5\"\n\"github.com/jackc/pgx/v5/pgxpool\"\n\"github.com/hopperq/hopper\"\n\"github.com/hopperq/hopper/worker\"\n)\n")
	prelude.WriteString("var (\n_ context.Context\n_ *slog.Logger\n_ pgx.Tx\n_ *pgxpool.Pool\n_ *hopper.Client\n_ *worker.Worker\n")
	for _, p := range Predeclared {
		if !declared[p.Name] {
			fmt.Fprintf(&prelude, "%s %s\n", p.Name, p.Type)
		}
	}
	prelude.WriteString(")\n")
	pf, err := parser.ParseFile(g.fset, "prelude.go", prelude.String(), parser.SkipObjectResolution)
	if err != nil {
		panic("doccheck: the prelude does not parse: " + err.Error())
	}
	return []*ast.File{pf, snippet}, env, nil
}

// importName is the name an import declares.
func importName(s *ast.ImportSpec) string {
	if s.Name != nil {
		return s.Name.Name
	}
	return pathName(strings.Trim(s.Path.Value, `"`))
}

var majorRE = regexp.MustCompile(`^v[0-9]+$`)

// pathName is the usual name of the package at an import path: its last
// element, before a major version suffix.
func pathName(p string) string {
	base := path.Base(p)
	if majorRE.MatchString(base) && path.Dir(p) != "." {
		base = path.Base(path.Dir(p))
	}
	if i := strings.IndexAny(base, ".-"); i > 0 && strings.HasPrefix(p, "gopkg.in/") {
		base = base[:i]
	}
	return base
}

// maxErrors bounds the errors reported per block.
const maxErrors = 5

// typeCheck type-checks files in the module env and returns the hard
// errors (an unused variable or import is fine in a snippet).
func (g *GoChecker) typeCheck(file string, b Block, env string, files []*ast.File) []Problem {
	e := g.env(env)
	var paths []string
	for _, f := range files {
		for _, im := range f.Imports {
			paths = append(paths, strings.Trim(im.Path.Value, `"`))
		}
	}
	if err := e.list(g.root, paths); err != nil {
		return []Problem{{File: file, Line: b.Line, Msg: "go: " + err.Error()}}
	}
	var problems []Problem
	more := 0
	conf := types.Config{
		Importer:    e.imp,
		FakeImportC: true,
		Error: func(err error) {
			var te types.Error
			if errors.As(err, &te) && te.Soft {
				return
			}
			if len(problems) >= maxErrors {
				more++
				return
			}
			problems = append(problems, g.problem(file, b, err))
		},
	}
	_, _ = conf.Check("doccheck/snippet", g.fset, files, nil)
	if more > 0 {
		problems[len(problems)-1].Msg += fmt.Sprintf(" (and %d more errors)", more)
	}
	return problems
}

// problem turns a type error into a Problem at its line of the file.
func (g *GoChecker) problem(file string, b Block, err error) Problem {
	p := Problem{File: file, Line: b.Line + 1, Block: b.Line, Msg: "go: " + err.Error()}
	var te types.Error
	if errors.As(err, &te) {
		pos := g.fset.Position(te.Pos)
		if pos.Filename == file {
			p.Line = pos.Line
		}
		p.Msg = "go: " + te.Msg
	}
	return p
}

// parseProblems turns a parse error into Problems at their lines.
func parseProblems(file string, b Block, err error) []Problem {
	var list scanner.ErrorList
	if !errors.As(err, &list) || len(list) == 0 {
		return []Problem{{File: file, Line: b.Line + 1, Block: b.Line, Msg: "go: " + err.Error()}}
	}
	p := Problem{File: file, Line: b.Line + 1, Block: b.Line, Msg: "go: " + list[0].Msg}
	if list[0].Pos.Filename == file {
		p.Line = list[0].Pos.Line
	}
	return []Problem{p}
}

// firstErrorLine is the line of a parse error's first error, or 0.
func firstErrorLine(err error) int {
	var list scanner.ErrorList
	if errors.As(err, &list) && len(list) > 0 {
		return list[0].Pos.Line
	}
	return 0
}

// isWholeFile reports whether src starts with a package clause (after
// comments).
func isWholeFile(src string) bool {
	var s scanner.Scanner
	fset := token.NewFileSet()
	s.Init(fset.AddFile("", -1, len(src)), []byte(src), nil, 0)
	_, tok, _ := s.Scan()
	return tok == token.PACKAGE
}

// lineDirective makes the next line's position read as file:line.
func lineDirective(file string, line int) string {
	return fmt.Sprintf("//line %s:%d\n", file, line)
}
