package doccheck_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/tools/doccheck"
)

// root is the repository's root, from this package's directory.
const root = "../../.."

// docFiles are the markdown files whose blocks and links must be true:
// README.md, CONTRIBUTING.md and every guide under docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, f := range []string{"README.md", "CONTRIBUTING.md"} {
		if _, err := os.Stat(filepath.Join(root, f)); err == nil {
			files = append(files, f)
		}
	}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
			return err
		}
		rel, err := filepath.Rel(root, p)
		files = append(files, filepath.ToSlash(rel))
		return err
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return files
}

var (
	goOnce    sync.Once
	goChecker *doccheck.GoChecker
	goErr     error
)

// sharedGo is one Go checker for the whole binary: its export data is
// built once.
func sharedGo(t *testing.T) *doccheck.GoChecker {
	t.Helper()
	goOnce.Do(func() {
		goChecker = doccheck.NewGoChecker(root)
		goErr = goChecker.Prepare()
	})
	if goErr != nil {
		t.Fatal(goErr)
	}
	return goChecker
}

// TestDocs: every ```go block of the docs type-checks against the current
// API, every command of a ```sh block names a real make target or hopper
// command and flags, and every relative link leads to a file (and heading)
// that exists. The SQL blocks are TestDocsSQL's.
func TestDocs(t *testing.T) {
	c := &doccheck.Checker{Root: root, Go: sharedGo(t), HopperBin: hopperBin}
	report(t, c, docFiles(t))
}

// TestDocsSQL: every ```sql block of the docs runs (in a transaction that
// is rolled back) on a freshly migrated schema.
func TestDocsSQL(t *testing.T) {
	db := testdb.New(t)
	c := &doccheck.Checker{Root: root, SQL: doccheck.SQLRunner(db.Pool), SQLOnly: true}
	report(t, c, docFiles(t))
}

func report(t *testing.T, c *doccheck.Checker, files []string) {
	t.Helper()
	var st doccheck.Stats
	problems, err := c.CheckFiles(files, &st)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	var kinds []string
	for k, n := range st.Blocks {
		kinds = append(kinds, k+" "+strconv.Itoa(n))
	}
	sort.Strings(kinds)
	t.Logf("doccheck: %d files, blocks checked: %s; %d links; %d blocks skipped", len(files), strings.Join(kinds, ", "), st.Links, len(st.Skipped))
	for _, s := range st.Skipped {
		t.Logf("  skipped %s", s)
	}
	if len(problems) > 0 {
		t.Logf("doccheck: %d problems", len(problems))
	}
}

// fixture is a repository of its own for a checker case: a Makefile, a
// guide with headings, and the markdown under test as doc.md.
func fixture(t *testing.T, md string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"Makefile":             ".PHONY: demo test\ndemo: ## the demo\n\tgo run ./cmd/hopper demo\ntest:\n\tgo test ./...\n",
		"docs/guide.md":        "# The guide\n\n## Retries and backoff\n\ntext\n",
		"monitoring/rules.yml": "groups: []\n",
		"cmd/hopper/main.go":   "package main\n",
		".ci/run":              "#!/bin/sh\n",
		"doc.md":               md,
	}
	for name, text := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type checkCase struct {
	name string
	md   string
	// want are the problems found, in order, each as substrings it has in
	// this order, separated by "…"; none means the markdown is fine.
	want []string
}

func runCases(t *testing.T, cases []checkCase, checker func(dir string) *doccheck.Checker) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := fixture(t, tc.md)
			var st doccheck.Stats
			problems, err := checker(dir).CheckFiles([]string{"doc.md"}, &st)
			if err != nil {
				t.Fatal(err)
			}
			if len(problems) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(problems), len(tc.want), list(problems))
			}
			for i, w := range tc.want {
				rest := problems[i].String()
				for _, part := range strings.Split(w, "…") {
					at := strings.Index(rest, part)
					if at < 0 {
						t.Errorf("problem %d is %q, want %q", i, problems[i], w)
						break
					}
					rest = rest[at+len(part):]
				}
			}
		})
	}
}

func list(ps []doccheck.Problem) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString("\t" + p.String() + "\n")
	}
	return b.String()
}

const fence = "```"

