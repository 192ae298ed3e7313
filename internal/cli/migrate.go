package cli

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/hopperq/hopper/schema"
)

func migrateCommand() *command {
	var all bool
	var schemaName string
	return &command{
		name:    "migrate",
		args:    "up | down [N] | version | force V",
		summary: "apply (up), undo (down: the last N, default 1), report (version) or, after a hand repair, record (force) Hopper's schema migrations",
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&all, "all", false, "with down: undo every migration (drops Hopper's tables and jobs)")
			fs.StringVar(&schemaName, "schema", "", "install in this existing schema instead of the search_path's first")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("%w: say up, down or version", errUsage)
			}
			pool, err := e.connect()
			if err != nil {
				return err
			}
			defer pool.Close()
			opts := []schema.Option{schema.WithLog(func(format string, a ...any) {
				fmt.Fprintf(e.stdout, format+"\n", a...)
			})}
			if schemaName != "" {
				opts = append(opts, schema.WithSchema(schemaName))
			}
			mg, err := schema.NewMigrator(e.ctx, pool, opts...)
			if err != nil {
				return err
			}
			defer mg.Close()
			switch args[0] {
			case "up":
				if len(args) > 1 {
					return fmt.Errorf("%w: up takes no argument", errUsage)
				}
				if err := mg.Up(e.ctx); err != nil {
					return err
				}
			case "down":
				n := 1
				if len(args) > 1 {
					n, err = strconv.Atoi(args[1])
					if err != nil || n < 1 || len(args) > 2 {
						return fmt.Errorf("%w: down takes a positive number of migrations", errUsage)
					}
				}
				if all {
					n = 0
				}
				if err := mg.Down(e.ctx, n); err != nil {
					return err
				}
			case "version":
			case "force":
				v, err := strconv.Atoi(strings.Join(args[1:], ""))
				if err != nil || len(args) != 2 || v < 0 {
					return fmt.Errorf("%w: force takes the version the schema is really at", errUsage)
				}
				if err := mg.Force(v); err != nil {
					return err
				}
			default:
				return fmt.Errorf("%w: unknown migrate action %q (up, down or version)", errUsage, args[0])
			}
			v, dirty, err := mg.Version()
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "schema version %d (this build's latest: %d)\n", v, schema.Latest())
			if dirty {
				return fmt.Errorf("%w: a migration failed half-way; repair the schema by hand, then run hopper migrate force <version it is at>", schema.ErrDirty)
			}
			return nil
		},
	}
}
