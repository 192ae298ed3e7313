package buildinfo

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVersionOf: each way a binary can hold Hopper names its version.
func TestVersionOf(t *testing.T) {
	rev := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "false"}}
	for _, tc := range []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"a dependency at a release", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{{Path: Module, Version: "v1.2.0"}}}, "v1.2.0"},
		{"a dependency replaced by a version", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{{Path: Module, Version: "v1.2.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.2.1"}}}}, "v1.2.1"},
		{"a dependency replaced by a folder", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{{Path: Module, Version: "v0.0.0-00010101000000-000000000000", Replace: &debug.Module{Path: "../hopper"}}}}, "v0.0.0-00010101000000-000000000000"},
		{"not a dependency", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"}}, ""},
		{"Hopper's own tree, released", debug.BuildInfo{Main: debug.Module{Path: Module, Version: "v1.3.0"}}, "v1.3.0"},
		{"Hopper's own tree at a commit", debug.BuildInfo{Main: debug.Module{Path: Module, Version: "(devel)"}, Settings: rev}, "devel 0123456789ab"},
		{"Hopper's own tree, changed", debug.BuildInfo{Main: debug.Module{Path: Module, Version: "(devel)"},
			Settings: append(rev[:1:1], debug.BuildSetting{Key: "vcs.modified", Value: "true"})}, "devel 0123456789ab+dirty"},
		{"Hopper's own tree, no VCS", debug.BuildInfo{Main: debug.Module{Path: Module, Version: "(devel)"}}, "devel"},
	} {
		require.Equal(t, tc.want, versionOf(&tc.info), tc.name)
	}
}
