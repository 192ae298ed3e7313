// Package licensecheck names the licence of a Go module from the text of
// its licence files, as the module cache holds them, so that a test can
// keep docs/licenses.md true without a network. It is for tests only.
package licensecheck

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Allowed are the permissive licences Hopper's dependencies may carry:
// each lets Hopper, and the programs built with it, be distributed under
// MIT.
var Allowed = map[string]bool{
	"MIT":          true,
	"BSD-2-Clause": true,
	"BSD-3-Clause": true,
	"Apache-2.0":   true,
	"ISC":          true,
	"MPL-2.0":      true,
}

// marker is a licence and the phrases (in normalized text) that name it:
// all of them must appear.
type marker struct {
	id      string
	phrases []string
}

// markers, most specific first; BSD's variants are told apart below.
var markers = []marker{
	{"Apache-2.0", []string{"apache license", "version 2.0"}},
	{"MIT", []string{"permission is hereby granted, free of charge, to any person obtaining a copy"}},
	{"ISC", []string{"permission to use, copy, modify, and", "distribute this software for any purpose with or without fee is hereby granted"}},
	{"MPL-2.0", []string{"mozilla public license", "2.0"}},
	{"BSD", []string{"redistribution and use in source and binary forms, with or without modification, are permitted"}},
	// Copyleft and source-available licences, named so that a test
	// reports them instead of failing to classify.
	{"AGPL", []string{"gnu affero general public license"}},
	{"LGPL", []string{"gnu lesser general public license"}},
	{"GPL", []string{"gnu general public license"}},
	{"SSPL", []string{"server side public license"}},
	{"BUSL", []string{"business source license"}},
}

var (
	nonText = regexp.MustCompile(`[^a-z0-9.,/'()-]+`)
	space   = regexp.MustCompile(`\s+`)
)

// normalize lowercases text and turns every run of spaces, comment
// markers and other punctuation into one space.
func normalize(text string) string {
	t := strings.ToLower(text)
	t = nonText.ReplaceAllString(t, " ")
	return strings.TrimSpace(space.ReplaceAllString(t, " "))
}

// Classify names the licences a licence text holds, sorted and joined
// with " AND " (a file may carry several, such as a fork's MIT beside
// its upstream's Apache-2.0); "" when it knows none of them.
func Classify(text string) string {
	t := normalize(text)
	found := map[string]bool{}
	for _, m := range markers {
		all := true
		for _, p := range m.phrases {
			if !strings.Contains(t, normalize(p)) {
				all = false
				break
			}
		}
		if !all {
			continue
		}
		switch m.id {
		case "BSD":
			if strings.Contains(t, "neither the name") || strings.Contains(t, "may be used to endorse or promote") {
				found["BSD-3-Clause"] = true
			} else {
				found["BSD-2-Clause"] = true
			}
		case "GPL":
			// "GNU General Public License" also appears inside the LGPL's
			// and AGPL's names and in MPL-2.0's secondary-licence clause.
			if !found["LGPL"] && !found["AGPL"] && !found["MPL-2.0"] {
				found["GPL"] = true
			}
		case "LGPL":
			if !found["MPL-2.0"] { // MPL-2.0 names the LGPL as a secondary licence
				found["LGPL"] = true
			}
		case "AGPL":
			if !found["MPL-2.0"] {
				found["AGPL"] = true
			}
		default:
			found[m.id] = true
		}
	}
	var ids []string
	for id := range found {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return strings.Join(ids, " AND ")
}

// licenseFile matches the names licence files go by.
var licenseFile = regexp.MustCompile(`(?i)^(licen[cs]e|copying)([.-].*)?$`)

// ModuleLicense classifies every licence file at the root of a module's
// folder (LICENSE, LICENSE.txt, LICENCE.md, COPYING…) and returns the
// licences found, joined as Classify joins them, and the files read.
func ModuleLicense(dir string) (license string, files []string, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", nil, err
	}
	found := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() || !licenseFile.MatchString(e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", nil, err
		}
		files = append(files, e.Name())
		if c := Classify(string(b)); c != "" {
			for _, id := range strings.Split(c, " AND ") {
				found[id] = true
			}
		}
	}
	var ids []string
	for id := range found {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return strings.Join(ids, " AND "), files, nil
}

// Permissive reports whether every licence of a joined list is allowed.
func Permissive(license string) bool {
	if license == "" {
		return false
	}
	for _, id := range strings.Split(license, " AND ") {
		if !Allowed[id] {
			return false
		}
	}
	return true
}
