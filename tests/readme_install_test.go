package tests

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// readme is the file whose install steps TestReadmeInstall runs.
const readme = "../README.md"

// readmeClone is the README's clone step. The test cannot reach GitHub,
// so it puts a link to this checkout where the clone would go.
const readmeClone = "git clone https://github.com/hopperq/hopper ../hopper"

// readmeSection returns the text of a "## " section of the README.
func readmeSection(t *testing.T, text, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(text, "\n## "+heading+"\n")
	require.True(t, ok, "README.md has no ## %s section", heading)
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// fencedBlocks returns the bodies of the ```lang blocks of a text.
func fencedBlocks(text, lang string) []string {
	var out []string
	for {
		_, after, ok := strings.Cut(text, "\n```"+lang+"\n")
		if !ok {
			return out
		}
		body, rest, ok := strings.Cut(after, "\n```\n")
		if !ok {
			return out
		}
		out = append(out, body)
		text = rest
	}
}

// TestReadmeInstall runs the README's install section as a user types it,
// from an empty folder: its three ```sh blocks in order (make the module;
// clone, require, tidy and run; build the hopper command and use it),
// with the quickstart saved as main.go after the first, as the section
// says. The module must keep its requirement on Hopper through go mod
// tidy, the program must run to its end against a real database, and the
// command must build from the clone and answer.
func TestReadmeInstall(t *testing.T) {
	testdb.Slow(t, "the README's install steps in a blank module")
	t.Parallel()
	text, err := os.ReadFile(readme)
	require.NoError(t, err)
	install := readmeSection(t, string(text), "Install")
	blocks := fencedBlocks(install, "sh")
	require.Len(t, blocks, 3, "README.md's install section: the module, Hopper in it, the hopper command")
	require.Contains(t, install, "as `main.go`", "the install section says when to save the quickstart")
	quickstart := fencedBlocks(readmeSection(t, string(text), "Quickstart"), "go")
	require.NotEmpty(t, quickstart, "README.md's quickstart has a ```go block")

	root, err := filepath.Abs("..")
	require.NoError(t, err)
	work := t.TempDir()
	main := filepath.Join(work, "quickstart.go.txt")
	require.NoError(t, os.WriteFile(main, []byte(quickstart[0]+"\n"), 0o644))

	// One script, so that the README's cd lasts from block to block.
	var script strings.Builder
	script.WriteString("set -ex\n")
	for i, b := range blocks {
		for _, line := range strings.Split(b, "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if strings.HasPrefix(line, "git clone ") {
				require.Equal(t, readmeClone, line, "the clone step this test stands in for")
				line = `ln -s "$HOPPER" ../hopper`
			}
			script.WriteString(line + "\n")
		}
		if i == 0 {
			script.WriteString(`test ! -e main.go && cp "$QUICKSTART" main.go` + "\n")
		}
	}
	require.Contains(t, script.String(), "go mod tidy\n")
	require.Contains(t, script.String(), "go run .\n")

	empty := testdb.NewEmpty(t)
	gobin := filepath.Join(work, "bin")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	m := &goModule{t: t, ctx: ctx, dir: work, env: append(os.Environ(),
		"GOWORK=off", "GOFLAGS=", "GOTOOLCHAIN=local", "HOPPER="+root, "QUICKSTART="+main,
		"GOBIN="+gobin, "PATH="+gobin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"DATABASE_URL="+empty.URL)}
	out := m.sh(script.String())

	require.Contains(t, out, "worker stopped", "the quickstart ran to its end")
	require.Contains(t, out, "job 1: done")
	require.Contains(t, out, "QUEUE", "hopper queues list answered")
	app := *m
	app.dir = filepath.Join(work, "app")
	require.Equal(t, "v0.0.0", app.goMod().requirement("github.com/hopperq/hopper"), "go mod tidy kept the requirement on Hopper")
	_, err = os.Stat(filepath.Join(gobin, "hopper"))
	require.NoError(t, err, "the hopper command was installed")
}
