package tests

import (
	debugbuildinfo "debug/buildinfo"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/buildinfo"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/tools/doccheck"
)

// kubernetesGuide is the guide whose Dockerfile TestDockerfileRecipe runs.
const kubernetesGuide = "../docs/kubernetes.md"

// TestDockerfileRecipe: the Kubernetes guide's Dockerfile builds the
// application and the hopper command from one module, at one Hopper
// version. There is no Docker engine here, so its build stage's RUN lines
// (go mod download, the go build, the test that refuses an image whose
// two programs disagree) run in a fresh module of the guide's layout
// (cmd/shop, Hopper required with the guide's tool line), /out a folder
// of its own; the final stage copies what that build wrote.
func TestDockerfileRecipe(t *testing.T) {
	testdb.Slow(t, "a blank module built from the module proxy")
	t.Parallel()
	guide, err := os.ReadFile(kubernetesGuide)
	require.NoError(t, err)
	var dockerfile string
	for _, b := range doccheck.ParseMarkdown(kubernetesGuide, string(guide)).Blocks {
		if b.Lang == "dockerfile" {
			require.Empty(t, dockerfile, "one Dockerfile in %s", kubernetesGuide)
			dockerfile = b.Text
		}
	}
	require.NotEmpty(t, dockerfile, "%s has a dockerfile block", kubernetesGuide)
	stages := regexp.MustCompile(`(?m)^FROM `).Split(dockerfile, -1)
	require.Len(t, stages, 3, "two stages: the build and the image")
	require.True(t, strings.HasPrefix(stages[1], "golang:"), stages[1])

	m := newGoModule(t, "example.com/shop")
	m.sh(blankModuleSteps[0]) // the embedding guide's require, replace and tool line
	m.write("cmd/shop/main.go", `package main

import (
	"fmt"

	"github.com/hopperq/hopper/worker"
)

var _ = worker.New

func main() { fmt.Println("shop") }
`)
	m.sh("go mod tidy")
	out := filepath.Join(m.dir, "out") + "/"
	// The build stage's RUN lines, continuation lines joined.
	runs := regexp.MustCompile(`(?m)^RUN ((?:.*\\\n)*.*)$`).FindAllStringSubmatch(stages[1], -1)
	require.Len(t, runs, 3, "go mod download, the build, the check")
	for _, run := range runs {
		m.sh(strings.ReplaceAll(strings.ReplaceAll(run[1], "\\\n", ""), "/out/", out))
	}

	copied := regexp.MustCompile(`(?m)^COPY --from=build ((?:/out/\S+ )+)\S+$`).FindStringSubmatch(stages[2])
	require.NotNil(t, copied, "the image copies the build's programs:\n%s", stages[2])
	builds := map[string]buildinfo.Build{}
	for _, p := range strings.Fields(copied[1]) {
		info, err := debugbuildinfo.ReadFile(strings.Replace(p, "/out/", out, 1))
		require.NoError(t, err, "%s was built", p)
		builds[filepath.Base(p)] = buildinfo.Of(info)
	}
	require.Len(t, builds, 2)
	require.Equal(t, "example.com/shop/cmd/shop", builds["shop"].Program)
	require.Equal(t, buildinfo.Module+"/cmd/hopper", builds["hopper"].Program)
	require.NotEmpty(t, builds["shop"].Version)
	require.Equal(t, builds["shop"].Version, builds["hopper"].Version, "one Hopper version for both")

	// The check refuses a hopper command of another version: here, one
	// that is not Hopper at all.
	m.sh("cp \"$(go env GOROOT)/bin/gofmt\" " + out + "hopper")
	check := strings.ReplaceAll(strings.ReplaceAll(runs[2][1], "\\\n", ""), "/out/", out)
	require.Contains(t, check, "test ")
	require.Error(t, m.try(check))
	// And one built apart, at another version.
	other := newGoModule(t, "example.com/other")
	other.sh("go mod edit -require=github.com/hopperq/hopper@v0.0.1 -replace=github.com/hopperq/hopper=$HOPPER -tool=github.com/hopperq/hopper/cmd/hopper")
	other.sh("go mod tidy && CGO_ENABLED=0 go build -o " + out + " github.com/hopperq/hopper/cmd/hopper")
	require.Error(t, m.try(check))
}
