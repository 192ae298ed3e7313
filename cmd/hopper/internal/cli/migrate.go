package cli

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/buildinfo"
	"github.com/hopperq/hopper/internal/schemascope"
	"github.com/hopperq/hopper/schema"
)

const migrateActions = "up, down, version or force"

func migrateCommand() *command {
	var all, yes bool
	var schemaName string
	var lockTimeout time.Duration
	var lockAttempts int
	return &command{
		name:    "migrate",
		actions: []string{"up", "down", "version", "force"},
		args:    "up | down [N] [--yes] | down --all [--yes] | version | force V",
		summary: "apply (up), undo (down: the last N, default 1; asks first unless --yes), report (version) or, after a hand repair, record (force) Hopper's schema migrations",
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&all, "all", false, "with down: undo every migration (drops Hopper's tables and jobs)")
			fs.BoolVar(&yes, "yes", false, "with down: do not ask for confirmation")
			fs.StringVar(&schemaName, "schema", "", "install in this existing schema instead of the search_path's first")
			durationVar(fs, &lockTimeout, "lock-timeout", schema.DefaultLockTimeout,
				"up and down: how long a migration's statement may wait for a lock before the migration rolls back and runs again (0: the server's lock_timeout)")
			fs.IntVar(&lockAttempts, "lock-attempts", schema.DefaultLockAttempts, "up and down: how many times a migration that waited --lock-timeout runs in all")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("%w: say %s", errUsage, migrateActions)
			}
			// Check the arguments before connecting.
			if lockTimeout < 0 || lockAttempts < 1 {
				return fmt.Errorf("%w: --lock-timeout may not be negative and --lock-attempts must be at least 1", errUsage)
			}
			steps, force := 1, 0
			switch args[0] {
			case "up", "version":
				if len(args) > 1 {
					return fmt.Errorf("%w: %s takes no argument", errUsage, args[0])
				}
			case "down":
				if len(args) > 2 {
					return fmt.Errorf("%w: down takes a positive number of migrations", errUsage)
				}
				if len(args) == 2 {
					if all {
						return fmt.Errorf("%w: say down N or down --all, not both", errUsage)
					}
					n, err := strconv.Atoi(args[1])
					if err != nil || n < 1 {
						return fmt.Errorf("%w: down takes a positive number of migrations", errUsage)
					}
					steps = n
				}
				if all {
					steps = 0
				}
			case "force":
				v, err := strconv.Atoi(strings.Join(args[1:], ""))
				if err != nil || len(args) != 2 || v < 0 {
					return fmt.Errorf("%w: force takes the version the schema is really at (0 for none)", errUsage)
				}
				force = v
			default:
				if hint := didYouMean(args[0], "", []string{"up", "down", "version", "force"}); hint != "" {
					return fmt.Errorf("%w: unknown migrate action %q%s", errUsage, args[0], hint)
				}
				return fmt.Errorf("%w: unknown migrate action %q (%s)", errUsage, args[0], migrateActions)
			}
			pool, err := e.connect()
			if err != nil {
				return err
			}
			defer pool.Close()
			opts := []schema.Option{schema.Logf(func(format string, a ...any) {
				fmt.Fprintf(e.stdout, format+"\n", a...)
			}), schema.LockTimeout(lockTimeout, lockAttempts)}
			if schemaName != "" {
				opts = append(opts, schema.Name(schemaName))
			}
			mg, err := schema.NewMigrator(e.ctx, pool, opts...)
			if err != nil {
				return migrateErr(err)
			}
			defer mg.Close()
			v, dirty, err := mg.Version()
			if err != nil {
				return migrateErr(err)
			}
			if dirty && (args[0] == "up" || args[0] == "down") {
				return dirtyErr(v)
			}
			switch args[0] {
			case "up":
				err = mg.Up(e.ctx)
			case "down":
				err = migrateDown(e, pool, mg, v, steps, yes)
			case "force":
				err = mg.Force(force)
			}
			if err != nil {
				return migrateErr(err)
			}
			v, dirty, err = mg.Version()
			if err != nil {
				return migrateErr(err)
			}
			fmt.Fprintf(e.stdout, "schema version %d (this build's latest: %d)\n", v, schema.Latest())
			if dirty {
				return dirtyErr(v)
			}
			if args[0] == "version" {
				return printAppliedBy(e, mg, v)
			}
			return nil
		},
	}
}

