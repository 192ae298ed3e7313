package cli

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hopperq/hopper/queries"
	"github.com/hopperq/hopper/schema"
)

// stampName is the file export writes beside schema/ and queries/: which
// files it wrote and their digests, so that check can tell drift and a
// later export knows the folder is Hopper's to replace.
const stampName = "HOPPER_SQL"

func sqlCommand() *command {
	var clean bool
	var pkg, out string
	return &command{
		name:    "sql",
		actions: []string{"export", "check", "entry"},
		args:    "export [--clean] DIR | check DIR | entry [--package P] [--out O] DIR",
		summary: "export: write this version's schema and query files to DIR/schema and DIR/queries, with Hopper's LICENSE (for your own sqlc project), " +
			"replacing an earlier export; check: report how DIR differs from this version; entry: print the sqlc.yaml entry that compiles DIR's queries",
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&clean, "clean", false, "export: also remove .sql files in DIR/schema and DIR/queries that this version does not have, in a folder no export wrote")
			fs.StringVar(&pkg, "package", "hopperdb", "entry: the Go package to generate")
			fs.StringVar(&out, "out", "internal/hopperdb", "entry: where sqlc writes it")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			if len(args) != 2 {
				return fmt.Errorf("%w: say export DIR, check DIR or entry DIR", errUsage)
			}
			switch args[0] {
			case "export":
				return sqlExport(e, args[1], clean)
			case "check":
				return sqlCheck(e, args[1])
			case "entry":
				return sqlEntry(e, args[1], pkg, out)
			}
			if hint := didYouMean(args[0], "", []string{"export", "check", "entry"}); hint != "" {
				return fmt.Errorf("%w: unknown sql action %q%s", errUsage, args[0], hint)
			}
			return fmt.Errorf("%w: unknown sql action %q (say export DIR, check DIR or entry DIR)", errUsage, args[0])
		},
	}
}

// sqlEntry prints the sqlc.yaml entry that compiles an export's queries
// into Go with the same types as Hopper's own db package.
func sqlEntry(e *env, dir, pkg, out string) error {
	dir = filepath.ToSlash(filepath.Clean(dir))
	fmt.Fprintf(e.stdout, `  # Hopper's queries (schema version %d), generated with the options of
  # Hopper's own db package. Keep this entry's options as they are: emit_*
  # options or overrides inherited from your other entries change the
  # generated API (for example emit_pointers_for_null_types: false turns
  # *string into pgtype.Text). List %s/schema first in the schema of your
  # own entries too, so your queries can join hopper_jobs.
  - engine: postgresql
    schema: %s/schema
    queries: %s/queries
    gen:
      go:
        package: %s
        out: %s
        sql_package: pgx/v5
        emit_json_tags: true
        emit_empty_slices: true
        emit_pointers_for_null_types: true
        overrides:
          # hopper_jobs' JSON columns scan as bytes (a copy, where
          # json.RawMessage would be parsed by json.Unmarshal on each read).
          - column: hopper_jobs.payload
            go_type:
              type: "[]byte"
          - column: hopper_jobs.errors
            go_type:
              type: "[]byte"
          - column: hopper_jobs.meta
            go_type:
              type: "[]byte"
          - db_type: jsonb
            go_type: encoding/json.RawMessage
          - db_type: timestamptz
            go_type: time.Time
          - db_type: pg_catalog.timestamptz
            go_type: time.Time
          - db_type: jsonb
            nullable: true
            go_type: encoding/json.RawMessage
          - db_type: timestamptz
            nullable: true
            go_type:
              type: time.Time
              pointer: true
          - db_type: pg_catalog.timestamptz
            nullable: true
            go_type:
              type: time.Time
              pointer: true
`, schema.Latest(), dir, dir, dir, pkg, out)
	return nil
}

// sqlFiles is this build's SQL by path relative to the export folder, and
// the licence that goes with it.
func sqlFiles() (map[string][]byte, error) {
	out := map[string][]byte{"LICENSE": queries.License}
	for sub, files := range map[string]fs.FS{"schema": schema.Files, "queries": queries.Files} {
		entries, err := fs.ReadDir(files, ".")
		if err != nil {
			return nil, err
		}
		for _, entry := range entries {
			data, err := fs.ReadFile(files, entry.Name())
			if err != nil {
				return nil, err
			}
			out[sub+"/"+entry.Name()] = data
		}
	}
	return out, nil
}

