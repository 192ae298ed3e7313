package doccheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"
)

// CheckHopperArgs checks a hopper command line (the arguments after the
// program name) without running it: the command exists, its flags parse,
// and the action of a command that takes one ("jobs list") is one it
// knows. bin is the path of a built hopper command (go build ./cmd/hopper).
//
// It runs the CLI with --help appended: the CLI parses every flag before
// it and prints the command's usage instead of running it. A line that
// ends with a flag expecting a value would make that flag swallow --help,
// so such a line is caught first, by a probe of the flag alone.
func CheckHopperArgs(bin string, args []string) error {
	if i := slices.Index(args, "--"); i >= 0 {
		args = args[:i]
	}
	cmdAt := commandIndex(args)
	if cmdAt < 0 {
		// Only global flags, or nothing: hopper prints its help.
		code, _, stderr := runCLI(bin, append(slices.Clone(args), "--help"))
		if code != 0 {
			return errors.New(firstLine(stderr))
		}
		return nil
	}
	cmd := args[cmdAt]
	if code, _, stderr := runCLI(bin, []string{cmd, "--help"}); code != 0 {
		return errors.New(firstLine(stderr)) // no such command
	}
	help := false
	for _, a := range args[cmdAt+1:] {
		if isHelpFlag(a) {
			help = true
		}
	}
	if last := args[len(args)-1]; !help && len(args) > cmdAt+1 && isFlag(last) && !strings.Contains(last, "=") {
		if kind := flagKind(bin, cmd, last); kind == flagValue {
			return fmt.Errorf("flag %s needs a value", last)
		}
	}
	code, stdout, stderr := runCLI(bin, append(slices.Clone(args), "--help"))
	if code != 0 {
		return errors.New(firstLine(stderr))
	}
	usage := firstLine(stdout)
	if cmd == "help" {
		if cmdAt+1 < len(args) && !strings.HasPrefix(usage, "Usage: hopper "+args[cmdAt+1]) {
			return fmt.Errorf("unknown command %q", args[cmdAt+1])
		}
		return nil
	}
	if help {
		return nil
	}
	actions := usageActions(strings.TrimPrefix(usage, "Usage: hopper "+cmd))
	if len(actions) == 0 {
		return nil
	}
	// The first positional argument is the action: walk the flags, a
	// value-taking one with its value.
	rest := args[cmdAt+1:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if !isFlag(a) {
			if !slices.Contains(actions, a) {
				return fmt.Errorf("unknown %s action %q (hopper %s takes %s)", cmd, a, cmd, strings.Join(actions, ", "))
			}
			return nil
		}
		if !strings.Contains(a, "=") && flagKind(bin, cmd, a) == flagValue {
			i++
		}
	}
	return fmt.Errorf("hopper %s needs an action: %s", cmd, strings.Join(actions, ", "))
}

// runCLI runs the hopper binary with a connection string that leads
// nowhere, so that even a command run by mistake could not reach a
// database, and returns its exit code and what it printed. A binary that
// does not start (or hangs) gives code -1 and the reason on stderr.
func runCLI(bin string, args []string) (code int, stdout, stderr string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	args = append([]string{"--database-url", "postgres://doccheck.invalid:1/none?connect_timeout=1"}, args...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) || ctx.Err() != nil {
			return -1, out.String(), fmt.Sprintf("run %s: %v\n%s", bin, err, errOut.String())
		}
		return exit.ExitCode(), out.String(), errOut.String()
	}
	return 0, out.String(), errOut.String()
}

type kind int

const (
	flagUnknown kind = iota
	flagBool
	flagValue
)

// flagKind tells whether a flag of a command is boolean or takes a value:
// --flag=doccheck-probe fails to parse as a boolean only.
func flagKind(bin, cmd, flag string) kind {
	code, _, stderr := runCLI(bin, []string{cmd, flag + "=doccheck-probe", "--help"})
	switch {
	case code == 0:
		return flagValue // a string flag took it
	case strings.Contains(stderr, "invalid boolean value"):
		return flagBool
	case strings.Contains(stderr, "unknown flag"):
		return flagUnknown
	default:
		return flagValue // an int or duration flag refused it
	}
}

// commandIndex returns the index of the command among args, after the
// global flags (--database-url URL, --schema NAME), or -1.
func commandIndex(args []string) int {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !isFlag(a) {
			return i
		}
		name := strings.TrimLeft(a, "-")
		if !strings.Contains(name, "=") && (name == "database-url" || name == "schema") {
			i++
		}
	}
	return -1
}

var actionRE = regexp.MustCompile(`^[a-z][a-z-]*$`)

// usageActions reads the actions of a command from its usage line:
// "list | pause Q | resume Q" has list, pause and resume; a usage that is
// not a list of alternatives has none.
func usageActions(usage string) []string {
	if !strings.Contains(usage, "|") {
		return nil
	}
	var actions []string
	for _, alt := range strings.Split(usage, " | ") {
		w := strings.Fields(alt)
		if len(w) == 0 || !actionRE.MatchString(w[0]) {
			if len(w) > 0 && w[0] == "..." {
				continue
			}
			return nil // "[--mode a|b]": a flag's values, not actions
		}
		if !slices.Contains(actions, w[0]) {
			actions = append(actions, w[0])
		}
	}
	return actions
}

func isFlag(a string) bool     { return len(a) > 1 && a[0] == '-' }
func isHelpFlag(a string) bool { return a == "-h" || a == "--help" || a == "-help" || a == "--h" }

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