// TestCheckerGo: the checker passes good Go blocks of every shape and
// fails wrong names, wrong types and what does not parse, at the line at
// fault.
func TestCheckerGo(t *testing.T) {
	g := sharedGo(t)
	runCases(t, []checkCase{
		{name: "statements using the predeclared names", md: "# x\n\n" + fence + "go\n" +
			"page, err := client.ListJobs(ctx, hopper.ListParams{Queue: \"email\"})\n" +
			"if err != nil {\n\tlog.Fatal(err)\n}\nfmt.Println(page.Next)\n" + fence + "\n"},
		{name: "declarations", md: fence + "go\n" +
			"type Email struct {\n\tTo string `json:\"to\"`\n}\n\nvar opts = []jobs.EnqueueOption{jobs.Queue(\"email\"), jobs.Priority(1)}\n" +
			"\nfunc migrate(ctx context.Context, pool *pgxpool.Pool) error { return schema.Up(ctx, pool) }\n" + fence + "\n"},
		{name: "a whole file", md: fence + "go\n" +
			"package main\n\nimport (\n\t\"context\"\n\n\t\"github.com/hopperq/hopper\"\n\t\"github.com/jackc/pgx/v5/pgxpool\"\n)\n\n" +
			"func main() {\n\tpool, err := pgxpool.New(context.Background(), \"\")\n\tif err != nil {\n\t\tpanic(err)\n\t}\n\t_ = hopper.NewClient(pool)\n}\n" + fence + "\n"},
		{name: "statements that return an error", md: fence + "go\n" +
			"if err := schema.Up(ctx, pool); err != nil {\n\treturn fmt.Errorf(\"migrate: %w\", err)\n}\n" + fence + "\n"},
		{name: "a predeclared name declared again", md: fence + "go\n" +
			"client := hopper.NewClient(pool)\n_ = client\n" + fence + "\n" + fence + "go\nvar client = hopper.NewClient(pool)\n" + fence + "\n"},
		{name: "declarations among statements", md: fence + "go\n" +
			"func handle(ctx context.Context) error {\n\treturn nil\n}\n\nerr := handle(ctx)\n" + fence + "\n"},
		{name: "hopperotel, a module of its own", md: fence + "go\n" +
			"remove := jobs.UseEnqueue(hopperotel.EnqueueHook())\ndefer remove()\n" +
			"cfg := worker.Config{Middleware: []worker.Middleware{hopperotel.Middleware()}}\n" +
			"reader := metric.NewPeriodicReader(nil, metric.WithProducer(hopperotel.MetricProducer(prometheus.DefaultGatherer)))\n" + fence + "\n"},
		{name: "unused variables and imports are fine", md: fence + "go\nx := 1\nvar d time.Duration\n" + fence + "\n"},
		{name: "a wrong name", md: "text\n\n" + fence + "go\nn := 1\n_ = n\nerr := hopper.NoSuchFunction(ctx)\n" + fence + "\n",
			want: []string{"doc.md:6: go: undefined: hopper.NoSuchFunction (block at line 3)"}},
		{name: "a wrong method", md: fence + "go\njob, err := client.NoSuchMethod(ctx, 1)\n" + fence + "\n",
			want: []string{"doc.md:2: go: client.NoSuchMethod undefined"}},
		{name: "a wrong type", md: fence + "go\nvar n int = hopper.NewClient(pool)\n" + fence + "\n",
			want: []string{"doc.md:2: go: cannot use hopper.NewClient(pool)"}},
		{name: "an undeclared variable", md: fence + "go\nres, err := client.GetJob(ctx, id)\n" + fence + "\n",
			want: []string{"undefined: id"}},
		{name: "pseudo-code", md: fence + "go\nif err := schema.Up(ctx, pool); err != nil { … }\n" + fence + "\n",
			want: []string{"doc.md:2: go:"}},
		{name: "a whole file with a wrong import", md: fence + "go\npackage main\n\nimport \"github.com/hopperq/hopper/nosuch\"\n\nfunc main() { nosuch.X() }\n" + fence + "\n",
			want: []string{"doc.md:4: go: could not import github.com/hopperq/hopper/nosuch"}},
		{name: "text blocks are not checked", md: fence + "text\nhopper.NoSuchFunction(…)\n" + fence + "\n"},
		{name: "a skipped block", md: "<!-- doccheck: skip pseudo-code on purpose -->\n" + fence + "go\nhopper.NoSuchFunction(…)\n" + fence + "\n"},
	}, func(dir string) *doccheck.Checker { return &doccheck.Checker{Root: dir, Go: g, HopperBin: hopperBin} })
}

