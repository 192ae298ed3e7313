package doccheck

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// shellLine is one command line of a shell block, continuation lines
// joined.
type shellLine struct {
	line int // within the file
	text string
}

// commandLines returns the commands of a shell block: every line but
// comments and heredoc bodies; when some line starts with "$ " (a console
// transcript), only those lines, and the others are output.
func commandLines(b Block) []shellLine {
	lines := strings.Split(strings.TrimSuffix(b.Text, "\n"), "\n")
	prompt := false
	for _, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "$ ") || strings.TrimSpace(l) == "$" {
			prompt = true
		}
	}
	var out []shellLine
	heredoc := ""
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		n := b.Line + 1 + i
		if heredoc != "" {
			if strings.TrimSpace(l) == heredoc {
				heredoc = ""
			}
			continue
		}
		t := strings.TrimSpace(l)
		if prompt {
			rest, ok := strings.CutPrefix(t, "$ ")
			if !ok {
				continue // output
			}
			t = strings.TrimSpace(rest)
		}
		for strings.HasSuffix(t, `\`) && i+1 < len(lines) {
			i++
			t = strings.TrimSuffix(t, `\`) + " " + strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(lines[i]), "> "))
		}
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if m := heredocRE.FindStringSubmatch(t); m != nil {
			heredoc = m[1]
		}
		out = append(out, shellLine{line: n, text: t})
	}
	return out
}

var heredocRE = regexp.MustCompile(`<<-?\s*['"]?([A-Za-z_][A-Za-z0-9_]*)['"]?`)

// words splits a command line into words and operators (&&, ||, ;, |, &),
// with quotes removed. A # outside quotes starts a comment. $(...) and
// backquotes are kept as one word.
func words(s string) []string {
	var out []string
	var cur strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			out = append(out, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == ' ' || ch == '\t':
			flush()
		case ch == '#' && !inWord:
			flush()
			return out
		case ch == '\'':
			inWord = true
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				cur.WriteString(s[i+1:])
				i = len(s)
			} else {
				cur.WriteString(s[i+1 : i+1+j])
				i += j + 1
			}
		case ch == '"':
			inWord = true
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				cur.WriteByte(s[i])
			}
		case ch == '\\' && i+1 < len(s):
			inWord = true
			i++
			cur.WriteByte(s[i])
		case ch == '$' && i+1 < len(s) && s[i+1] == '(':
			inWord = true
			depth := 0
			for ; i < len(s); i++ {
				cur.WriteByte(s[i])
				if s[i] == '(' {
					depth++
				} else if s[i] == ')' {
					depth--
					if depth == 0 {
						break
					}
				}
			}
		case ch == '(' || ch == ')':
			flush()
			out = append(out, string(ch))
		case ch == '&' || ch == '|' || ch == ';':
			flush()
			op := string(ch)
			if i+1 < len(s) && (s[i+1] == ch) && ch != ';' {
				op += string(ch)
				i++
			}
			out = append(out, op)
		default:
			inWord = true
			cur.WriteByte(ch)
		}
	}
	flush()
	return out
}

// simpleCommands splits words at operators, drops redirections and the
// VAR=value assignments before a command.
func simpleCommands(ws []string) [][]string {
	var cmds [][]string
	var cur []string
	for i := 0; i < len(ws); i++ {
		w := ws[i]
		switch {
		case w == "&&" || w == "||" || w == ";" || w == "|" || w == "&" || w == "(" || w == ")":
			if len(cur) > 0 {
				cmds = append(cmds, cur)
			}
			cur = nil
			if w == "(" || w == ")" {
				cmds = append(cmds, []string{w}) // a subshell: its cd does not last
			}
			continue
		case redirectRE.MatchString(w):
			if redirectOnlyRE.MatchString(w) { // "> file": the file is the next word
				i++
			}
			continue
		case len(cur) == 0 && assignRE.MatchString(w):
			continue
		case len(cur) == 0 && (w == "sudo" || w == "time" || w == "exec" || w == "env" || w == "command"):
			continue
		}
		cur = append(cur, w)
	}
	if len(cur) > 0 {
		cmds = append(cmds, cur)
	}
	return cmds
}

var (
	redirectRE     = regexp.MustCompile(`^[0-9]*(>>?|<<?<?|>&|<&)`)
	redirectOnlyRE = regexp.MustCompile(`^[0-9]*(>>?|<<?<?)$`)
	assignRE       = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
)

