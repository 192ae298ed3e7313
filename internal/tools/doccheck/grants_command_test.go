package doccheck_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper/internal/grants"
	"github.com/hopperq/hopper/internal/tools/doccheck"
)

// TestGrantsMatchTheCommand: the grant blocks of the guides say, statement
// for statement, what hopper grants prints for each kind of role (the
// lists of internal/grants, which the worker's start and schema.Check
// check too), so that the guides, the command and the checks cannot
// drift apart. Comments and line breaks aside, each statement is the
// command's, for the schema app_jobs and the guide's role name.
func TestGrantsMatchTheCommand(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		file, role string
		kind       grants.Role
		extra      []string // later blocks of the guide that belong to the kind
	}{
		{"docs/operating.md", "app", grants.Worker, []string{"hopper_rate_claims"}},
		{"docs/sql-api.md", "producer", grants.Producer, nil},
		{"docs/operating.md", "reader", grants.Reader, nil},
	} {
		t.Run(string(c.kind), func(t *testing.T) {
			t.Parallel()
			src, err := os.ReadFile(filepath.Join(root, c.file))
			if err != nil {
				t.Fatal(err)
			}
			documented := doccheck.Grants(c.file, string(src), c.role, pgx.Identifier{"app_jobs"}.Sanitize(),
				pgx.Identifier{c.role}.Sanitize(), c.extra...)
			stmts, ok := grants.Of(c.kind)
			if !ok {
				t.Fatalf("no list for %s", c.kind)
			}
			var command []string
			for _, s := range stmts {
				command = append(command, s.SQL("app_jobs", c.role))
			}
			if len(documented) != len(command) {
				t.Fatalf("%s gives %s %d statements, hopper grants --as %s %d:\n%s\nvs\n%s", c.file, c.role, len(documented),
					c.kind, len(command), strings.Join(documented, ";\n"), strings.Join(command, ";\n"))
			}
			for i := range command {
				if got, want := oneSpaced(documented[i]), oneSpaced(command[i]); got != want {
					t.Errorf("%s, %s's statement %d:\n got %s\nwant %s (hopper grants %s --as %s --schema app_jobs)",
						c.file, c.role, i+1, got, want, c.role, c.kind)
				}
			}
		})
	}
}

var spaces = regexp.MustCompile(`\s+`)

// oneSpaced is s with each run of white space made one space.
func oneSpaced(s string) string { return strings.TrimSpace(spaces.ReplaceAllString(s, " ")) }
