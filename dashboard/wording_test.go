package dashboard_test

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/dashboard"
)

// TestStateWording: a queue or schedule that is not paused is "active",
// never "running" (which would say that something runs it); the overview
// says how many live workers serve each queue, "no worker" for none, and
// the schedules page says when no worker defines a schedule (stale).
func TestStateWording(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	// Two schedules no worker has reported (stale), one of them paused,
	// and one a live worker reported just now.
	_, err := b.pool.Exec(b.ctx, `INSERT INTO hopper_schedules (name, kind, expression, time_zone, policy, queue, definition_hash, next_fire_at, paused_at)
		VALUES ('orphan', 'mail', '@hourly', 'UTC', 'once', 'email', 'h', now() + interval '1 hour', NULL),
		       ('orphan_paused', 'mail', '@hourly', 'UTC', 'once', 'email', 'h', now() + interval '1 hour', now()),
		       ('defined', 'mail', '@hourly', 'UTC', 'once', 'email', 'h', now() + interval '1 hour', NULL);
		INSERT INTO hopper_schedule_versions (name, hash, stale_after_ms) VALUES ('defined', 'h', 60000)`)
	require.NoError(t, err)
	cell := func(body, row string) string {
		t.Helper()
		m := regexp.MustCompile(`(?s)` + row + `.*?</tr>`).FindString(body)
		require.NotEmpty(t, m, "a row %s in %s", row, body)
		return m
	}

	_, body := b.get("/")
	require.NotContains(t, body, "running<", "a queue is active or paused")
	row := cell(body, `data-queue="email"`)
	require.Contains(t, row, "<td>active</td>")
	require.Contains(t, row, `<span class="paused">no worker</span>`)

	_, err = b.pool.Exec(b.ctx, `INSERT INTO hopper_workers (id, host, pid, queues, stale_after_ms) VALUES ('w1', 'h', 1, '{email}', 60000), ('w2', 'h', 2, '{email}', 60000)`)
	require.NoError(t, err)
	_, err = b.client.PauseQueue(b.ctx, "email")
	require.NoError(t, err)
	_, body = b.get("/")
	row = cell(body, `data-queue="email"`)
	require.Contains(t, row, `<span class="paused">paused</span>`)
	require.Contains(t, row, "<td>2</td>", "two live workers serve it")
	require.NotContains(t, row, "no worker")

	_, body = b.get("/schedules")
	require.NotContains(t, body, "running<")
	require.Contains(t, cell(body, "<td>orphan</td>"), "<td>stale (no worker defines it)</td>")
	require.Contains(t, cell(body, "<td>orphan_paused</td>"), "<td>paused, stale (no worker defines it)</td>")
	require.Contains(t, cell(body, "<td>defined</td>"), "<td>active</td>")
}
