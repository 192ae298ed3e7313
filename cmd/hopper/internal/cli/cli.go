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
	"net"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/migrated"
	"github.com/hopperq/hopper/internal/pgurl"
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
	schema string // --schema, or "" for the connection string's search_path
	// sharded: --sharded, the commands work on the sharded Hopper of a
	// Citus coordinator (sharded.go).
	sharded bool
}

// schemaUsage documents the --schema flag every command but migrate takes
// (migrate has a --schema of its own: the schema to install in).
const schemaUsage = "use this schema (sets search_path; default: the connection string's search_path)"

// maxIdentifierBytes is PostgreSQL's limit on a name (NAMEDATALEN - 1).
const maxIdentifierBytes = 63

// checkSchemaName validates a --schema value.
func checkSchemaName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: --schema needs a schema name", errUsage)
	case len(name) > maxIdentifierBytes:
		return fmt.Errorf("%w: --schema %q is %d bytes long, over PostgreSQL's limit of %d", errUsage, name, len(name), maxIdentifierBytes)
	case strings.ContainsRune(name, 0):
		return fmt.Errorf("%w: --schema contains a NUL character", errUsage)
	}
	return nil
}

type command struct {
	name string
	// actions are the verbs of a command of the form "hopper NOUN VERB"
	// (queues: list, pause, ...), for hopper help; none for the others.
	actions []string
	args    string
	summary string
	run     func(e *env, fs *flag.FlagSet, args []string) error
	flags   func(fs *flag.FlagSet) // declares the command's flags
}

func commands() []*command {
	return []*command{
		migrateCommand(),
		grantsCommand(),
		enqueueCommand(),
		statsCommand(),
		keysCommand(),
		encryptionCommand(),
		jobsCommand(),
		queuesCommand(),
		schedulesCommand(),
		workersCommand(),
		shardsCommand(),
		sequencesCommand(),
		workflowsCommand(),
		eventsCommand(),
		patchesCommand(),
		deadCommand(),
		historyCommand(),
		sqlCommand(),
		uiCommand(),
		demoCommand(),
		benchCommand(),
		versionCommand(),
	}
}

// Run runs the hopper command with args (without the program name) and
// returns the exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr}
	global := flag.NewFlagSet("hopper", flag.ContinueOnError)
	global.SetOutput(io.Discard)
	global.StringVar(&e.dbURL, "database-url", "", "")
	global.StringVar(&e.schema, "schema", "", "")
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // hopper --help, hopper -h
			printHelp(stdout)
			return exitOK
		}
		fmt.Fprintf(stderr, "hopper: %v (run hopper help)\n", flagError(global, err))
		return exitUsage
	}
	args = global.Args()
	schemaSet := false
	global.Visit(func(f *flag.Flag) { schemaSet = schemaSet || f.Name == "schema" })
	if schemaSet {
		if err := checkSchemaName(e.schema); err != nil {
			fmt.Fprintf(stderr, "hopper: %s (run hopper help)\n", strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
			return exitUsage
		}
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			if c := find(args[1]); c != nil {
				printUsage(stdout, c)
				return exitOK
			}
			if !strings.HasPrefix(args[1], "-") { // hopper help --help: the help
				fmt.Fprintln(stderr, notACommand(args[1]))
				return exitUsage
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
		fmt.Fprintln(stderr, notACommand(args[0]))
		return exitUsage
	}
	fs := flag.NewFlagSet("hopper "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&e.dbURL, "database-url", e.dbURL, "PostgreSQL connection string (default: $DATABASE_URL, then the libpq defaults)")
	if c.flags != nil {
		c.flags(fs)
	}
	if fs.Lookup("schema") == nil {
		fs.StringVar(&e.schema, "schema", e.schema, schemaUsage)
	}
	positional, err := parseInterspersed(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout, c)
			return exitOK
		}
		fmt.Fprintf(stderr, "hopper %s: %v (run hopper %s --help)\n", c.name, flagError(fs, err), c.name)
		return exitUsage
	}
	fs.Visit(func(f *flag.Flag) { schemaSet = schemaSet || (f.Name == "schema" && f.Usage == schemaUsage) })
	if schemaSet {
		err = checkSchemaName(e.schema)
	}
	if err == nil {
		err = c.run(e, fs, positional)
	}
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errUsage):
		msg := strings.TrimPrefix(err.Error(), errUsage.Error()+": ")
		fmt.Fprintf(stderr, "%s (run hopper %s --help)\n", errorLine(c.name, oneLine(e.redact(msg))), c.name)
		return exitUsage
	default:
		fmt.Fprintln(stderr, errorLine(c.name, oneLine(e.redact(err.Error()))))
		return exitError
	}
}

