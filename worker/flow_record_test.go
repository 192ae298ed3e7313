package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/worker"
)

// logLines is a slog handler that keeps every record's message and
// attributes, one line each.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logLines) WithGroup(string) slog.Handler            { return l }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.Key + "=" + a.Value.String())
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, b.String())
	return nil
}

func noopTask(context.Context, *jobs.Job[Task]) error { return nil }

func (l *logLines) with(substr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var found []string
	for _, line := range l.lines {
		if strings.Contains(line, substr) {
			found = append(found, line)
		}
	}
	return found
}

// TestFlowControlMismatchIsLogged: each worker records the flow control
// it runs a queue with; one that starts with another than the record,
// made by another worker, says so in its log (the limits hold only if all
// of a queue's workers claim by the same rules). Workers start one after
// the other, each the record for the next.
func TestFlowControlMismatchIsLogged(t *testing.T) {
	b := setup(t)
	limit1 := map[string]worker.FlowControl{"default": {KeyLimit: 1}}
	for _, step := range []struct {
		name string
		flow map[string]worker.FlowControl
		warn string // the record the warning names; "" for none
	}{
		{"the first records", limit1, ""},
		{"the same: nothing to say", limit1, ""},
		{"none where the record has a limit", nil, "other_flow_control=key_limit=1"},
		{"none again", nil, ""},
		{"another limit", map[string]worker.FlowControl{"default": {KeyLimit: 2, Fair: true, Rate: worker.Rate{Limit: 50, Per: time.Second}}}, "other_flow_control=none"},
		{"every setting is compared", map[string]worker.FlowControl{"default": {KeyLimit: 2, Fair: true, Rate: worker.Rate{Limit: 50, Per: 2 * time.Second}}}, "other_flow_control=key_limit=2 rate=50/1s by queue fair"},
	} {
		logs := &logLines{}
		r := start(t, b, worker.Config{Queues: map[string]int{"default": 1}, FlowControl: step.flow, Logger: slog.New(logs)},
			func(w *worker.Worker) { require.NoError(t, worker.Handle(w, kind(t, "tenant"), noopTask)) })
		testdb.WaitFor(t, "the worker started", func() bool { return len(logs.with("hopper worker started")) > 0 })
		r.stop()
		warnings := logs.with("flow control differs")
		if step.warn == "" {
			require.Empty(t, warnings, step.name)
			continue
		}
		require.Len(t, warnings, 1, step.name)
		require.Contains(t, warnings[0], "queue=default", step.name)
		require.Contains(t, warnings[0], step.warn, step.name)
	}
}

// TestFlowNeedsItsMigrations: a worker on a schema older than its flow
// control needs refuses to start, naming the migration to run: without
// migration 7 (the record of each queue's flow control) every worker, and
// without migration 8 (the rate log's awaiting_starts) one with a global
// rate limit. The schema's migrations table is dropped, as for a role that
// may not read it: then the statements themselves tell (with it, Run
// refuses any version behind, TestRunNotMigrated).
func TestFlowNeedsItsMigrations(t *testing.T) {
	rate := map[string]worker.FlowControl{"default": {Rate: worker.Rate{Limit: 5, Per: time.Second}}}
	for _, tc := range []struct {
		name    string
		version uint
		flow    map[string]worker.FlowControl
		want    string
	}{
		{"without 7", 6, nil, "lacks hopper_queues.flow_control, which migration 7 (flow_record) adds: "},
		{"without 8, a rate limit", 7, rate, "lacks hopper_rate_claims.awaiting_starts, which rate limits need and migration 8 (rate_starts) adds: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pool := testdb.NewAtVersion(t, tc.version).Pool
			_, err := pool.Exec(ctx, "DROP TABLE "+schema.MigrationsTable)
			require.NoError(t, err)
			w, err := worker.New(pool, fast(worker.Config{FlowControl: tc.flow}))
			require.NoError(t, err)
			require.NoError(t, worker.Handle(w, kind(t, "tenant"), noopTask))
			err = w.Run(ctx)
			require.ErrorIs(t, err, jobs.ErrNotMigrated)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "this build of Hopper needs schema version")
		})
	}
}
