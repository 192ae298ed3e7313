// Package buildinfo says which Hopper a program was built with, from the
// build information Go records in every binary: the worker's start log and
// its row in hopper_workers, and `hopper version`.
package buildinfo

import (
	"runtime/debug"
	"sync"
)

// Module is Hopper's module path.
const Module = "github.com/hopperq/hopper"

// Version is the version of the Hopper module the running program was built
// with: its release ("v1.2.0") or pseudo-version when Hopper is a
// dependency (the replacement's version when a replace directive names
// one); for a build of Hopper's own tree, "devel" and the commit it was
// built from ("devel 0123456789ab", "+dirty" with uncommitted changes);
// "" when the build recorded none (go run of a single file, or a binary
// built without module support).
var Version = sync.OnceValue(func() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	return versionOf(info)
})

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
	if m.Replace != nil && m.Replace.Version != "" {
		return m.Replace.Version
	}
	if m.Version == "(devel)" {
		return ""
	}
	return m.Version
}

// develVersion names a build of Hopper's own tree by its commit.
func develVersion(settings []debug.BuildSetting) string {
	var revision string
	var dirty bool
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if revision == "" {
		return "devel"
	}
	v := "devel " + revision[:min(12, len(revision))]
	if dirty {
		v += "+dirty"
	}
	return v
}