// errorLine prefixes msg with "hopper <command>" once. The library's own
// errors say "hopper: " (so that they say where they come from in a
// program's log), at their start or after the operation that wrapped them
// ("enqueue k: hopper: invalid priority"): the command's prefix replaces
// it. When the operation repeats the command, the two become one:
// "enqueue k: hopper: invalid priority" under hopper enqueue prints as
// "hopper enqueue k: invalid priority".
func errorLine(command, msg string) string {
	msg = strings.TrimPrefix(msg, "hopper: ")
	msg = strings.ReplaceAll(msg, ": hopper: ", ": ")
	if r, ok := strings.CutPrefix(msg, command+": "); ok {
		msg = r
	} else if r, ok := strings.CutPrefix(msg, command+" "); ok {
		return "hopper " + command + " " + r
	}
	return "hopper " + command + ": " + msg
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
	fmt.Fprintln(w, "\nUsage: hopper [--database-url URL] [--schema NAME] <command> [<action>] [flags]\n\nCommands:")
	printCommands(w)
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
	if fs.Lookup("schema") == nil {
		fs.String("schema", "", schemaUsage)
	}
	fmt.Fprintln(w, "\nFlags:")
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	sort.Strings(names)
	for _, n := range names {
		f := fs.Lookup(n)
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "  --%-16s %s%s\n", n, f.Usage, def)
	}
}

// oneLine folds a message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// url returns the connection string to use, with --schema as its
// search_path.
func (e *env) url() string {
	dsn := e.baseURL()
	if e.schema != "" {
		dsn = pgurl.WithSearchPath(dsn, pgx.Identifier{e.schema}.Sanitize())
	}
	return dsn
}

// baseURL returns the connection string as given.
func (e *env) baseURL() string {
	if e.dbURL != "" {
		return e.dbURL
	}
	return os.Getenv("DATABASE_URL")
}

// commandLine is "hopper" with the connection flags the user gave, then
// args: a command to run next (the "more:" line of a listing). Without
// --database-url and --schema, pasted into another shell it would run
// against DATABASE_URL's database and search_path: another schema's jobs,
// silently. A password in --database-url is never printed: it is ***, and
// a shell comment at the end says to put it back.
func (e *env) commandLine(args string) string {
	var b strings.Builder
	b.WriteString("hopper")
	note := ""
	if e.dbURL != "" {
		dsn, masked := maskPassword(e.dbURL)
		b.WriteString(" --database-url " + shellQuote(dsn))
		switch {
		case dsn == urlPlaceholder:
			note = "  # put your --database-url back for " + urlPlaceholder
		case masked:
			note = "  # put the password back for " + passwordMask
		}
	}
	if e.schema != "" {
		b.WriteString(" --schema " + shellQuote(e.schema))
	}
	if e.sharded {
		args += " --sharded"
	}
	return b.String() + " " + args + note
}

const (
	// passwordMask stands for the password of a connection string that is
	// printed.
	passwordMask = "***"
	// urlPlaceholder stands for a connection string whose password could
	// not be masked for sure. It is no connection string: pasted, it
	// fails to parse rather than connect somewhere.
	urlPlaceholder = "URL"
)

// passwordKeyword finds the password of a keyword/value connection string,
// its value quoted ('a b', 'it\'s') or not (a\ b).
var passwordKeyword = regexp.MustCompile(`(^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|(?:[^\s\\]|\\.)*)`)

// maskPassword returns dsn with its password replaced by passwordMask, in
// whichever form (URL or keyword/value) dsn is written, and whether it had
// one. When the masked string cannot be shown to carry passwordMask as its
// password, it is urlPlaceholder: never the password.
func maskPassword(dsn string) (string, bool) {
	// Whether dsn holds a password is read from the text: pgconn's parsed
	// Password also comes from PGPASSWORD and ~/.pgpass, which a printed
	// command does not carry.
	var masked string
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return urlPlaceholder, true
		}
		// url escapes '*' in a password: a sentinel goes in, *** replaces it.
		const sentinel = "HOPPERPASSWORDMASK"
		had := false
		if pw, ok := u.User.Password(); ok && pw != "" {
			u.User = url.UserPassword(u.User.Username(), sentinel)
			had = true
		}
		if q := u.Query(); q.Has("password") {
			q.Set("password", sentinel)
			u.RawQuery = q.Encode()
			had = true
		}
		if !had {
			return dsn, false
		}
		masked = strings.ReplaceAll(u.String(), sentinel, passwordMask)
	} else {
		if !passwordKeyword.MatchString(dsn) {
			return dsn, false
		}
		masked = passwordKeyword.ReplaceAllString(dsn, "${1}password="+passwordMask)
	}
	// The string's own password wins over PGPASSWORD and ~/.pgpass: a
	// masked string that parses to passwordMask holds no other.
	if cfg, err := pgconn.ParseConfig(masked); err != nil || cfg.Password != passwordMask {
		return urlPlaceholder, true
	}
	return masked, true
}