// dirtyErr says how to repair a dirty migrations table.
func dirtyErr(version uint) error {
	return &cliError{
		msg: fmt.Sprintf("the schema migrations table is dirty: migration %d failed half-way; repair the schema by hand, then run hopper migrate force <version it is at>", version),
		err: schema.ErrDirty,
	}
}

// migrateDown undoes steps migrations (all when 0) from version from,
// asking first unless yes.
func migrateDown(e *env, pool *pgxpool.Pool, mg *schema.Migrator, from uint, steps int, yes bool) error {
	to, err := mg.PlanDown(steps)
	if err != nil {
		return err
	}
	if from == 0 { // down --all with nothing applied
		return nil
	}
	if !yes {
		var question string
		if to == 0 {
			live, dead, err := countJobs(e, pool, mg.Schema())
			if err != nil {
				return err
			}
			question = fmt.Sprintf("This drops Hopper's tables and every job in schema %s (%d live, %d dead). Type yes to go on: ",
				mg.Schema(), live, dead)
		} else {
			question = fmt.Sprintf("This undoes Hopper's schema migrations in schema %s from version %d to %d. Type yes to go on: ",
				mg.Schema(), from, to)
		}
		if err := confirm(e, question, "undone", true); err != nil {
			return err
		}
	}
	return mg.Down(e.ctx, steps)
}

// countJobs counts the live and dead jobs in the schema's Hopper tables.
func countJobs(e *env, pool *pgxpool.Pool, schemaName string) (live, dead int64, err error) {
	scoped, err := schemascope.New(pool, schemaName)
	if err != nil {
		return 0, 0, err
	}
	n, err := db.New(scoped).CountLiveAndDead(e.ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("count the jobs in schema %s: %w", schemaName, err)
	}
	live, dead = n.Live, n.Dead
	return live, dead, nil
}

// cliError gives an error of the schema package a message without its
// "hopper: migrate ...:" prefix, which the command's own prefix replaces.
type cliError struct {
	msg string
	err error
}

func (c *cliError) Error() string { return c.msg }
func (c *cliError) Unwrap() error { return c.err }

// migrateErr drops the schema package's prefixes from err's message.
func migrateErr(err error) error {
	if param, ok := refusedStartupParameter(err); ok && errors.Is(err, schema.ErrThroughPooler) {
		return &cliError{msg: fmt.Sprintf("connect `hopper migrate` to PostgreSQL directly, not through PgBouncer (it refuses the %s startup parameter)", param), err: err}
	}
	msg := err.Error()
	for _, prefix := range []string{"hopper: migrate: ", "hopper: migrate up: ", "hopper: migrate down: ", "hopper: migrate force: ", "hopper: migrate version: ", "hopper: "} {
		if rest, ok := strings.CutPrefix(msg, prefix); ok {
			msg = rest
			break
		}
	}
	return &cliError{msg: msg, err: err}
}

// printAppliedBy says which build applied the schema's version, as the
// migrator recorded it (hopper_migration_builds, from migration 30 on),
// so that the build that migrated can be set beside the application's.
func printAppliedBy(e *env, mg *schema.Migrator, version uint) error {
	builds, err := mg.Builds(e.ctx)
	if err != nil {
		return migrateErr(err)
	}
	for _, b := range builds {
		if b.Version != version {
			continue
		}
		commit := b.Revision
		switch {
		case commit == "":
			commit = buildinfo.Unstamped
		case b.Modified:
			commit += "+dirty"
		}
		fmt.Fprintf(e.stdout, "applied by hopper %s (%s, commit %s, %s) as role %s at %s\n",
			b.HopperVersion, b.Program, commit, b.Go, b.AppliedBy, b.AppliedAt.UTC().Format(time.RFC3339))
		return nil
	}
	if version > 0 {
		fmt.Fprintf(e.stdout, "applied by a build that did not record itself (before migration 30, or an older Hopper)\n")
	}
	return nil
}
