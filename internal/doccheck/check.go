// Package doccheck keeps the code blocks of Hopper's markdown true: it
// type-checks ```go blocks against the current API, checks that the
// commands of ```sh blocks name real make targets and real hopper
// subcommands and flags, runs ```sql blocks against a migrated schema,
// and checks that relative links lead to files (and headings) that exist.
// Its test runs it on README.md, CONTRIBUTING.md and docs/*.md.
//
// A block is left out with a line before its fence:
//
//	<!-- doccheck: skip REASON -->
//
// ```text blocks (and any other language) are never checked.
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
	// Hopper checks the arguments of a hopper command line (after the
	// program name); nil means CheckHopperArgs.
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