// TestCheckerShell: make targets, hopper commands, their actions and
// flags are checked; other commands are taken as they are.
func TestCheckerShell(t *testing.T) {
	runCases(t, []checkCase{
		{name: "good commands", md: fence + "sh\n# set up\nmake demo\nmake test\ngo run ./cmd/hopper jobs list --queue email --json\n" +
			"hopper --schema app jobs list --limit 10\nDATABASE_URL=postgres://localhost/app hopper migrate up\n" +
			"hopper schedules list --json | jq .\ncd docs && ls\ngit clone https://example.com/x.git && cd x\npsql -c 'select 1'\nhopper help jobs\n" + fence + "\n"},
		{name: "subshells, scripts and go tool", md: fence + "sh\nmkdir -p tools && (cd docs && ls) && make demo\nbash .ci/run\nbash scripts/yours.sh\ngo run ./cmd/yours\n" +
			"go tool -modfile=tools/go.mod hopper sql export third_party/hopper\n" + fence + "\n"},
		{name: "a missing script", md: fence + "sh\nbash .ci/nosuch.sh\n" + fence + "\n",
			want: []string{"doc.md:2: bash .ci/nosuch.sh: no .ci/nosuch.sh in the repository"}},
		{name: "an unknown command under go tool", md: fence + "sh\ngo tool hopper frobnicate\n" + fence + "\n",
			want: []string{"doc.md:2: go tool hopper frobnicate: …frobnicate"}},
		{name: "a console transcript: output lines are not commands", md: fence + "console\n$ hopper jobs list --limit 2\nID  STATE\nmake nosuch here is output\n" + fence + "\n"},
		{name: "continued lines", md: fence + "sh\nhopper jobs list \\\n  --queue email \\\n  --nosuch\n" + fence + "\n",
			want: []string{"doc.md:2: hopper jobs list --queue email --nosuch: hopper jobs: …nosuch"}},
		{name: "a missing make target", md: fence + "sh\nmake demo\nmake nosuch\n" + fence + "\n",
			want: []string{`doc.md:3: make nosuch: Makefile has no target "nosuch"`}},
		{name: "a block in a list item, and a ~~~ fence", md: "1. Run it:\n\n   " + fence + "sh\n   make demo\n   make nosuch\n   " + fence + "\n\n~~~bash\nmake nosuch2\n~~~\n",
			want: []string{`doc.md:5: make nosuch: Makefile has no target "nosuch"`, `doc.md:9: make nosuch2`}},
		{name: "a make target after cd", md: fence + "sh\ncd docs && make demo\n" + fence + "\n",
			want: []string{"no docs/Makefile"}},
		{name: "an unknown hopper command", md: fence + "bash\nhopper frobnicate --all\n" + fence + "\n",
			want: []string{"doc.md:2: hopper frobnicate --all: …frobnicate"}},
		{name: "an unknown action", md: fence + "sh\nbin/hopper jobs frobnicate\n" + fence + "\n",
			want: []string{`unknown jobs action "frobnicate"`}},
		{name: "an unknown flag", md: fence + "sh\nhopper jobs list --nosuch x\n" + fence + "\n",
			want: []string{"doc.md:2: hopper jobs list --nosuch x: …nosuch"}},
		{name: "a flag without its value", md: fence + "sh\nhopper jobs list --queue\n" + fence + "\n",
			want: []string{"flag --queue needs a value"}},
		{name: "a flag's value that does not parse", md: fence + "sh\nhopper jobs list --limit many\n" + fence + "\n",
			want: []string{"doc.md:2: hopper jobs list --limit many: …many"}},
	}, func(dir string) *doccheck.Checker { return &doccheck.Checker{Root: dir, HopperBin: hopperBin} })
}

