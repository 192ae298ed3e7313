package doccheck

import (
	"regexp"
	"strings"
)

// Grants returns the statements of the grants a markdown file gives a
// role, as a reader copies them: the sql blocks whose doccheck comment
// names "a role (ROLE)" (docs/operating.md's "app", docs/sql-api.md's
// "producer"), the first of them and each later one that mentions one of
// extra, with their comments dropped and only two names replaced: the
// schema app_jobs by schemaIdent, and the role, where a statement grants
// to it or revokes from it, by roleIdent (both quoted identifiers). The
// tests of least privilege run exactly these, so that the guides' grants
// are the ones tested.
func Grants(file, src, role, schemaIdent, roleIdent string, extra ...string) []string {
	var lines []string
	first := true
	for _, b := range ParseMarkdown(file, src).Blocks {
		if b.Lang != "sql" || !strings.Contains(b.SkipReason, "a role ("+role+")") {
			continue
		}
		wanted := first
		for _, e := range extra {
			wanted = wanted || strings.Contains(b.Text, e)
		}
		first = false
		if !wanted {
			continue
		}
		for _, line := range strings.Split(b.Text, "\n") {
			if i := strings.Index(line, "--"); i >= 0 {
				line = line[:i]
			}
			lines = append(lines, line)
		}
	}
	text := strings.Join(lines, "\n")
	text = regexp.MustCompile(`\bapp_jobs\b`).ReplaceAllLiteralString(text, schemaIdent)
	text = regexp.MustCompile(`\b(TO|FROM) `+regexp.QuoteMeta(role)+`;`).ReplaceAllString(text, "$1 "+strings.ReplaceAll(roleIdent, "$", "$$")+";")
	var stmts []string
	for _, stmt := range strings.Split(text, ";") {
		if stmt = strings.TrimSpace(stmt); stmt != "" {
			stmts = append(stmts, stmt)
		}
	}
	return stmts
}
