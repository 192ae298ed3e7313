package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVersionOf: each way a binary can hold Hopper names its version.
func TestVersionOf(t *testing.T) {
	rev := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "false"}}
	timed := append(rev[:1:1], debug.BuildSetting{Key: "vcs.time", Value: "2026-12-07T10:00:00Z"}, debug.BuildSetting{Key: "vcs.modified", Value: "true"})
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
			Deps: []*debug.Module{{Path: Module, Version: "v0.0.0-00010101000000-000000000000", Replace: &debug.Module{Path: "../hopper", Version: "(devel)"}}}}, "v0.0.0-00010101000000-000000000000 => ../hopper"},
		{"not a dependency", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"}}, ""},
		{"Hopper's own tree, released", debug.BuildInfo{Main: debug.Module{Path: Module, Version: "v1.3.0"}}, "v1.3.0"},
		{"Hopper's own tree at a commit", debug.BuildInfo{Main: debug.Module{Path: Module, Version: "(devel)"}, Settings: rev}, "devel 0123456789ab"},
		{"Hopper's own tree, changed", debug.BuildInfo{Main: debug.Module{Path: Module, Version: "(devel)"},
			Settings: append(rev[:1:1], debug.BuildSetting{Key: "vcs.modified", Value: "true"})}, "devel 0123456789ab+dirty"},
		{"Hopper's own tree, changed, with the commit's time", debug.BuildInfo{Main: debug.Module{Path: Module, Version: "(devel)"}, Settings: timed},
			"devel 0123456789ab+dirty 2026-12-07T10:00:00Z"},
		{"Hopper's own tree, a version Go derived from the checkout", debug.BuildInfo{Main: debug.Module{Path: Module,
			Version: "v0.0.0-20261207100000-0123456789ab+dirty"}, Settings: timed}, "v0.0.0-20261207100000-0123456789ab+dirty"},
		{"Hopper's own tree, no VCS (go run, go test)", debug.BuildInfo{Main: debug.Module{Path: Module, Version: "(devel)"}}, "devel unstamped"},
	} {
		require.Equal(t, tc.want, versionOf(&tc.info), tc.name)
		require.Equal(t, tc.want, Of(&tc.info).Version, tc.name)
	}
}

// TestOf: the program's own build, as a rollout tells two builds apart,
// whether or not Hopper is the main module.
func TestOf(t *testing.T) {
	for _, tc := range []struct {
		name       string
		info       debug.BuildInfo
		want       Build
		wantCommit string
	}{
		{"an application at a commit, changed", debug.BuildInfo{GoVersion: "go1.26.0", Path: "example.com/shop/cmd/worker",
			Main: debug.Module{Path: "example.com/shop", Version: "v0.0.0-20261207100000-0123456789ab+dirty"},
			Deps: []*debug.Module{{Path: Module, Version: "v1.2.0"}},
			Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123"},
				{Key: "vcs.time", Value: "2026-12-07T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			Build{Version: "v1.2.0", Program: "example.com/shop/cmd/worker", ProgramVersion: "v0.0.0-20261207100000-0123456789ab+dirty",
				Revision: "0123456789abcdef0123", Time: "2026-12-07T10:00:00Z", Modified: true, Go: "go1.26.0"},
			"0123456789ab+dirty"},
		{"hopper installed at a release (go install ...@v1.2.0 records no commit)", debug.BuildInfo{GoVersion: "go1.26.0",
			Path: Module + "/cmd/hopper", Main: debug.Module{Path: Module, Version: "v1.2.0"}},
			Build{Version: "v1.2.0", Program: Module + "/cmd/hopper", ProgramVersion: "v1.2.0", Go: "go1.26.0"}, Unstamped},
		{"go run of Hopper's own tree", debug.BuildInfo{GoVersion: "go1.26.0", Path: Module + "/cmd/hopper",
			Main: debug.Module{Path: Module, Version: "(devel)"}},
			Build{Version: "devel unstamped", Program: Module + "/cmd/hopper", Go: "go1.26.0"}, Unstamped},
	} {
		got := Of(&tc.info)
		require.Equal(t, tc.want, got, tc.name)
		require.Equal(t, tc.wantCommit, got.Commit(), tc.name)
	}
}

// TestRead: a test binary records no commit (unless go test was given
// -buildvcs=true), and says so rather than passing for a build of some
// commit.
func TestRead(t *testing.T) {
	b := Read()
	info, ok := debug.ReadBuildInfo()
	require.True(t, ok)
	require.Equal(t, Of(info), b)
	if b.Revision != "" {
		t.Skip("this test binary recorded a commit (-buildvcs=true)")
	}
	require.Equal(t, "devel "+Unstamped, b.Version)
	require.Equal(t, Unstamped, b.Commit())
	require.Equal(t, runtime.Version(), b.Go)
	require.Equal(t, b.Version, Version())
}
