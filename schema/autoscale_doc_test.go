package schema_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
	"github.com/hopperq/hopper/internal/tools/doccheck"
)

// autoscaleQuery is the query of the KEDA PostgreSQL trigger in
// docs/kubernetes.md, for the schema schemaIdent (a quoted identifier).
func autoscaleQuery(t *testing.T, schemaIdent string) string {
	t.Helper()
	md, err := os.ReadFile(filepath.Join("..", "docs", "kubernetes.md"))
	require.NoError(t, err)
	for _, b := range doccheck.ParseMarkdown("docs/kubernetes.md", string(md)).Blocks {
		if b.Lang != "yaml" {
			continue
		}
		var obj struct {
			Kind string `yaml:"kind"`
			Spec struct {
				Triggers []struct {
					Type     string            `yaml:"type"`
					Metadata map[string]string `yaml:"metadata"`
				} `yaml:"triggers"`
			} `yaml:"spec"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(b.Text), &obj))
		if obj.Kind != "ScaledObject" {
			continue
		}
		for _, tr := range obj.Spec.Triggers {
			if tr.Type == "postgresql" {
				return regexp.MustCompile(`\bapp_jobs\b`).ReplaceAllLiteralString(tr.Metadata["query"], schemaIdent)
			}
		}
	}
	require.FailNow(t, "no ScaledObject with a postgresql trigger in docs/kubernetes.md")
	return ""
}

// TestAutoscaleQueryOfTheDocs: the query docs/kubernetes.md gives KEDA,
// run as a role with exactly the grants it documents, counts the ready
// and running jobs of its queue as GetQueueDepth does (not the scheduled,
// finished or other queues' jobs), stops counting ready jobs at 10,000,
// and says 0 for a paused queue.
func TestAutoscaleQueryOfTheDocs(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := testdb.New(t)
	keda := newRole(ctx, t, d, "keda")
	keda.grant(ctx, t, d, documentedGrants(t, d, "kubernetes.md", keda)...)
	query := autoscaleQuery(t, pgx.Identifier{d.Schema}.Sanitize())
	conn := keda.conn(ctx, t, d)
	work := func() int64 {
		t.Helper()
		var n int64
		require.NoError(t, conn.QueryRow(ctx, query).Scan(&n))
		return n
	}
	client := hopper.NewClient(d.Pool)
	depth := func() int64 {
		t.Helper()
		q, err := client.GetQueueDepth(ctx, "default", 0)
		require.NoError(t, err)
		return q.Ready + q.Running
	}
	require.Zero(t, work(), "an empty queue")

	later, hourAgo := time.Now().Add(time.Hour), time.Now().Add(-time.Hour)
	for _, js := range []struct {
		queue, state string
		n            int
		runAt        *time.Time
	}{
		{"default", testfactory.Pending, 7, &hourAgo}, {"default", testfactory.Running, 3, nil},
		{"default", testfactory.Scheduled, 4, &later}, {"default", testfactory.Pending, 2, &later},
		{"default", testfactory.Dead, 2, nil}, {"default", testfactory.Completed, 2, nil},
		{"other", testfactory.Pending, 5, nil}, {"other", testfactory.Running, 5, nil},
	} {
		for range js.n {
			testfactory.Job(ctx, t, d.Pool, &testfactory.JobOpts{Queue: js.queue, State: js.state, RunAt: js.runAt})
		}
	}
	require.Equal(t, int64(7+3), work(), "ready and running jobs of the queue only")
	require.Equal(t, depth(), work(), "what GetQueueDepth counts")

	_, err := d.Pool.Exec(ctx, `INSERT INTO hopper_jobs (queue, kind, payload)
		SELECT 'default', 'filler', '{}' FROM generate_series(1, 10005)`)
	require.NoError(t, err)
	require.Equal(t, int64(10_000+3), work(), "the ready count stops at 10,000")

	_, err = client.PauseQueue(ctx, "default")
	require.NoError(t, err)
	require.Zero(t, work(), "a paused queue needs no worker")
	_, err = client.ResumeQueue(ctx, "default")
	require.NoError(t, err)
	require.Equal(t, int64(10_000+3), work())
}
