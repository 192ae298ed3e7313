package sqlfuncs

import (
	"regexp"
	"sort"
	"strings"
)

// statement is one top-level statement of a migration: its text from its
// first keyword to its semicolon (included), and the comment lines
// between the previous statement and it, the reasons a migration gives.
type statement struct {
	text    string
	comment string
}

// split cuts a migration into its top-level statements. It knows SQL's
// comments, quoted strings and identifiers, and dollar quotes, so that a
// semicolon in a function's body does not end its CREATE.
func split(src string) []statement {
	var out []statement
	var comment strings.Builder
	start := -1 // where the current statement's text starts
	i := 0
	for i < len(src) {
		c := src[i]
		switch {
		case strings.HasPrefix(src[i:], "--"):
			end := strings.IndexByte(src[i:], '\n')
			if end < 0 {
				end = len(src) - i
			}
			if start < 0 {
				comment.WriteString(src[i : i+end])
				comment.WriteByte('\n')
			}
			i += end
			continue
		case strings.HasPrefix(src[i:], "/*"):
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				end = len(src) - i - 4
			}
			if start < 0 {
				start = i
			}
			i += end + 4
			continue
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if start < 0 && c == '\n' && comment.Len() > 0 && blankBefore(src, i) {
				// A blank line between comments: keep it, so that the
				// reasons read as the migration wrote them.
				comment.WriteString("--\n")
			}
			i++
			continue
		}
		if start < 0 {
			start = i
		}
		switch {
		case c == '\'' || c == '"':
			i = skipQuoted(src, i, c)
		case c == '$':
			if tag, ok := dollarTag(src[i:]); ok {
				end := strings.Index(src[i+len(tag):], tag)
				if end < 0 {
					i = len(src)
				} else {
					i += len(tag) + end + len(tag)
				}
			} else {
				i++
			}
		case c == ';' && atomicOpen(src[start:i]):
			// A semicolon inside a function's BEGIN ATOMIC ... END body.
			i++
		case c == ';':
			out = append(out, statement{text: src[start : i+1], comment: trimComment(comment.String())})
			comment.Reset()
			start = -1
			i++
		default:
			i++
		}
	}
	return out
}

var (
	beginAtomic = regexp.MustCompile(`(?is)^CREATE\b.*\bBEGIN\s+ATOMIC\b`)
	atomicEnd   = regexp.MustCompile(`(?i)(?:^|\n)\s*END\s*$`)
)

// atomicOpen reports whether stmt, a statement up to a semicolon, is a
// CREATE FUNCTION whose SQL-standard body (BEGIN ATOMIC) has not reached
// its END yet: the END that closes it stands at the start of a line.
func atomicOpen(stmt string) bool {
	return beginAtomic.MatchString(stmt) && !atomicEnd.MatchString(stmt)
}

// blankBefore reports whether the newline at i ends an empty line.
func blankBefore(src string, i int) bool {
	j := i - 1
	for j >= 0 && (src[j] == ' ' || src[j] == '\t' || src[j] == '\r') {
		j--
	}
	return j >= 0 && src[j] == '\n'
}

// trimComment drops the blank-line markers at either end of a comment.
func trimComment(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "--" {
		lines = lines[1:]
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "--" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// skipQuoted returns the index after the quoted string or identifier that
// starts at i (a doubled quote stays inside it).
func skipQuoted(src string, i int, q byte) int {
	i++
	for i < len(src) {
		if src[i] == q {
			if i+1 < len(src) && src[i+1] == q {
				i += 2
				continue
			}
			return i + 1
		}
		i++
	}
	return i
}

// dollarTag returns the dollar quote ($$ or $tag$) s starts with; $1, a
// parameter, is none.
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		c := s[j]
		switch {
		case c == '$':
			return s[:j+1], true
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || (j > 1 && c >= '0' && c <= '9'):
		default:
			return "", false
		}
	}
	return "", false
}

// Bodies returns the dollar-quoted bodies of the CREATE FUNCTION
// statements in src, by function name, in their order: what PostgreSQL
// stores as each function's source (pg_proc.prosrc).
func Bodies(src string) map[string][]string {
	out := map[string][]string{}
	for _, s := range split(src) {
		m := createFunction.FindStringSubmatch(s.text)
		if m == nil {
			continue
		}
		out[m[1]] = append(out[m[1]], body(s.text))
	}
	return out
}

// body is the text between the first dollar quote of a CREATE FUNCTION
// and its closing one.
func body(stmt string) string {
	for i := 0; i < len(stmt); i++ {
		switch stmt[i] {
		case '\'', '"':
			i = skipQuoted(stmt, i, stmt[i]) - 1
		case '$':
			if tag, ok := dollarTag(stmt[i:]); ok {
				rest := stmt[i+len(tag):]
				if end := strings.Index(rest, tag); end >= 0 {
					return rest[:end]
				}
				return ""
			}
		}
	}
	return ""
}

// Definitions returns the CREATE FUNCTION statements in src, by function
// name, in their order.
func Definitions(src string) map[string][]string {
	out := map[string][]string{}
	for _, s := range split(src) {
		if m := createFunction.FindStringSubmatch(s.text); m != nil {
			out[m[1]] = append(out[m[1]], s.text)
		}
	}
	return out
}

// Triggers returns the functions that the CREATE TRIGGER statements in
// src run, by trigger name.
func Triggers(src string) map[string]string {
	out := map[string]string{}
	for _, s := range split(src) {
		m := createTrigger.FindStringSubmatch(s.text)
		if m == nil {
			continue
		}
		if runs := triggerRuns.FindStringSubmatch(s.text); runs != nil {
			out[m[1]] = runs[1]
		}
	}
	return out
}

var (
	headerSet  = regexp.MustCompile(`(?is)\bSET\s+(\w+)\s*(?:=|\bTO\b)`)
	alterSet   = regexp.MustCompile(`(?m)^(?:-- EXECUTE format\(')?ALTER FUNCTION [^\n]*?\) SET (\w+)`)
	bodyStarts = regexp.MustCompile(`(?is)\$\w*\$|\bBEGIN\s+ATOMIC\b`)
)

// Settings returns the names of the settings a function file gives its
// function (SET clauses of its CREATE statements, and the ALTER FUNCTION
// ... SET statements after them), sorted, each once.
func Settings(src string) []string {
	seen := map[string]bool{}
	for _, s := range split(src) {
		if createFunction.MatchString(s.text) {
			header := s.text
			if loc := bodyStarts.FindStringIndex(header); loc != nil {
				header = header[:loc[0]]
			}
			for _, m := range headerSet.FindAllStringSubmatch(header, -1) {
				seen[strings.ToLower(m[1])] = true
			}
		}
	}
	for _, m := range alterSet.FindAllStringSubmatch(src, -1) {
		seen[strings.ToLower(m[1])] = true
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
