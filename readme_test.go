package hopper_test

import (
	"bytes"
	"go/ast"
	"go/doc"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeQuickstart keeps the README's quickstart the program that
// Example_quickstart runs, so that the README cannot rot:
//
//   - the README's first ```go block after "## Quickstart" declares the
//     same types and variables as quickstart_example_test.go, with the same
//     doc comments;
//   - main's statements from the one that calls schema.Up to the end are
//     Example_quickstart's, comments included (what comes before, where the
//     pool comes from, may differ: the README opens one on DATABASE_URL,
//     the Example gets a migrated schema of its own);
//   - the ```text block after it shows what the Example prints, once the
//     prompt and the worker's log lines are left out.
//
// The README's block must also type-check as a whole file; doccheck's
// TestDocs does that.
func TestReadmeQuickstart(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	code, output := quickstartBlocks(t, string(readme))

	fset := token.NewFileSet()
	rf, err := parser.ParseFile(fset, "README.md quickstart", code, parser.ParseComments)
	if err != nil {
		t.Fatalf("the README's quickstart does not parse: %v", err)
	}
	ef, err := parser.ParseFile(fset, "quickstart_example_test.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}

	// Declarations: every type and variable of the README, the same in the
	// Example's file.
	exampleDecls := map[string]*ast.GenDecl{}
	for _, d := range ef.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok != token.IMPORT {
			exampleDecls[declName(g)] = g
		}
	}
	for _, d := range rf.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok == token.IMPORT {
			continue
		}
		name := declName(g)
		e, ok := exampleDecls[name]
		if !ok {
			t.Errorf("the README declares %s; quickstart_example_test.go does not", name)
			continue
		}
		if got, want := nodeText(t, fset, g)+g.Doc.Text(), nodeText(t, fset, e)+e.Doc.Text(); got != want {
			t.Errorf("%s differs:\nREADME:\n%s\nExample:\n%s", name, got, want)
		}
	}

	// Statements, from schema.Up to the end, with their comments.
	main := funcNamed(rf, "main")
	example := funcNamed(ef, "Example_quickstart")
	if main == nil || example == nil {
		t.Fatalf("want func main in the README's quickstart (found: %v) and Example_quickstart in quickstart_example_test.go (found: %v)", main != nil, example != nil)
	}
	got := fromSchemaUp(t, fset, rf, main.Body)
	want := fromSchemaUp(t, fset, ef, example.Body)
	if got != want {
		t.Errorf("the README's quickstart and Example_quickstart differ from schema.Up on; make them the same program.\nREADME:\n%s\nExample:\n%s", got, want)
	}

	// What it prints.
	var printed []string
	logLine := regexp.MustCompile(`^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d `)
	for _, line := range strings.Split(strings.TrimSpace(output), "\n") {
		if strings.HasPrefix(line, "$ ") || logLine.MatchString(line) {
			continue
		}
		printed = append(printed, line)
	}
	var exampleOutput string
	for _, ex := range doc.Examples(ef) {
		if ex.Name == "_quickstart" {
			exampleOutput = strings.TrimSpace(ex.Output)
		}
	}
	if exampleOutput == "" {
		t.Fatal("Example_quickstart has no // Output: comment")
	}
	if got := strings.Join(printed, "\n"); got != exampleOutput {
		t.Errorf("the README shows the quickstart printing\n%s\nbut Example_quickstart prints\n%s", got, exampleOutput)
	}
}

// quickstartBlocks returns the body of the first ```go block after the
// "## Quickstart" heading, and of the first ```text block after that one.
func quickstartBlocks(t *testing.T, readme string) (code, output string) {
	t.Helper()
	_, rest, ok := strings.Cut(readme, "\n## Quickstart\n")
	if !ok {
		t.Fatal(`README.md has no "## Quickstart" section`)
	}
	block := func(lang string) string {
		_, after, ok := strings.Cut(rest, "\n```"+lang+"\n")
		if !ok {
			t.Fatalf("README.md's quickstart has no ```%s block", lang)
		}
		body, after, ok := strings.Cut(after, "\n```\n")
		if !ok {
			t.Fatalf("README.md's quickstart ```%s block is not closed", lang)
		}
		rest = after
		return body + "\n"
	}
	code = block("go")
	output = block("text")
	return code, output
}

// declName names a type or var declaration by its first spec.
func declName(g *ast.GenDecl) string {
	switch s := g.Specs[0].(type) {
	case *ast.TypeSpec:
		return "type " + s.Name.Name
	case *ast.ValueSpec:
		return g.Tok.String() + " " + s.Names[0].Name
	}
	return g.Tok.String()
}

func funcNamed(f *ast.File, name string) *ast.FuncDecl {
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == name {
			return fn
		}
	}
	return nil
}

// nodeText prints a node as gofmt would, without its comments.
func nodeText(t *testing.T, fset *token.FileSet, n ast.Node) string {
	t.Helper()
	var b bytes.Buffer
	if err := format.Node(&b, fset, n); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// fromSchemaUp prints the statements of body from the first that calls
// schema.Up to the end, one a line, followed by the comments among them.
func fromSchemaUp(t *testing.T, fset *token.FileSet, f *ast.File, body *ast.BlockStmt) string {
	t.Helper()
	start := -1
	for i, s := range body.List {
		if strings.Contains(nodeText(t, fset, s), "schema.Up(") {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("%s: no statement calls schema.Up", fset.Position(body.Pos()).Filename)
	}
	var b strings.Builder
	for _, s := range body.List[start:] {
		b.WriteString(nodeText(t, fset, s) + "\n")
	}
	b.WriteString("comments:\n")
	from, to := body.List[start].Pos(), body.Rbrace
	for _, c := range f.Comments {
		if c.Pos() >= from && c.End() <= to && !strings.HasPrefix(c.Text(), "Output:") {
			b.WriteString(c.Text())
		}
	}
	return b.String()
}
