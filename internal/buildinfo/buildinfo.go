// Package buildinfo says which Hopper a program was built with, and which
// build of the program it is, from the build information Go records in
// every binary: the worker's start log, its row in hopper_workers and its
// hopper_build_info gauge, the dashboard, the record of which build applied
// each migration, and `hopper version`.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// Module is Hopper's module path.
const Module = "github.com/hopperq/hopper"

// Unstamped is the Version of a build of Hopper's own tree that recorded
// no commit, and the Commit of any program that recorded none: go run and
// go test binaries never record one, nor does a build with
// -buildvcs=false or one outside a git checkout (a git worktree included:
// Go looks for a .git folder).
const Unstamped = "unstamped"

// NoStampReason says, for a person reading `hopper version`, why a build
// names no commit.
const NoStampReason = "the build recorded no commit: go run, go test, -buildvcs=false and builds outside a git checkout record none"

// Build is what Go recorded about the running program's build.
type Build struct {
	// Version is Hopper's module version, as Version returns it.
	Version string
	// Program is the main package's import path
	// ("github.com/hopperq/hopper/cmd/hopper", "example.com/shop/cmd/worker").
	Program string
	// ProgramVersion is the main module's version: a release or
	// pseudo-version Go derived from the checkout, "" when it recorded none.
	ProgramVersion string
	// Revision is the commit the program was built from (vcs.revision), ""
	// when the build recorded none. For a program that imports Hopper it
	// is the program's commit, not Hopper's.
	Revision string
	// Time is that commit's time (vcs.time, RFC 3339), "" when unknown.
	Time string
	// Modified is vcs.modified: the checkout had uncommitted changes.
	Modified bool
	// Go is the Go release that built it.
	Go string
}

// Commit names the program's commit in short: its first 12 hex digits,
// "+dirty" when the checkout had uncommitted changes; Unstamped when the
// build recorded none.
func (b Build) Commit() string {
	if b.Revision == "" {
		return Unstamped
	}
	c := b.Revision[:min(12, len(b.Revision))]
	if b.Modified {
		c += "+dirty"
	}
	return c
}

// Read returns the running program's build.
var Read = sync.OnceValue(func() Build {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return Build{Go: runtime.Version()}
	}
	return Of(info)
})

// Version is the version of the Hopper module the running program was built
// with: see Of.
func Version() string { return Read().Version }

// Of reads a build from Go's build information (debug.ReadBuildInfo, or
// debug/buildinfo.ReadFile of a binary). Its Version is Hopper's release
// ("v1.2.0") or pseudo-version when Hopper is a dependency (the
// replacement's version when a replace directive names one, "v0.0.0 =>
// ../hopper" when it names a folder); for a build
// of Hopper's own tree, the version Go derived from the checkout (a tag,
// or a pseudo-version naming the commit, "+dirty" with uncommitted
// changes), else "devel" with the commit and its time ("devel
// 0123456789ab+dirty 2026-12-07T10:00:00Z"), else "devel unstamped"; ""
// when the program does not link Hopper.
func Of(info *debug.BuildInfo) Build {
	b := Build{Version: versionOf(info), Program: info.Path, Go: info.GoVersion}
	if b.Go == "" {
		b.Go = runtime.Version()
	}
	if v := info.Main.Version; v != "(devel)" {
		b.ProgramVersion = v
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

func versionOf(info *debug.BuildInfo) string {
	if info.Main.Path == Module {
		if v := moduleVersion(&info.Main); v != "" {
			return v
		}
		return develVersion(info.Settings)
	}
	for _, dep := range info.Deps {
		if dep.Path == Module {
			return moduleVersion(dep)
		}
	}
	return ""
}

func moduleVersion(m *debug.Module) string {
	if r := m.Replace; r != nil {
		if r.Version != "" && r.Version != "(devel)" {
			return r.Version
		}
		// Replaced by a folder (a checkout), which has no version: the
		// required one says nothing of the code, so the folder is named
		// as go.mod spells it, as go version -m prints it.
		return m.Version + " => " + r.Path
	}
	if m.Version == "(devel)" {
		return ""
	}
	return m.Version
}

// develVersion names a build of Hopper's own tree for which Go derived no
// version, by its commit and the commit's time.
func develVersion(settings []debug.BuildSetting) string {
	b := Of(&debug.BuildInfo{Settings: settings})
	v := "devel " + b.Commit()
	if b.Time != "" {
		v += " " + b.Time
	}
	return v
}