// redact removes the connection string's password from a message.
func (e *env) redact(msg string) string {
	cfg, err := pgxpool.ParseConfig(e.baseURL())
	if err != nil || cfg.ConnConfig.Password == "" {
		return msg
	}
	return strings.ReplaceAll(msg, cfg.ConnConfig.Password, "*****")
}

// target describes the database for messages, without the password.
func (e *env) target() string {
	cfg, err := pgxpool.ParseConfig(e.baseURL())
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

// Pool sizes, for a connection string that sets no pool_max_conns of its
// own (one that does is obeyed). pgxpool's default, the larger of 4 and the
// number of CPUs, is a worker's size: every connection a command could open
// is one the server's max_connections no longer has for the workers.
//
//   - A command runs its statements one after another; the second
//     connection is room for a statement run beside a transaction, so that
//     a command never waits on itself. (hopper migrate's golang-migrate
//     opens one more connection of its own.)
//   - hopper ui serves a few requests at once, each running its statements
//     one after another, and samples stats in the background: a request
//     beyond four waits for a connection rather than opening one.
const (
	commandMaxConns   = 2
	dashboardMaxConns = 4
)

// sizePool caps cfg at maxConns connections, unless the connection string
// it was parsed from sets pool_max_conns (or pool_min_conns above maxConns).
func sizePool(cfg *pgxpool.Config, maxConns int32) {
	// pgxpool takes its settings out of what it parsed; pgconn keeps the
	// string's every unknown setting in RuntimeParams.
	if c, err := pgconn.ParseConfig(cfg.ConnString()); err == nil {
		if _, set := c.RuntimeParams["pool_max_conns"]; set {
			return
		}
	}
	cfg.MaxConns = max(maxConns, cfg.MinConns)
}

// connect opens a command's pool and checks that the database answers.
func (e *env) connect() (*pgxpool.Pool, error) { return e.connectSized(commandMaxConns) }

// connectSized is connect with a pool of at most maxConns connections
// (sizePool).
func (e *env) connectSized(maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(e.baseURL())
	if err != nil {
		return nil, badConnString(e.baseURL(), err)
	}
	sizePool(cfg, maxConns)
	hopper.DetectSilentPeers(&cfg.ConnConfig.Config)
	if e.schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{e.schema}.Sanitize()
	}
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", e.target(), err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, connectError(cfg.ConnConfig, err)
	}
	return pool, nil
}

// connectError says why a connection failed: nothing listens at the
// address, or the server answered and refused (with its one message), or
// something else on the way.
func connectError(cfg *pgx.ConnConfig, err error) error {
	addr := address(cfg.Host, cfg.Port)
	var pgErr *pgconn.PgError
	if param, ok := refusedStartupParameter(err); ok {
		return fmt.Errorf("the server at %s refused the %s startup parameter, as PgBouncer does: connect to PostgreSQL directly, not through PgBouncer", addr, param)
	}
	if errors.As(err, &pgErr) {
		var hint string
		switch pgErr.Code {
		case pgerrcode.InvalidPassword:
			hint = fmt.Sprintf("check the password of role %s", cfg.User)
		case pgerrcode.InvalidAuthorizationSpecification: // no such role, or pg_hba.conf rejects it
			hint = "check the user name in the connection string, or the server's pg_hba.conf"
		case pgerrcode.InvalidCatalogName:
			hint = fmt.Sprintf("check the database name in the connection string, or create it: createdb %s", cfg.Database)
		case pgerrcode.TooManyConnections:
			hint = "the server has no connection slot free"
		default:
			hint = "check the role, database and password in the connection string"
		}
		return fmt.Errorf("the server at %s refused the connection: %s (%s)", addr, pgErr.Message, hint)
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("nothing listens at %s (is PostgreSQL running? Start one: apt install postgresql, or docker run -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:17; or pass --database-url / set DATABASE_URL)", addr)
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return fmt.Errorf("cannot find host %s: %s (check the host in --database-url / DATABASE_URL)", dnsErr.Name, dnsErr.Err)
	}
	var netErr net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()) {
		return fmt.Errorf("no answer from %s in time (check the host and port, and any firewall between)", addr)
	}
	return fmt.Errorf("cannot connect to %s: %s", addr, dialFailures(err))
}

// refusedStartupParameter reports whether err is a server refusing a
// startup parameter, as PgBouncer does with every one it does not track
// (SQLSTATE 08P01, "unsupported startup parameter: search_path"), and
// names the parameter. PostgreSQL itself takes any setting there.
func refusedStartupParameter(err error) (string, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.ProtocolViolation {
		return "", false
	}
	return strings.CutPrefix(pgErr.Message, "unsupported startup parameter: ")
}

