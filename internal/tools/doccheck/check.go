// Package doccheck keeps the code blocks and links of Hopper's markdown
// true. Its test runs it on README.md, CONTRIBUTING.md and docs/ (go test
// -run TestDocs ./internal/tools/doccheck).
//
// A ```go block type-checks against the current code. One that starts
// with a package clause is a whole file. Any other is a snippet, read as
// top-level declarations, or else as the body of a function (returning
// nothing, or an error), or else as both: declarations that start at
// column 0 (func, type, var, const, import, through their closing brace)
// among statements. A snippet may use the Predeclared names (ctx, pool,
// tx, w, client, logger) and the Packages (hopper, jobs, worker, fmt,
// pgxpool...) without declaring or importing them; one that declares such
// a name uses its own. Unused variables and imports are fine. A snippet
// that uses hopperotel or OpenTelemetry is checked in the hopperotel
// module.
//
// In a ```sh, ```bash or ```console block, each line is a command (in a
// transcript with "$ " prompts, only the prompted lines): make X names a
// target of the Makefile (of the directory cd led to, or -C); hopper ...,
// bin/hopper ..., go run ./cmd/hopper ... and go tool hopper ... name a
// real command, action and flags, checked by the CLI's own parser without
// running anything; bash .ci/x names a script that exists. Other commands
// are taken as they are.
//
// A ```sql block runs, statement by statement, in a transaction that is
// rolled back, on a freshly migrated schema (TestDocsSQL).
//
// A relative link (or image) leads to a file or directory of the
// repository, and its #fragment, into a markdown file, to a heading.
//
// The line before a fence (blank lines between are fine) can leave its
// block out, with a reason, which the test prints:
//
//	<!-- doccheck: skip needs a role of your own -->
//
// Blocks of any other language (text, json, yaml...) are never checked;
// a block must say its language.
package doccheck

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Problem is one thing wrong in a markdown file.
type Problem struct {
	File string // relative to the repository's root
	Line int    // the line at fault
	// Block is the line of the fence of the block at fault, 0 for links.
	Block int
	Msg   string
}

func (p Problem) String() string {
	if p.Block != 0 && p.Block != p.Line {
		return fmt.Sprintf("%s:%d: %s (block at line %d)", p.File, p.Line, p.Msg, p.Block)
	}
	return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg)
}

// Checker checks markdown files of one repository.
type Checker struct {
	// Root is the repository's root directory.
	Root string
	// Go type-checks ```go blocks; nil leaves them out.
	Go *GoChecker
	// SQL runs a ```sql block's text and returns the line (1-based, within
	// the text; 0 when unknown) and error of the first statement that
	// fails; nil leaves SQL blocks out.
	SQL func(text string) (line int, err error)
	// SQLOnly checks the SQL blocks only: no other block, no link.
	SQLOnly bool
	// HopperBin is the path of a built hopper command (go build
	// ./cmd/hopper) that CheckHopperArgs runs to check the hopper command
	// lines of shell blocks.
	HopperBin string
	// Hopper checks the arguments of a hopper command line (after the
	// program name) instead; nil means CheckHopperArgs with HopperBin.
	Hopper func(args []string) error

	makeTargets map[string]map[string]bool // Makefile path -> targets
	anchors     map[string]map[string]bool // markdown path -> anchors
}

// Stats counts what a check looked at.
type Stats struct {
	Blocks  map[string]int // checked blocks by language
	Skipped []string       // "file:line: reason" of each skipped block
	Links   int
}

// Languages the checker reads; the others (text, json, yaml...) are
// never checked.
var (
	goLangs    = map[string]bool{"go": true, "golang": true}
	shellLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true, "shell-session": true}
	sqlLangs   = map[string]bool{"sql": true, "postgresql": true}
)

// Check checks one markdown file, named by its path relative to Root.
// Blocks are checked in order; st counts them.
func (c *Checker) Check(rel string, st *Stats) ([]Problem, error) {
	src, err := os.ReadFile(filepath.Join(c.Root, rel))
	if err != nil {
		return nil, err
	}
	d := ParseMarkdown(rel, string(src))
	if c.anchors == nil {
		c.anchors = map[string]map[string]bool{}
	}
	c.anchors[filepath.ToSlash(filepath.Clean(rel))] = d.Anchors
	var problems []Problem
	if !c.SQLOnly {
		problems = append(problems, d.Problems...)
	}
	if st.Blocks == nil {
		st.Blocks = map[string]int{}
	}
	for _, b := range d.Blocks {
		lang := b.Lang
		if lang == "" && !c.SQLOnly {
			// It could hold code that escapes every check.
			problems = append(problems, Problem{File: rel, Line: b.Line, Msg: "code block without a language: say go, sh, sql, or text (which is not checked)"})
			continue
		}
		checked := goLangs[lang] || shellLangs[lang] || sqlLangs[lang]
		if !checked || (c.SQLOnly && !sqlLangs[lang]) {
			continue
		}
		if b.Skip {
			st.Skipped = append(st.Skipped, fmt.Sprintf("%s:%d: %s", rel, b.Line, b.SkipReason))
			continue
		}
		switch {
		case goLangs[lang]:
			if c.Go == nil {
				continue
			}
			problems = append(problems, c.Go.CheckBlock(rel, b)...)
			st.Blocks["go"]++
		case shellLangs[lang]:
			problems = append(problems, c.checkShell(rel, b)...)
			st.Blocks["sh"]++
		case sqlLangs[lang]:
			if c.SQL == nil {
				continue
			}
			if line, err := c.SQL(b.Text); err != nil {
				at := b.Line + 1
				if line > 0 {
					at = b.Line + line
				}
				problems = append(problems, Problem{File: rel, Line: at, Block: b.Line, Msg: "sql: " + oneLine(err.Error())})
			}
			st.Blocks["sql"]++
		}
	}
	if c.SQLOnly {
		return problems, nil
	}
	ps, n := c.checkLinks(rel, d)
	st.Links += n
	return append(problems, ps...), nil
}

// CheckFiles checks files (paths relative to Root), links to anchors of
// each other included, and returns the problems sorted by file and line.
func (c *Checker) CheckFiles(files []string, st *Stats) ([]Problem, error) {
	var all []Problem
	for _, f := range files {
		ps, err := c.Check(f, st)
		if err != nil {
			return nil, err
		}
		all = append(all, ps...)
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].File != all[j].File {
			return all[i].File < all[j].File
		}
		return all[i].Line < all[j].Line
	})
	// "undefined: X" twice on a line says nothing more.
	out := all[:0]
	for i, p := range all {
		if i > 0 && p == all[i-1] {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
