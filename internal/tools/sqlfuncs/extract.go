// Package sqlfuncs gives each SQL function of Hopper's schema one readable
// current source: schema/functions/NAME.sql holds the CREATE statement of
// NAME as the latest migration that defines it wrote it, the comments
// that migration gives its reasons in, the settings restated after it and
// the triggers that run it. make generate writes the files from the
// migrations (go run ./internal/tools/sqlfuncs/gen); make check-generated fails
// when they differ from what the migrations define today; the schema
// package's TestFunctionSources proves that each file's bodies are the
// ones a migrated database holds, and that every function has a file.
package sqlfuncs

import (
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
)

var (
	createFunction = regexp.MustCompile(`(?is)^CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(\w+)\s*\(`)
	dropFunction   = regexp.MustCompile(`(?is)^DROP\s+FUNCTION\s+(?:IF\s+EXISTS\s+)?(\w+)\s*\(([^)]*)\)`)
	renameFunction = regexp.MustCompile(`(?is)^ALTER\s+FUNCTION\s+(\w+)\s*\(([^)]*)\)\s+RENAME\s+TO\s+(\w+)`)
	setFunction    = regexp.MustCompile(`(?is)^ALTER\s+FUNCTION\s+(\w+)\s*\(([^)]*)\)\s+(?:SET|RESET)\b`)
	// A DO block pins a function's search_path to the schema it runs in,
	// which only dynamic SQL can name.
	dynamicSet    = regexp.MustCompile(`ALTER FUNCTION %1\$I\.(\w+)\(([^)]*)\) SET`)
	createTrigger = regexp.MustCompile(`(?is)^CREATE\s+(?:OR\s+REPLACE\s+)?(?:CONSTRAINT\s+)?TRIGGER\s+(\w+)`)
	triggerRuns   = regexp.MustCompile(`(?is)EXECUTE\s+(?:FUNCTION|PROCEDURE)\s+(\w+)\s*\(`)
	dropTrigger   = regexp.MustCompile(`(?is)^DROP\s+TRIGGER\s+(?:IF\s+EXISTS\s+)?(\w+)`)
	doBlock       = regexp.MustCompile(`(?is)^DO\b`)
	migrationFile = regexp.MustCompile(`^\d+_\w+\.up\.sql$`)
	spaces        = regexp.MustCompile(`\s+`)
	defaultClause = regexp.MustCompile(`(?is)\s+(?:DEFAULT\b|=).*$`)
)

// from names the place a statement comes from, and the comments before it.
type from struct {
	file    string
	comment string
	text    string
}

// function is one function (one name and argument types) as the
// migrations read so far define it.
type function struct {
	name     string // its current name
	args     string // its argument types, normalized: its identity
	def      from   // the CREATE that defines it now
	renamed  []string
	settings []from // ALTER FUNCTION ... SET after def
	order    int    // when def was read, for a stable order in the file
}

// trigger is one trigger as the migrations read so far define it.
type trigger struct {
	name     string
	function string
	def      from
}

// Extract reads the up migrations in fsys (its top level, in lexical
// order, as golang-migrate applies them) and returns each function's
// current source, by file name (NAME.sql).
func Extract(fsys fs.FS) (map[string][]byte, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() && migrationFile.MatchString(e.Name()) {
			files = append(files, e.Name())
		}
	}
	sort.Strings(files)
	funcs := map[string]*function{} // by name(args)
	triggers := map[string]*trigger{}
	order := 0
	for _, file := range files {
		src, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, err
		}
		where := "schema/" + file
		for _, s := range split(string(src)) {
			at := from{file: where, comment: s.comment, text: s.text}
			if m := createFunction.FindStringSubmatch(s.text); m != nil {
				args, err := createArgs(s.text[len(m[0]):])
				if err != nil {
					return nil, fmt.Errorf("%s: %s: %w", where, m[1], err)
				}
				key := m[1] + "(" + args + ")"
				order++
				funcs[key] = &function{name: m[1], args: args, def: at, order: order}
				continue
			}
			if m := dropFunction.FindStringSubmatch(s.text); m != nil {
				key := m[1] + "(" + typeList(m[2]) + ")"
				if funcs[key] == nil {
					return nil, fmt.Errorf("%s: DROP FUNCTION %s: no such function so far", where, key)
				}
				delete(funcs, key)
				continue
			}
			if m := renameFunction.FindStringSubmatch(s.text); m != nil {
				key := m[1] + "(" + typeList(m[2]) + ")"
				f := funcs[key]
				if f == nil {
					return nil, fmt.Errorf("%s: ALTER FUNCTION %s RENAME: no such function so far", where, key)
				}
				delete(funcs, key)
				f.renamed = append(f.renamed, fmt.Sprintf("renamed from %s to %s by %s", f.name, m[3], where))
				f.name = m[3]
				funcs[f.name+"("+f.args+")"] = f
				continue
			}
			if m := setFunction.FindStringSubmatch(s.text); m != nil {
				key := m[1] + "(" + typeList(m[2]) + ")"
				f := funcs[key]
				if f == nil {
					return nil, fmt.Errorf("%s: ALTER FUNCTION %s: no such function so far", where, key)
				}
				f.settings = append(f.settings, at)
				continue
			}
			if doBlock.MatchString(s.text) {
				for _, line := range strings.Split(s.text, "\n") {
					m := dynamicSet.FindStringSubmatch(line)
					if m == nil {
						continue
					}
					key := m[1] + "(" + typeList(m[2]) + ")"
					f := funcs[key]
					if f == nil {
						return nil, fmt.Errorf("%s: DO block's ALTER FUNCTION %s: no such function so far", where, key)
					}
					f.settings = append(f.settings, from{file: where, text: strings.TrimSpace(line)})
				}
				continue
			}
			if m := createTrigger.FindStringSubmatch(s.text); m != nil {
				runs := triggerRuns.FindStringSubmatch(s.text)
				if runs == nil {
					return nil, fmt.Errorf("%s: trigger %s runs no function", where, m[1])
				}
				triggers[m[1]] = &trigger{name: m[1], function: runs[1], def: at}
				continue
			}
			if m := dropTrigger.FindStringSubmatch(s.text); m != nil {
				if triggers[m[1]] == nil {
					return nil, fmt.Errorf("%s: DROP TRIGGER %s: no such trigger so far", where, m[1])
				}
				delete(triggers, m[1])
			}
		}
	}
	return render(funcs, triggers)
}

