package licensecheck_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/hopperq/hopper/internal/tools/licensecheck"
)

// repoRoot is the repository's root, from this package's folder.
const repoRoot = "../../.."

// licensesDoc is the list of every dependency's licence.
const licensesDoc = "docs/licenses.md"

// modules are the repository's modules whose dependencies reach users:
// the library, and the OpenTelemetry adapter (a module of its own). The
// others (dashboard/e2e, examples/embed-sqlc, internal/testbed/testdb/dockerpg,
// tools) are for tests, examples and code generation, never imported by
// an application.
var modules = []struct{ name, dir string }{
	{"hopper", "."},
	{"hopperotel", "hopperotel"},
}

// subModules carry the same LICENSE as the root.
var subModules = []string{"hopperotel", "dashboard/e2e", "examples/embed-sqlc", "internal/testbed/testdb/dockerpg", "tools"}

// dep is one module version a module of the repository needs.
type dep struct {
	path, version, dir string
	neededBy           []string
}

// goOffline runs the go command in dir without a network: the module
// cache only.
func goOffline(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join(repoRoot, dir)
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOWORK=off", "GOFLAGS=-mod=readonly", "GOTOOLCHAIN=local")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s(with GOPROXY=off: run go mod download in %s first if a module is missing from the cache)", strings.Join(args, " "), dir, err, stderr.String(), dir)
	}
	return out
}

type listedModule struct {
	Path, Version, Dir string
	Main               bool
	Replace            *listedModule
}

// decodeAll decodes a stream of JSON values, as go list -json prints.
func decodeAll[T any](t *testing.T, b []byte) []T {
	t.Helper()
	var out []T
	d := json.NewDecoder(bytes.NewReader(b))
	for {
		var v T
		if err := d.Decode(&v); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
}

// needed returns every module version the repository's modules need:
// the requirements of their go.mod files, and the module of every package
// their packages and tests compile, each with the module cache folder
// holding its source.
func needed(t *testing.T) map[string]*dep {
	t.Helper()
	deps := map[string]*dep{}
	for _, m := range modules {
		var gomod struct {
			Require []struct{ Path, Version string }
		}
		if err := json.Unmarshal(goOffline(t, m.dir, "mod", "edit", "-json"), &gomod); err != nil {
			t.Fatal(err)
		}
		modCache := strings.TrimSpace(string(goOffline(t, m.dir, "env", "GOMODCACHE")))
		found := map[string]listedModule{}
		for _, r := range gomod.Require {
			found[r.Path] = listedModule{Path: r.Path, Version: r.Version, Dir: filepath.Join(modCache, escapePath(r.Path)+"@"+r.Version)}
		}
		type pkg struct{ Module *listedModule }
		for _, p := range decodeAll[pkg](t, goOffline(t, m.dir, "list", "-deps", "-test", "-json=Module", "./...")) {
			if p.Module != nil && !p.Module.Main {
				found[p.Module.Path] = *p.Module
			}
		}
		for _, lm := range found {
			if strings.HasPrefix(lm.Path, "github.com/hopperq/hopper") {
				continue // the repository's own modules, replaced by their folders
			}
			dir := lm.Dir
			if lm.Replace != nil {
				dir = lm.Replace.Dir
			}
			if _, err := os.Stat(dir); dir == "" || err != nil {
				t.Fatalf("%s %s (needed by %s) is not in the module cache: run go mod download in %s", lm.Path, lm.Version, m.name, m.dir)
			}
			key := lm.Path + " " + lm.Version
			if deps[key] == nil {
				deps[key] = &dep{path: lm.Path, version: lm.Version, dir: dir}
			}
			deps[key].neededBy = append(deps[key].neededBy, m.name)
		}
	}
	return deps
}

// escapePath is a module path as the module cache spells it: every
// capital letter as "!" and the letter in lower case.
func escapePath(path string) string {
	var b strings.Builder
	for _, r := range path {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// listedRow is one row of docs/licenses.md's table.
type listedRow struct {
	path, version, license, neededBy string
}

// listed reads the rows of docs/licenses.md's table: | `module` | version
// | licence | needed by |.
func listed(t *testing.T) map[string]listedRow {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, licensesDoc))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]listedRow{}
	for i, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 4 {
			t.Fatalf("%s:%d: want | `module` | version | licence | needed by |, got %q", licensesDoc, i+1, line)
		}
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		r := listedRow{path: strings.Trim(cells[0], "`"), version: cells[1], license: cells[2], neededBy: cells[3]}
		key := r.path + " " + r.version
		if _, dup := rows[key]; dup {
			t.Errorf("%s:%d: %s is listed twice", licensesDoc, i+1, key)
		}
		rows[key] = r
	}
	if len(rows) == 0 {
		t.Errorf("%s lists no module", licensesDoc)
	}
	return rows
}

