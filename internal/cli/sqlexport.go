package cli

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hopperq/hopper/queries"
	"github.com/hopperq/hopper/schema"
)

func sqlCommand() *command {
	return &command{
		name:    "sql",
		args:    "export DIR",
		summary: "write this version's schema and query files to DIR/schema and DIR/queries (for your own sqlc project)",
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			if len(args) != 2 || args[0] != "export" {
				return fmt.Errorf("%w: say export DIR", errUsage)
			}
			dir := args[1]
			n := 0
			for sub, files := range map[string]fs.FS{"schema": schema.Files, "queries": queries.Files} {
				out := filepath.Join(dir, sub)
				if err := os.MkdirAll(out, 0o755); err != nil {
					return err
				}
				entries, err := fs.ReadDir(files, ".")
				if err != nil {
					return err
				}
				for _, entry := range entries {
					data, err := fs.ReadFile(files, entry.Name())
					if err != nil {
						return err
					}
					if err := os.WriteFile(filepath.Join(out, entry.Name()), data, 0o644); err != nil {
						return err
					}
					n++
				}
			}
			fmt.Fprintf(e.stdout, "wrote %d files to %s (schema/ and queries/)\n", n, dir)
			return nil
		},
	}
}