// render writes one file per function name: its overloads in the order
// they were last defined, then the triggers that run it.
func render(funcs map[string]*function, triggers map[string]*trigger) (map[string][]byte, error) {
	byName := map[string][]*function{}
	for _, f := range funcs {
		byName[f.name] = append(byName[f.name], f)
	}
	byFunction := map[string][]*trigger{}
	for _, t := range triggers {
		if byName[t.function] == nil {
			return nil, fmt.Errorf("trigger %s runs %s, which no migration defines", t.name, t.function)
		}
		byFunction[t.function] = append(byFunction[t.function], t)
	}
	out := map[string][]byte{}
	for name, fs := range byName {
		sort.Slice(fs, func(i, j int) bool { return fs[i].order < fs[j].order })
		var b strings.Builder
		b.WriteString("-- Generated by internal/tools/sqlfuncs (make generate) from the migrations.\n")
		fmt.Fprintf(&b, "-- The current source of %s:\n", name)
		b.WriteString("-- each definition as the latest migration that makes it wrote it, with\n")
		b.WriteString("-- the comments that give its reasons. Do not edit: a migration that\n")
		b.WriteString("-- redefines the function copies this body, edited, and its review\n")
		b.WriteString("-- reads this file's diff (CONTRIBUTING.md, The PL/pgSQL).\n")
		for _, f := range fs {
			fmt.Fprintf(&b, "\n-- %s(%s): defined by %s.\n", f.name, f.args, f.def.file)
			for _, r := range f.renamed {
				fmt.Fprintf(&b, "-- Then %s.\n", r)
			}
			if f.def.comment != "" {
				b.WriteString("--\n")
				b.WriteString(f.def.comment)
			}
			b.WriteString(f.def.text)
			b.WriteString("\n")
			for _, s := range f.settings {
				fmt.Fprintf(&b, "\n-- Set by %s:\n", s.file)
				if strings.HasPrefix(s.text, "EXECUTE") {
					// A DO block's dynamic statement: a comment, as it runs
					// only inside its block.
					fmt.Fprintf(&b, "-- %s\n", s.text)
					continue
				}
				b.WriteString(s.text)
				b.WriteString("\n")
			}
		}
		ts := byFunction[name]
		sort.Slice(ts, func(i, j int) bool { return ts[i].name < ts[j].name })
		for _, t := range ts {
			fmt.Fprintf(&b, "\n-- Trigger %s: defined by %s.\n", t.name, t.def.file)
			if t.def.comment != "" {
				b.WriteString("--\n")
				b.WriteString(t.def.comment)
			}
			b.WriteString(t.def.text)
			b.WriteString("\n")
		}
		out[name+".sql"] = []byte(b.String())
	}
	return out, nil
}

// createArgs returns the argument types of a CREATE FUNCTION whose
// parameter list starts at rest (after its opening parenthesis):
// parameter names, defaults and OUT parameters left out, as PostgreSQL
// identifies a function.
func createArgs(rest string) (string, error) {
	depth, end := 1, -1
	for i := 0; i < len(rest) && end < 0; i++ {
		switch rest[i] {
		case '\'':
			i = skipQuoted(rest, i, '\'') - 1
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				end = i
			}
		}
	}
	if end < 0 {
		return "", fmt.Errorf("unclosed parameter list")
	}
	var types []string
	for _, p := range splitTop(rest[:end]) {
		p = strings.TrimSpace(spaces.ReplaceAllString(p, " "))
		if p == "" {
			continue
		}
		p = defaultClause.ReplaceAllString(p, "")
		words := strings.Fields(p)
		switch strings.ToUpper(words[0]) {
		case "OUT":
			continue
		case "IN", "INOUT", "VARIADIC":
			words = words[1:]
		}
		if len(words) < 2 {
			return "", fmt.Errorf("parameter %q has no name", p)
		}
		types = append(types, strings.Join(words[1:], " "))
	}
	return typeList(strings.Join(types, ",")), nil
}

// typeList normalizes a list of argument types: lower case, one space.
func typeList(s string) string {
	var types []string
	for _, t := range splitTop(s) {
		t = strings.ToLower(strings.TrimSpace(spaces.ReplaceAllString(t, " ")))
		if t != "" {
			types = append(types, t)
		}
	}
	return strings.Join(types, ", ")
}

// splitTop splits s at the commas outside parentheses and quotes.
func splitTop(s string) []string {
	var out []string
	depth, last := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\'':
			i = skipQuoted(s, i, '\'') - 1
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[last:i])
				last = i + 1
			}
		}
	}
	return append(out, s[last:])
}