// TestDependencyLicenses keeps docs/licenses.md true: every module
// version the library or hopperotel needs is listed, with the licence its
// own licence files carry (read from the module cache, classified by
// their text), and that licence is a permissive one; no row names a
// module that is no longer needed.
func TestDependencyLicenses(t *testing.T) {
	t.Parallel()
	deps := needed(t)
	rows := listed(t)
	var keys []string
	for k := range deps {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		d := deps[k]
		license, files, err := licensecheck.ModuleLicense(d.dir)
		if err != nil {
			t.Fatal(err)
		}
		neededBy := strings.Join(d.neededBy, ", ")
		switch {
		case len(files) == 0:
			t.Errorf("%s: no licence file in %s; a module without one cannot be used", k, d.dir)
			continue
		case license == "":
			t.Errorf("%s: cannot tell the licence of %v in %s; read it, and teach licensecheck its text if it is permissive", k, files, d.dir)
			continue
		case !licensecheck.Permissive(license):
			t.Errorf("%s is under %s, which is not an allowed permissive licence", k, license)
		}
		r, ok := rows[k]
		if !ok {
			t.Errorf("%s lacks a row for a needed module; add:\n| `%s` | %s | %s | %s |", licensesDoc, d.path, d.version, license, neededBy)
			continue
		}
		if r.license != license {
			t.Errorf("%s says %s is under %s; its licence files say %s", licensesDoc, k, r.license, license)
		}
		if r.neededBy != neededBy {
			t.Errorf("%s says %s is needed by %q; it is needed by %q", licensesDoc, k, r.neededBy, neededBy)
		}
	}
	for k := range rows {
		if deps[k] == nil {
			t.Errorf("%s lists %s, which no module of the repository needs any more; remove its row", licensesDoc, k)
		}
	}
}

// TestLicenseFiles: the repository is under MIT, and every module of its
// own carries the same LICENSE file as the root.
func TestLicenseFiles(t *testing.T) {
	t.Parallel()
	root, err := os.ReadFile(filepath.Join(repoRoot, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	if got := licensecheck.Classify(string(root)); got != "MIT" {
		t.Errorf("LICENSE is %q; want MIT", got)
	}
	if !strings.Contains(string(root), "Copyright (c) 2026 The Hopper authors") {
		t.Error("LICENSE lacks its copyright line, Copyright (c) 2026 The Hopper authors")
	}
	for _, dir := range subModules {
		if _, err := os.Stat(filepath.Join(repoRoot, dir, "go.mod")); err != nil {
			t.Errorf("%s is listed as a module but has no go.mod: %v", dir, err)
		}
		b, err := os.ReadFile(filepath.Join(repoRoot, dir, "LICENSE"))
		if err != nil {
			t.Errorf("module %s has no LICENSE: %v", dir, err)
			continue
		}
		if !bytes.Equal(b, root) {
			t.Errorf("%s/LICENSE differs from the root's LICENSE", dir)
		}
	}
	// The copy that `hopper sql export` writes beside the SQL it copies.
	if b, err := os.ReadFile(filepath.Join(repoRoot, "queries", "LICENSE")); err != nil || !bytes.Equal(b, root) {
		t.Errorf("queries/LICENSE (written by hopper sql export) must be the root's LICENSE: %v", err)
	}
	// Every go.mod in the tree is the root or one of subModules.
	err = filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || (strings.HasPrefix(d.Name(), ".") && path != repoRoot)) {
			return filepath.SkipDir
		}
		if d.Name() != "go.mod" {
			return nil
		}
		rel, err := filepath.Rel(repoRoot, filepath.Dir(path))
		if err != nil {
			return err
		}
		if rel != "." && !slices.Contains(subModules, filepath.ToSlash(rel)) {
			t.Errorf("%s is a module without a LICENSE check: add it to subModules and copy LICENSE into it", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestClassify: each allowed licence's usual text is named, and copyleft
// texts are told apart from it.
func TestClassify(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"Permission is hereby granted, free of charge, to any person obtaining a copy\nof this software":                                                                                                                         "MIT",
		"Redistribution and use in source and binary forms, with or without\nmodification, are permitted provided that the following conditions are met:\n\n* Neither the name of Google Inc. nor the names of its contributors": "BSD-3-Clause",
		"Redistribution and use in source and binary forms, with or without\n   modification, are permitted provided that the following conditions are met:\n1. Redistributions of source code":                                  "BSD-2-Clause",
		"                                 Apache License\n                           Version 2.0, January 2004":                                                                                                                  "Apache-2.0",
		"Permission to use, copy, modify, and/or distribute this software for any\npurpose with or without fee is hereby granted":                                                                                                "ISC",
		"Mozilla Public License Version 2.0\n==================================\n ... GNU Lesser General Public License":                                                                                                         "MPL-2.0",
		"GNU GENERAL PUBLIC LICENSE\nVersion 3, 29 June 2007":                                                                                                                                                                    "GPL",
		"GNU AFFERO GENERAL PUBLIC LICENSE": "AGPL",
		"Business Source License 1.1":       "BUSL",
		"all rights reserved":               "",
	}
	for text, want := range cases {
		if got := licensecheck.Classify(text); got != want {
			t.Errorf("Classify(%.40q) = %q, want %q", text, got, want)
		}
	}
	for _, l := range []string{"GPL", "AGPL", "MIT AND GPL", ""} {
		if licensecheck.Permissive(l) {
			t.Errorf("Permissive(%q) = true", l)
		}
	}
	if !licensecheck.Permissive("Apache-2.0 AND BSD-3-Clause") {
		t.Error("Permissive(Apache-2.0 AND BSD-3-Clause) = false")
	}
}