// foundSQL lists the .sql files in dir/schema and dir/queries, and the
// LICENSE an export writes, by path relative to dir.
func foundSQL(dir string) ([]string, error) {
	var out []string
	if _, err := os.Stat(filepath.Join(dir, "LICENSE")); err == nil {
		out = append(out, "LICENSE")
	}
	for _, sub := range []string{"schema", "queries"} {
		matches, err := filepath.Glob(filepath.Join(dir, sub, "*.sql"))
		if err != nil {
			return nil, err
		}
		for _, m := range matches {
			out = append(out, sub+"/"+filepath.Base(m))
		}
	}
	sort.Strings(out)
	return out, nil
}

func sqlExport(e *env, dir string, clean bool) error {
	want, err := sqlFiles()
	if err != nil {
		return err
	}
	found, err := foundSQL(dir)
	if err != nil {
		return err
	}
	_, stampErr := os.Stat(filepath.Join(dir, stampName))
	ours := stampErr == nil // an earlier export: Hopper's folder to replace
	var stale []string
	for _, rel := range found {
		if _, ok := want[rel]; !ok {
			stale = append(stale, rel)
		}
	}
	if len(stale) > 0 && !ours && !clean {
		return fmt.Errorf("%s holds %s, which this version of Hopper does not have, and no export wrote it (no %s); nothing written (pass --clean to remove such files)",
			dir, strings.Join(stale, ", "), stampName)
	}
	for _, rel := range stale {
		if err := os.Remove(filepath.Join(dir, filepath.FromSlash(rel))); err != nil {
			return err
		}
	}
	paths := make([]string, 0, len(want))
	for rel := range want {
		paths = append(paths, rel)
	}
	sort.Strings(paths)
	var stamp bytes.Buffer
	fmt.Fprintf(&stamp, "# Written by hopper sql export: Hopper's schema and queries at schema version %d.\n", schema.Latest())
	fmt.Fprintf(&stamp, "# Do not edit these files: hopper sql check DIR reports any difference from the installed Hopper.\n")
	for _, rel := range paths {
		out := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(out, want[rel], 0o644); err != nil {
			return err
		}
		fmt.Fprintf(&stamp, "%s %s\n", digest(want[rel]), rel)
	}
	if err := os.WriteFile(filepath.Join(dir, stampName), stamp.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %d files to %s (schema/, queries/ and the LICENSE, schema version %d)", len(paths), dir, schema.Latest())
	if len(stale) > 0 {
		fmt.Fprintf(e.stdout, "; removed %s", strings.Join(stale, ", "))
	}
	fmt.Fprintln(e.stdout)
	return nil
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// sqlCheck reports every difference between dir and this build's SQL.
func sqlCheck(e *env, dir string) error {
	want, err := sqlFiles()
	if err != nil {
		return err
	}
	found, err := foundSQL(dir)
	if err != nil {
		return err
	}
	if len(found) == 0 {
		return fmt.Errorf("%s holds no schema/*.sql or queries/*.sql (run hopper sql export %s)", dir, dir)
	}
	if v, ok := stampVersion(filepath.Join(dir, stampName)); ok {
		fmt.Fprintf(e.stdout, "%s was exported at schema version %d; this Hopper is at %d\n", dir, v, schema.Latest())
	}
	var drift []string
	present := map[string]bool{}
	for _, rel := range found {
		present[rel] = true
		data, ok := want[rel]
		if !ok {
			drift = append(drift, "extra:   "+rel+" (this version does not have it)")
			continue
		}
		have, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			return err
		}
		if !bytes.Equal(have, data) {
			drift = append(drift, "changed: "+rel)
		}
	}
	for rel := range want {
		if !present[rel] {
			drift = append(drift, "missing: "+rel)
		}
	}
	sort.Strings(drift)
	for _, d := range drift {
		fmt.Fprintln(e.stdout, d)
	}
	if len(drift) > 0 {
		return fmt.Errorf("%s differs from this version of Hopper in %d files (hopper sql export %s brings it up to date)", dir, len(drift), dir)
	}
	fmt.Fprintf(e.stdout, "%s matches this version of Hopper (schema version %d, %d files)\n", dir, schema.Latest(), len(want))
	return nil
}

// stampVersion reads the schema version an export's stamp records.
func stampVersion(path string) (uint, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	first, _, _ := strings.Cut(string(data), "\n")
	_, after, ok := strings.Cut(first, "schema version ")
	if !ok {
		return 0, false
	}
	var v uint
	if _, err := fmt.Sscanf(after, "%d.", &v); err != nil {
		return 0, false
	}
	return v, true
}
