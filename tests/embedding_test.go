package tests

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// goModule is a fresh Go module in a temporary folder, driven with the go
// command as a user would: no workspace, the local toolchain, this
// machine's module proxy and caches.
type goModule struct {
	t   *testing.T
	ctx context.Context
	dir string
	env []string
}

func newGoModule(t *testing.T, name string) *goModule {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	m := &goModule{t: t, ctx: ctx, dir: t.TempDir(), env: append(os.Environ(),
		"GOWORK=off", "GOFLAGS=", "GOTOOLCHAIN=local", "HOPPER="+root)}
	m.sh("go mod init " + name)
	return m
}

// sh runs one shell line in the module's folder and returns its output.
func (m *goModule) sh(line string, env ...string) string {
	m.t.Helper()
	cmd := exec.CommandContext(m.ctx, "sh", "-c", line)
	cmd.Dir = m.dir
	cmd.Env = append(m.env, env...)
	out, err := cmd.CombinedOutput()
	require.NoError(m.t, err, "%s\n%s", line, out)
	return string(out)
}

// try runs one shell line in the module's folder and returns its failure.
func (m *goModule) try(line string) error {
	cmd := exec.CommandContext(m.ctx, "sh", "-c", line)
	cmd.Dir = m.dir
	cmd.Env = m.env
	return cmd.Run()
}