// dialFailures lists why each attempt of a failed connection failed, once
// each, without pgconn's "address (host):" prefixes, and without the
// refused TLS attempt that sslmode=prefer makes before a plain one.
func dialFailures(err error) string {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) || ce.Unwrap() == nil {
		return err.Error()
	}
	attempts := []error{ce.Unwrap()}
	if joined, ok := ce.Unwrap().(interface{ Unwrap() []error }); ok {
		attempts = joined.Unwrap()
	}
	var msgs []string
	seen := map[string]bool{}
	for _, a := range attempts {
		msg := a.Error()
		if inner := errors.Unwrap(a); inner != nil && strings.HasSuffix(msg, ": "+inner.Error()) {
			msg = inner.Error() // drop pgconn's per-dial "address (host):"
		}
		if seen[msg] || (strings.Contains(msg, "server refused TLS connection") && len(attempts) > 1) {
			continue
		}
		seen[msg] = true
		msgs = append(msgs, msg)
	}
	if len(msgs) == 0 {
		return ce.Unwrap().Error()
	}
	return strings.Join(msgs, "; ")
}

// address is a server's host and port, or its Unix socket, for messages.
func address(host string, port uint16) string {
	if strings.HasPrefix(host, "/") {
		return fmt.Sprintf("%s/.s.PGSQL.%d", host, port)
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// connectHopper connects, like connect, and checks that the search_path
// leads to Hopper's tables at the version this build needs, so that a
// command on an unmigrated schema, or one migrated only part of the way,
// says so (jobs.ErrNotMigrated) rather than that a relation or a column
// does not exist, or starts as if all were well.
func (e *env) connectHopper() (*pgxpool.Pool, error) { return e.connectHopperSized(commandMaxConns) }

// connectHopperSized is connectHopper with a pool of at most maxConns
// connections (sizePool).
func (e *env) connectHopperSized(maxConns int32) (*pgxpool.Pool, error) {
	pool, err := e.connectSized(maxConns)
	if err != nil {
		return nil, err
	}
	found, err := db.New(pool).LocateHopper(e.ctx)
	run := "hopper migrate up (with the same --database-url / search_path)"
	if e.schema != "" {
		run = "hopper --schema " + shellQuote(e.schema) + " migrate up (with the same --database-url)"
	}
	switch {
	case err != nil:
	case found.CurrentSchema == "" && e.schema != "":
		err = fmt.Errorf("schema %s does not exist in this database (check --schema, or create it and run hopper migrate up)", e.schema)
	case found.CurrentSchema == "":
		err = fmt.Errorf("no schema of the search_path (%s) exists in this database (check the connection string's search_path, or pass --schema)", found.SearchPath)
	case found.HopperSchema == "":
		err = migrated.Errorf(run, "schema %s has no Hopper tables (version 0)", found.CurrentSchema)
	default:
		// Read with a plain SELECT, not schema.Migrator: golang-migrate
		// takes its advisory lock (waiting behind a migration under way)
		// and creates the migrations table when this role cannot see it.
		err = migrated.Check(e.ctx, pool, found.HopperSchema, run)
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// connectClient is connectHopper for the commands that operate: a Client
// on the pool, and the function that closes it.
func (e *env) connectClient() (*hopper.Client, func(), error) {
	pool, err := e.connectHopper()
	if err != nil {
		return nil, nil, err
	}
	return hopper.NewClient(pool), pool.Close, nil
}

// badConnString is the error for a connection string pgx cannot parse.
// When it is neither form pgx reads (pgx then reports only that it failed
// as keyword/value), it says what was expected and what the input looks
// like: never the input itself, which may hold a password.
func badConnString(dsn string, err error) error {
	if !strings.Contains(err.Error(), "failed to parse as keyword/value") {
		return fmt.Errorf("bad connection string: %w", redactURLError(err))
	}
	return fmt.Errorf("bad connection string: it is neither a postgres:// URL nor key=value pairs: it looks like %s "+
		"(want postgres://user:password@host:5432/database, or host=H port=5432 user=U dbname=D)", connStringShape(dsn))
}

// uriScheme is the scheme of a URL, as RFC 3986 spells it.
var uriScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

// connStringShape describes a connection string pgx could not parse,
// naming no part of it that could be a password.
func connStringShape(dsn string) string {
	s := strings.TrimSpace(dsn)
	if scheme, _, ok := strings.Cut(s, "://"); ok && uriScheme.MatchString(scheme) {
		return fmt.Sprintf("a URL whose scheme is %q, not postgres or postgresql%s", scheme,
			didYouMean(scheme, "", []string{"postgres", "postgresql"}))
	}
	switch {
	case strings.Contains(s, "="):
		return "key=value pairs with one that is not key=value (separate them with spaces; quote a value with spaces in single quotes)"
	case strings.ContainsAny(s, "@/:"):
		return "a URL without postgres:// at its front"
	}
	return "a single word, not a connection string"
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
