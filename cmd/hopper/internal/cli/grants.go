package cli

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/grants"
)

func grantsCommand() *command {
	var as string
	var apply bool
	kinds := make([]string, len(grants.Roles))
	for i, r := range grants.Roles {
		kinds[i] = string(r)
	}
	return &command{
		name: "grants",
		args: "ROLE --as " + strings.Join(kinds, "|") + " [--apply]",
		summary: "print (or, with --apply, run in one transaction) the GRANT statements that give ROLE what its kind of role needs on Hopper's schema: " +
			"run it with the owner role after every hopper migrate up (with --schema S, printing needs no database)",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&as, "as", "", "the kind of role: "+strings.Join(kinds, ", ")+" (required)")
			fs.BoolVar(&apply, "apply", false, "run the statements, in one transaction, instead of only printing them")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			if len(args) != 1 || args[0] == "" {
				return fmt.Errorf("%w: grants takes one role name", errUsage)
			}
			if as == "" {
				return fmt.Errorf("%w: say which kind of role %s is: --as %s", errUsage, args[0], strings.Join(kinds, "|"))
			}
			role, err := grants.Parse(as)
			if err != nil {
				return fmt.Errorf("%w: --as: %v", errUsage, err)
			}
			stmts, _ := grants.Of(role)
			schemaName := e.schema
			if schemaName != "" && !apply {
				fmt.Fprint(e.stdout, grants.Script(role, schemaName, args[0]))
				return nil
			}
			pool, err := e.connect()
			if err != nil {
				return err
			}
			defer pool.Close()
			if schemaName == "" {
				// Where this session finds hopper_jobs: the schema
				// hopper migrate up installed in, on the same search_path.
				schemaName, err = db.New(pool).HopperSchema(e.ctx)
				if errors.Is(err, pgx.ErrNoRows) {
					return fmt.Errorf("no hopper_jobs table on the search_path: run hopper migrate up first, or name the schema with --schema")
				}
				if err != nil {
					return fmt.Errorf("grants: find Hopper's schema: %w", err)
				}
			}
			if apply {
				tx, err := pool.Begin(e.ctx)
				if err != nil {
					return fmt.Errorf("grants: %w", err)
				}
				defer func() { _ = tx.Rollback(e.ctx) }()
				for _, s := range stmts {
					// The one kind of statement built in Go: see
					// grants.Statement.SQL, which quotes the two names.
					if _, err := tx.Exec(e.ctx, s.SQL(schemaName, args[0])); err != nil {
						return fmt.Errorf("grants: %s: %w (nothing was granted)", firstLine(s.SQL(schemaName, args[0])), err)
					}
				}
				if err := tx.Commit(e.ctx); err != nil {
					return fmt.Errorf("grants: commit: %w (nothing was granted)", err)
				}
			}
			fmt.Fprint(e.stdout, grants.Script(role, schemaName, args[0]))
			return nil
		},
	}
}

// firstLine is s up to its first line break.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