func (m *goModule) write(name, text string) {
	m.t.Helper()
	path := filepath.Join(m.dir, name)
	require.NoError(m.t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(m.t, os.WriteFile(path, []byte(text), 0o644))
}

// goModFile is what go mod edit -json prints of a go.mod.
type goModFile struct {
	Go        string
	Toolchain string
	Require   []struct{ Path, Version string }
}

func (m *goModule) goMod() goModFile {
	m.t.Helper()
	var f goModFile
	require.NoError(m.t, json.Unmarshal([]byte(m.sh("go mod edit -json")), &f))
	return f
}

func (f goModFile) requirement(path string) string {
	for _, r := range f.Require {
		if r.Path == path {
			return r.Version
		}
	}
	return ""
}

// blankModuleSteps are the commands docs/embedding.md gives for adding
// Hopper to a blank module, run here literally, in order.
var blankModuleSteps = []string{
	`go mod edit -require=github.com/hopperq/hopper@v0.0.0 -replace=github.com/hopperq/hopper=$HOPPER -tool=github.com/hopperq/hopper/cmd/hopper`,
	`go mod tidy`,
	`go tool hopper sql export third_party/hopper`,
	`mkdir -p tools && (cd tools && go mod init example.com/shop/tools)`,
	`go get -tool -modfile=tools/go.mod github.com/sqlc-dev/sqlc/cmd/sqlc@v1.31.1`,
	`printf 'version: "2"\nsql:\n' > sqlc.yaml`,
	`go tool hopper sql entry third_party/hopper >> sqlc.yaml`,
	`CGO_ENABLED=0 go tool -modfile=tools/go.mod sqlc generate`,
}

// blankModuleMain is the guide's run-time part: migrate Hopper's tables
// at start, enqueue with the generated statement (a zero value with only
// a kind is a valid job) and with a typed kind, in the application's own
// transactions.
const blankModuleMain = `package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/internal/hopperdb"
	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
)

type Welcome struct {
	UserID int64 ` + "`json:\"user_id\"`" + `
}

var welcome = jobs.MustDefine[Welcome]("welcome")

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	if err := schema.Up(ctx, pool); err != nil { // Hopper's tables, at start
		panic(err)
	}
	for _, commit := range []bool{true, false} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			panic(err)
		}
		if _, err := hopperdb.New(tx).Enqueue(ctx, hopperdb.EnqueueParams{Kind: "welcome"}); err != nil {
			panic(err)
		}
		if _, err := welcome.Enqueue(ctx, tx, Welcome{UserID: 7}); err != nil {
			panic(err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			panic(err)
		}
	}
	stats, err := hopper.NewClient(pool).GetStats(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("ready=%d\n", stats.Total.Ready)
}
`

// embeddingGuide is the guide whose commands TestEmbedFromBlankModule runs.
const embeddingGuide = "../docs/embedding.md"

// TestEmbedFromBlankModule follows the embedding guide's steps in a fresh
// module, then builds and runs an application that migrates, and enqueues
// in a committed and a rolled-back transaction.
func TestEmbedFromBlankModule(t *testing.T) {
	testdb.Slow(t, "a blank module built with sqlc, from the module proxy")
	t.Parallel()
	guide, err := os.ReadFile(embeddingGuide)
	require.NoError(t, err)
	rest := string(guide)
	for _, step := range blankModuleSteps {
		require.True(t, strings.Contains(string(guide), step), "%s shows every step this test runs; it lacks:\n%s", embeddingGuide, step)
		at := strings.Index(rest, step)
		require.GreaterOrEqual(t, at, 0, "%s shows the steps in the order this test runs them; this one comes too early:\n%s", embeddingGuide, step)
		rest = rest[at+len(step):]
	}
	empty := testdb.NewEmpty(t)

	m := newGoModule(t, "example.com/shop")
	for _, step := range blankModuleSteps {
		m.sh(step)
	}
	m.write("main.go", blankModuleMain)
	m.sh("go mod tidy")
	m.sh("go vet ./...")
	out := m.sh("go run .", "DATABASE_URL="+empty.URL)
	require.Equal(t, "ready=2\n", out, "both jobs of the committed transaction, none of the rolled-back one")
	require.Contains(t, m.sh("go tool hopper sql check third_party/hopper"), "matches")
}

// floorGo and floorPgx are the oldest Go and pgx Hopper needs: a module
// already on them adds Hopper without either moving. pgx before v5.12.0
// could hand a pool's caller a connection whose next statement failed
// with a stale "i/o timeout" after a statement on it was cancelled as it
// finished (issue 61: a worker's stop does that).
const (
	floorGo  = "1.25.0"
	floorPgx = "v5.12.0"
)

// TestAddToOlderModule adds Hopper to a module that is on the oldest Go
// and pgx Hopper supports, and checks that neither requirement moved.
func TestAddToOlderModule(t *testing.T) {
	testdb.Slow(t, "a blank module built with sqlc, from the module proxy")
	t.Parallel()
	m := newGoModule(t, "example.com/legacy")
	m.sh("go mod edit -go=" + floorGo + " -require=github.com/jackc/pgx/v5@" + floorPgx)
	m.write("legacy.go", `package legacy

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

func Connect(ctx context.Context, url string) (*pgxpool.Pool, error) { return pgxpool.New(ctx, url) }
`)
	m.sh("go mod tidy")
	before := m.goMod()
	require.Equal(t, floorGo, before.Go)
	require.Equal(t, floorPgx, before.requirement("github.com/jackc/pgx/v5"))

	m.sh("go mod edit -require=github.com/hopperq/hopper@v0.0.0 -replace=github.com/hopperq/hopper=$HOPPER")
	m.write("jobs.go", `package legacy

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/worker"
)

type Ping struct{}

var ping = jobs.MustDefine[Ping]("ping")

func Start(ctx context.Context, pool *pgxpool.Pool) (*worker.Worker, *hopper.Client, error) {
	if err := schema.Up(ctx, pool); err != nil {
		return nil, nil, err
	}
	w, err := worker.New(pool, worker.Config{})
	if err != nil {
		return nil, nil, err
	}
	err = worker.Handle(w, ping, func(context.Context, *jobs.Job[Ping]) error { return nil })
	return w, hopper.NewClient(pool), err
}
`)
	m.sh("go mod tidy")
	m.sh("go vet ./...")
	after := m.goMod()
	require.Equal(t, floorGo, after.Go, "adding Hopper keeps the module's go directive")
	require.Empty(t, after.Toolchain, "and adds no toolchain line")
	require.Equal(t, floorPgx, after.requirement("github.com/jackc/pgx/v5"), "and its pgx")
	for _, r := range after.Require {
		require.NotContains(t, r.Path, "dockertest", "test-bed modules stay out of a user's requirements")
		require.NotContains(t, r.Path, "testify")
	}
}
