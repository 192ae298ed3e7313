package failover

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/hacluster"
	"github.com/hopperq/hopper/internal/tools/doccheck"
)

// TestDocsPgAutoctlCommands keeps the guides' pg_autoctl commands true,
// which doccheck cannot run: each names a command of the pg_autoctl that
// the formations here use, and each of its --options is one that
// `pg_autoctl <command> --help` lists.
func TestDocsPgAutoctlCommands(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(hacluster.Program); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(hacluster.Available())
		}
		t.Skip(hacluster.Available())
	}
	files, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	checked := 0
	help := map[string]string{} // command path -> its help, "" when there is no such command
	for _, file := range append(files, "../../README.md") {
		src, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, b := range doccheck.ParseMarkdown(file, string(src)).Blocks {
			if b.Skip || !slices.Contains([]string{"sh", "bash", "shell", "console"}, b.Lang) {
				continue
			}
			for _, c := range doccheck.Commands(b) {
				at := slices.Index(c.Words, "pg_autoctl")
				if at < 0 {
					continue
				}
				checked++
				where := filepath.Base(file) + ":" + strconv.Itoa(c.Line)
				path, opts := autoctlCommand(c.Words[at+1:])
				name, text := "", ""
				for n := len(path); n > 0; n-- { // the longest prefix that is a command
					key := strings.Join(path[:n], " ")
					if _, ok := help[key]; !ok {
						help[key] = autoctlHelp(path[:n])
					}
					if help[key] != "" {
						name, text = key, help[key]
						break
					}
				}
				if name == "" {
					t.Errorf("%s: pg_autoctl %s: no such command", where, strings.Join(path, " "))
					continue
				}
				for _, o := range opts {
					if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(o) + `\s`).MatchString(text) {
						t.Errorf("%s: pg_autoctl %s: %s is not an option of it (pg_autoctl %s --help)", where, name, o, name)
					}
				}
			}
		}
	}
	require.NotZero(t, checked, "the guides have pg_autoctl commands")
	t.Logf("%d pg_autoctl commands checked", checked)
}

// autoctlCommand splits pg_autoctl's arguments into the words of the
// command path (before the first option; global options such as -q
// skipped) and the --options given (without values).
func autoctlCommand(args []string) (path, opts []string) {
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		args = args[1:] // -q, --verbose: pg_autoctl's own
	}
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		path, args = append(path, args[0]), args[1:]
	}
	for _, a := range args {
		if strings.HasPrefix(a, "--") {
			name, _, _ := strings.Cut(a, "=")
			opts = append(opts, name)
		}
	}
	return path, opts
}

// autoctlHelp is `pg_autoctl <path> --help` when path is a command (its
// usage line names it; a group of commands has none), "" otherwise.
func autoctlHelp(path []string) string {
	var out bytes.Buffer
	cmd := exec.Command(hacluster.Program, append(slices.Clone(path), "--help")...)
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run() // --help exits non-zero on some versions; the text says
	text := out.String()
	if !strings.Contains(text, "usage: pg_autoctl "+strings.Join(path, " ")+" ") {
		return ""
	}
	return text
}
