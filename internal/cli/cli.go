// Package cli implements the hopper command. Every subcommand reports
// failure as one line on stderr and a non-zero exit code, never a stack
// trace, and never prints a password from a connection string.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// errUsage marks a usage error (exit 2).
var errUsage = errors.New("usage")

// env is what a subcommand runs with.
type env struct {
	ctx    context.Context
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	dbURL  string // --database-url, or "" for DATABASE_URL / libpq defaults
}

type command struct {
	name    string
	args    string
	summary string
	run     func(e *env, fs *flag.FlagSet, args []string) error
	flags   func(fs *flag.FlagSet) // declares the command's flags
}

func commands() []*command {
	return []*command{
		migrateCommand(),
		enqueueCommand(),
		statsCommand(),
		deadCommand(),
		cancelCommand(),
		purgeCommand(),
		sqlCommand(),
		demoCommand(),
		benchCommand(),
	}
}

// Run runs the hopper command with args (without the program name) and
// returns the exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr}
	global := flag.NewFlagSet("hopper", flag.ContinueOnError)
	global.SetOutput(io.Discard)
	global.StringVar(&e.dbURL, "database-url", "", "")
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // hopper --help, hopper -h
			printHelp(stdout)
			return exitOK
		}
		fmt.Fprintf(stderr, "hopper: %v (run hopper help)\n", err)
		return exitUsage
	}
	args = global.Args()
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			if c := find(args[1]); c != nil {
				printUsage(stdout, c)
				return exitOK
			}
		}
		printHelp(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	c := find(args[0])
	if c == nil {
		fmt.Fprintf(stderr, "hopper: unknown command %q (run hopper help)\n", args[0])
		return exitUsage
	}
	fs := flag.NewFlagSet("hopper "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&e.dbURL, "database-url", e.dbURL, "PostgreSQL connection string (default: $DATABASE_URL, then the libpq defaults)")
	if c.flags != nil {
		c.flags(fs)
	}
	positional, err := parseInterspersed(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout, c)
			return exitOK
		}
		fmt.Fprintf(stderr, "hopper %s: %v (run hopper %s --help)\n", c.name, err, c.name)
		return exitUsage
	}
	err = c.run(e, fs, positional)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errUsage):
		msg := strings.TrimPrefix(err.Error(), errUsage.Error()+": ")
		fmt.Fprintf(stderr, "hopper %s: %s (run hopper %s --help)\n", c.name, oneLine(e.redact(msg)), c.name)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "hopper %s: %s\n", c.name, oneLine(e.redact(err.Error())))
		return exitError
	}
}

// parseInterspersed lets flags come before, between or after the
// positional arguments ("dead purge --older-than 7d").
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func find(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "hopper: operate a Hopper job queue in PostgreSQL")
	fmt.Fprintln(w, "\nUsage: hopper [--database-url URL] <command> [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nThe database is --database-url, else $DATABASE_URL, else the libpq defaults (PG* variables, localhost:5432).")
	fmt.Fprintln(w, "Run hopper help <command> (or hopper <command> --help) for a command's flags.")
}

func printUsage(w io.Writer, c *command) {
	fmt.Fprintf(w, "Usage: hopper %s %s\n\n%s\n", c.name, c.args, c.summary)
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.String("database-url", "", "PostgreSQL connection string (default: $DATABASE_URL, then the libpq defaults)")
	if c.flags != nil {
		c.flags(fs)
	}
	fmt.Fprintln(w, "\nFlags:")
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	sort.Strings(names)
	for _, n := range names {
		f := fs.Lookup(n)
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "  --%-16s %s%s\n", n, f.Usage, def)
	}
}

// oneLine folds a message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// url returns the connection string to use.
func (e *env) url() string {
	if e.dbURL != "" {
		return e.dbURL
	}
	return os.Getenv("DATABASE_URL")
}

// redact removes the connection string's password from a message.
func (e *env) redact(msg string) string {
	cfg, err := pgxpool.ParseConfig(e.url())
	if err != nil || cfg.ConnConfig.Password == "" {
		return msg
	}
	return strings.ReplaceAll(msg, cfg.ConnConfig.Password, "*****")
}

// target describes the database for messages, without the password.
func (e *env) target() string {
	cfg, err := pgxpool.ParseConfig(e.url())
	if err != nil {
		return "the database"
	}
	c := cfg.ConnConfig
	database := c.Database
	if database == "" {
		database = c.User // what the server assumes
	}
	return fmt.Sprintf("host=%s port=%d user=%s database=%s", c.Host, c.Port, c.User, database)
}

// errUnreachable says how to get a database.
var errUnreachable = errors.New("no PostgreSQL answers")

// connect opens a pool and checks that the database answers.
func (e *env) connect() (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(e.url())
	if err != nil {
		return nil, fmt.Errorf("bad connection string: %w", redactURLError(err))
	}
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", e.target(), err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("%w at %s: %v. Start one (apt install postgresql, or docker run -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:17) or pass --database-url / set DATABASE_URL",
			errUnreachable, e.target(), err)
	}
	return pool, nil
}

// redactURLError drops the connection string pgx quotes in parse errors.
func redactURLError(err error) error {
	msg := err.Error()
	if u, perr := url.Parse(msg); perr == nil && u.User != nil {
		return errors.New("cannot parse it")
	}
	if i := strings.Index(msg, "cannot parse `"); i >= 0 {
		if j := strings.Index(msg[i+14:], "`"); j >= 0 {
			return errors.New(msg[:i] + "cannot parse the connection string" + msg[i+14+j+1:])
		}
	}
	return err
}

// parseDuration accepts Go durations plus a "d" suffix for days ("7d").
func parseDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		d, err := time.ParseDuration(days + "h")
		return d * 24, err
	}
	return time.ParseDuration(s)
}