// TestCheckerLinks: relative links must lead to files, and their
// fragments to headings; skip directives must give a reason.
func TestCheckerLinks(t *testing.T) {
	runCases(t, []checkCase{
		{name: "good links", md: "# Top\n\nSee [the guide](docs/guide.md), [retries](docs/guide.md#retries-and-backoff), " +
			"[rules](monitoring/rules.yml), [up](#top), [site](https://example.com/x.md), ![img](<docs/guide.md>).\n\n[ref]: docs/guide.md\n"},
		{name: "links in code are not links", md: "Write `[x](nosuch.md)`.\n\n" + fence + "text\n[y](nosuch.md)\n" + fence + "\n"},
		{name: "a broken link", md: "# Top\n\nSee [the guide](docs/nosuch.md).\n",
			want: []string{"doc.md:3: link docs/nosuch.md: no such file or directory"}},
		{name: "a broken reference", md: "[ref]: monitoring/nosuch.yml\n",
			want: []string{"link monitoring/nosuch.yml: no such file"}},
		{name: "a broken anchor", md: "[retries](docs/guide.md#retry)\n[self](#nowhere)\n",
			want: []string{"no heading with anchor #retry in docs/guide.md", "no heading with anchor #nowhere in doc.md"}},
		{name: "out of the repository", md: "[x](../../etc/passwd)\n",
			want: []string{"leads outside the repository"}},
		{name: "a block without a language", md: "x\n" + fence + "\nhopper.NoSuchFunction()\n" + fence + "\n",
			want: []string{"doc.md:2: code block without a language"}},
		{name: "a skip without a reason", md: "<!-- doccheck: skip -->\n" + fence + "go\nx\n" + fence + "\n",
			want: []string{"doc.md:1: doccheck: skip needs a reason"}},
		{name: "a skip with no block after it", md: "<!-- doccheck: skip because -->\ntext\n",
			want: []string{"doc.md:1: doccheck: skip is not followed by a code block"}},
		{name: "an unknown directive", md: "<!-- doccheck: skpi x -->\n" + fence + "go\nx\n" + fence + "\n",
			want: []string{`unknown doccheck directive "skpi x"`}},
	}, func(dir string) *doccheck.Checker { return &doccheck.Checker{Root: dir, HopperBin: hopperBin} })
}

// TestCheckerSQL: SQL blocks run against a migrated schema, with the line
// of a failing statement.
func TestCheckerSQL(t *testing.T) {
	db := testdb.New(t)
	runner := doccheck.SQLRunner(db.Pool)
	runCases(t, []checkCase{
		{name: "queries of Hopper's tables", md: fence + "sql\n-- the jobs waiting\nSELECT queue, count(*)\nFROM hopper_jobs\nGROUP BY queue;\n" +
			"SELECT 'a;b', $$x;y$$ /* ; */;\n" + fence + "\n"},
		{name: "a statement with parameters is prepared", md: fence + "sql\nSELECT id FROM hopper_jobs WHERE queue = $1 AND id > $2;\n" + fence + "\n"},
		{name: "statements that cannot run in a transaction", md: fence + "sql\nVACUUM hopper_jobs;\nSELECT 1;\n" + fence + "\n"},
		{name: "statements see the ones before them", md: fence + "sql\nBEGIN;\nCREATE TABLE orders (id bigint);\nSELECT id FROM orders;\nCOMMIT;\n" + fence + "\n"},
		{name: "a table that does not exist", md: "# SQL\n\n" + fence + "sql\nSELECT 1;\n\nSELECT *\nFROM hopper_nosuch;\n" + fence + "\n",
			want: []string{`doc.md:7: sql: ERROR: relation "hopper_nosuch" does not exist`}},
		{name: "a column that does not exist, prepared", md: fence + "sql\nSELECT nosuch FROM hopper_jobs WHERE id = $1;\n" + fence + "\n",
			want: []string{`doc.md:2: sql: ERROR: column "nosuch" does not exist`}},
		{name: "a syntax error", md: fence + "sql\nSELEC 1;\n" + fence + "\n",
			want: []string{`doc.md:2: sql: ERROR: syntax error at or near "SELEC"`}},
	}, func(dir string) *doccheck.Checker { return &doccheck.Checker{Root: dir, SQL: runner} })
}