// checkShell checks the commands of a shell block. The block's directory
// starts at the repository's root and follows its cd commands.
func (c *Checker) checkShell(rel string, b Block) []Problem {
	var problems []Problem
	cwd := "." // relative to Root; "" when unknown
	cloned := ""
	for _, l := range commandLines(b) {
		bad := func(format string, args ...any) {
			problems = append(problems, Problem{File: rel, Line: l.line, Block: b.Line, Msg: fmt.Sprintf(format, args...)})
		}
		var outer []string // the directories outside the subshells
		for _, cmd := range simpleCommands(words(l.text)) {
			name := cmd[0]
			args := cmd[1:]
			switch {
			case name == "(":
				outer = append(outer, cwd)
			case name == ")" && len(outer) > 0:
				cwd, outer = outer[len(outer)-1], outer[:len(outer)-1]
			case (name == "bash" || name == "sh") && len(args) > 0 && cwd != "":
				if script := c.repoScript(cwd, args[0]); script != "" {
					if _, err := os.Stat(filepath.Join(c.Root, filepath.FromSlash(script))); err != nil {
						bad("%s: no %s in the repository", strings.Join(cmd, " "), script)
					}
				}
			case name == "go" && len(args) >= 2 && args[0] == "tool" && toolIndex(args[1:], "hopper") >= 0:
				if err := c.checkHopper(args[toolIndex(args[1:], "hopper")+2:]); err != nil {
					bad("%s: %v", strings.Join(cmd, " "), err)
				}
			case name == "cd":
				cwd = c.cd(cwd, args, cloned)
			case name == "git" && len(args) >= 2 && args[0] == "clone":
				var pos []string // URL [DIR]
				for _, a := range args[1:] {
					if !strings.HasPrefix(a, "-") {
						pos = append(pos, a)
					}
				}
				switch len(pos) {
				case 1:
					cloned = strings.TrimSuffix(path.Base(pos[0]), ".git")
				case 2:
					cloned = pos[1]
				}
			case name == "make":
				if cwd == "" {
					continue
				}
				if err := c.checkMake(cwd, args); err != nil {
					bad("%s: %v", strings.Join(cmd, " "), err)
				}
			case isHopper(name):
				if err := c.checkHopper(args); err != nil {
					bad("%s: %v", strings.Join(cmd, " "), err)
				}
			case name == "go" && len(args) >= 2 && args[0] == "run" && isHopperPackage(args[1:]):
				i := hopperPackageIndex(args[1:]) + 2
				if err := c.checkHopper(args[i:]); err != nil {
					bad("%s: %v", strings.Join(cmd, " "), err)
				}
			}
		}
	}
	return problems
}

// cd follows a cd command: the new directory relative to Root, or "" when
// it is unknown (outside the repository, or a variable).
func (c *Checker) cd(cwd string, args []string, cloned string) string {
	if cwd == "" || len(args) != 1 {
		return ""
	}
	to := args[0]
	if strings.ContainsAny(to, "$~`") || strings.HasPrefix(to, "/") || to == "-" {
		return ""
	}
	if cwd == "." && cloned != "" && to == cloned {
		// git clone .../hopper && cd hopper: the repository's root.
		if _, err := os.Stat(filepath.Join(c.Root, to)); err != nil {
			return "."
		}
	}
	next := path.Clean(path.Join(cwd, to))
	if next == ".." || strings.HasPrefix(next, "../") {
		return ""
	}
	if fi, err := os.Stat(filepath.Join(c.Root, filepath.FromSlash(next))); err != nil || !fi.IsDir() {
		return ""
	}
	return next
}

