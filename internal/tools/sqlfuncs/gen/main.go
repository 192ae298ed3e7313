// Command gen writes schema/functions/ from the migrations: go run
// ./internal/tools/sqlfuncs/gen SCHEMA_DIR OUT_DIR (make generate and make
// check-generated run it). Files in OUT_DIR that no function needs are
// removed, so that a dropped function's file goes with it.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hopperq/hopper/internal/tools/sqlfuncs"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: gen SCHEMA_DIR OUT_DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(schemaDir, out string) error {
	files, err := sqlfuncs.Extract(os.DirFS(schemaDir))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(out, "*.sql"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if _, keep := files[filepath.Base(f)]; !keep {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	for name, b := range files {
		if strings.ContainsAny(name, `/\`) {
			return fmt.Errorf("function file name %q", name)
		}
		if err := os.WriteFile(filepath.Join(out, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