// checkMake checks that every target a make command names exists.
func (c *Checker) checkMake(cwd string, args []string) error {
	dir, makefile := cwd, ""
	var targets []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-C" && i+1 < len(args):
			i++
			dir = path.Join(dir, args[i])
		case strings.HasPrefix(a, "-C"):
			dir = path.Join(dir, a[2:])
		case a == "-f" && i+1 < len(args):
			i++
			makefile = args[i]
		case (a == "-j" || a == "-l" || a == "-o" || a == "-W" || a == "-I") && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-"):
			i++
		case strings.HasPrefix(a, "-"):
		case assignRE.MatchString(a):
		default:
			targets = append(targets, a)
		}
	}
	if makefile == "" {
		makefile = "Makefile"
		for _, name := range []string{"GNUmakefile", "makefile", "Makefile"} {
			if _, err := os.Stat(filepath.Join(c.Root, dir, name)); err == nil {
				makefile = name
				break
			}
		}
	}
	mf := path.Join(dir, makefile)
	known, err := c.targets(mf)
	if err != nil {
		return fmt.Errorf("no %s", mf)
	}
	for _, t := range targets {
		if !known[t] {
			return fmt.Errorf("%s has no target %q", mf, t)
		}
	}
	return nil
}

var targetRE = regexp.MustCompile(`^([A-Za-z0-9_.%/$(){}-][A-Za-z0-9_.%/$(){} -]*?)\s*::?(?:[^=]|$)`)

// targets reads the targets a Makefile defines.
func (c *Checker) targets(makefile string) (map[string]bool, error) {
	if t, ok := c.makeTargets[makefile]; ok {
		return t, nil
	}
	f, err := os.Open(filepath.Join(c.Root, filepath.FromSlash(makefile)))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	known := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "#") {
			continue
		}
		m := targetRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, t := range strings.Fields(m[1]) {
			if !strings.HasPrefix(t, ".") {
				known[t] = true
			}
		}
	}
	if c.makeTargets == nil {
		c.makeTargets = map[string]map[string]bool{}
	}
	c.makeTargets[makefile] = known
	return known, sc.Err()
}

// isHopper reports whether a command runs the hopper CLI.
func isHopper(name string) bool {
	return name == "hopper" || strings.HasSuffix(name, "/bin/hopper") || name == "bin/hopper"
}

// isHopperPackage reports whether go run's arguments run cmd/hopper.
func isHopperPackage(args []string) bool { return hopperPackageIndex(args) >= 0 }

func hopperPackageIndex(args []string) int {
	for i, a := range args {
		if strings.HasPrefix(a, "-") {
			continue
		}
		p, _, _ := strings.Cut(a, "@")
		if p == "./cmd/hopper" || p == "cmd/hopper" || p == "./cmd/hopper/" || p == "github.com/hopperq/hopper/cmd/hopper" {
			return i
		}
		return -1
	}
	return -1
}

func (c *Checker) checkHopper(args []string) error {
	if c.Hopper != nil {
		return c.Hopper(args)
	}
	if c.HopperBin == "" {
		return errors.New("no hopper binary to check it with (Checker.HopperBin)")
	}
	return CheckHopperArgs(c.HopperBin, args)
}

// toolIndex returns the index of tool among go tool's arguments (after
// its flags), or -1.
func toolIndex(args []string, tool string) int {
	for i, a := range args {
		if strings.HasPrefix(a, "-") {
			continue
		}
		if a == tool {
			return i
		}
		return -1
	}
	return -1
}

// repoScript returns the path in the repository of a script that a
// command runs (bash .ci/run), or "" when it is no path of the repository:
// a flag, a variable, or a directory the repository does not have (a
// user's own scripts/).
func (c *Checker) repoScript(cwd, arg string) string {
	if strings.HasPrefix(arg, "-") || strings.ContainsAny(arg, "$~`") || path.IsAbs(arg) {
		return ""
	}
	p := path.Clean(path.Join(cwd, arg))
	if p == ".." || strings.HasPrefix(p, "../") {
		return ""
	}
	dir, _, found := strings.Cut(p, "/")
	if !found {
		return p // a file at the root
	}
	if fi, err := os.Stat(filepath.Join(c.Root, dir)); err != nil || !fi.IsDir() {
		return ""
	}
	return p
}

// Commands returns the simple commands of a shell block (see checkShell),
// each as its words, with the line it is on: for tests that check a
// program's command lines against the program itself.
func Commands(b Block) []Command {
	var out []Command
	for _, l := range commandLines(b) {
		for _, cmd := range simpleCommands(words(l.text)) {
			if cmd[0] != "(" && cmd[0] != ")" {
				out = append(out, Command{Line: l.line, Words: cmd})
			}
		}
	}
	return out
}

// Command is one simple command of a shell block: its words, without the
// VAR=value assignments and redirections around it.
type Command struct {
	Line  int // within the file
	Words []string
}
