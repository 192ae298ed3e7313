package dashboard_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/dashboard"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
	"github.com/hopperq/hopper/jobs"
)

// TestDurableJobPage: a durable job's page shows its wait, its progress
// and its records (escaped, long results cut), and offers Wake instead of
// Run now; a job in no wait, and a read-only dashboard, offer no Wake.
func TestDurableJobPage(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	_, _ = b.get("/?token=" + token)
	until := time.Now().Add(time.Hour)
	id := testfactory.Job(b.ctx, t, b.pool, &testfactory.JobOpts{State: testfactory.Scheduled, RunAt: &until}).ID
	testfactory.Step(b.ctx, t, b.pool, id, &testfactory.StepOpts{Name: `<script>alert("step")</script>`,
		Result: json.RawMessage(`{"id": "` + strings.Repeat("x", 300) + `"}`)})
	testfactory.Step(b.ctx, t, b.pool, id, &testfactory.StepOpts{Position: 1, Name: "shipped-<7>", Kind: "event", State: "waiting", Until: &until})
	testfactory.Progress(b.ctx, t, b.pool, id, json.RawMessage(`{"done": 3, "of": 10}`))

	status, body := b.get(fmt.Sprintf("/jobs/%d", id))
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `<dd id="wait">awaiting event <code>shipped-&lt;7&gt;</code> until `)
	require.Contains(t, body, `<dd id="progress"><code>{&#34;of&#34;: 10, &#34;done&#34;: 3}</code>`)
	require.Contains(t, body, `<h2>Durable records</h2>`)
	require.Contains(t, body, `<td>&lt;script&gt;alert(&#34;step&#34;)&lt;/script&gt;</td><td>done</td><td>—</td>`)
	require.NotContains(t, body, `<script>alert`)
	require.Contains(t, body, strings.Repeat("x", 150)+"…", "a long result, cut")
	require.NotContains(t, body, strings.Repeat("x", 250))
	require.Contains(t, body, `<td>1</td><td>event</td><td>shipped-&lt;7&gt;</td><td>waiting</td>`)
	require.Equal(t, fmt.Sprintf("jobs/%d/wake", id), formAction(t, body, "<h2>End its wait</h2>"))
	require.Contains(t, body, "its handler's AwaitEvent returns worker.ErrEventTimeout")
	require.NotContains(t, body, `id="run-now"`, "running it would only wait again")
	require.Contains(t, body, `<h2>Change this job</h2>`, "it can still be edited, cancelled or deleted")

	// Its wait over: the records stay, the offer to wake goes.
	past := time.Now().Add(-time.Minute)
	over := testfactory.Job(b.ctx, t, b.pool, &testfactory.JobOpts{State: testfactory.Scheduled, RunAt: &until}).ID
	testfactory.Step(b.ctx, t, b.pool, over, &testfactory.StepOpts{Name: "nap", Kind: "sleep", State: "waiting", Until: &past})
	_, body = b.get(fmt.Sprintf("/jobs/%d", over))
	require.Contains(t, body, `<td>0</td><td>sleep</td><td>nap</td><td>over</td>`)
	require.NotContains(t, body, `id="wait"`)
	require.NotContains(t, body, "/wake")
	require.Contains(t, body, `id="run-now"`)

	_, body = b.get(fmt.Sprintf("/jobs/%d", b.live))
	require.NotContains(t, body, "Durable")
	require.NotContains(t, body, "/wake")
	require.NotContains(t, body, `id="progress"`)

	ro := b.serve(dashboard.Config{ReadOnly: true}, false)
	status, page := getFrom(t, fmt.Sprintf("%s/jobs/%d", ro.URL, id))
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `id="wait"`, "a read-only page shows the wait")
	require.NotContains(t, page, "End its wait")
}

// TestWakeJob: Wake is a change like the others (token, CSRF, own
// origin, not read-only); it ends a sleep or an event wait, the job
// pending at once; a job in no wait, an ended job and an unknown one are
// refused with the reason, and nothing changes.
func TestWakeJob(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	until := time.Now().Add(time.Hour)
	sleeper := testfactory.Job(b.ctx, t, b.pool, &testfactory.JobOpts{State: testfactory.Scheduled, RunAt: &until}).ID
	testfactory.Step(b.ctx, t, b.pool, sleeper, &testfactory.StepOpts{Name: "nap", Kind: "sleep", State: "waiting", Until: &until})
	awaiter := testfactory.Job(b.ctx, t, b.pool, &testfactory.JobOpts{State: testfactory.Scheduled, RunAt: &until}).ID
	testfactory.Step(b.ctx, t, b.pool, awaiter, &testfactory.StepOpts{Name: "shipped", Kind: "event", State: "waiting", Until: &until})
	wake := func(id int64) string { return fmt.Sprintf("/jobs/%d/wake", id) }

	csrf := b.csrf()
	status, _, body := b.post(wake(sleeper), url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusUnauthorized, status, "no token yet: %s", body)
	_, _ = b.get("/?token=" + token)
	status, _, body = b.post(wake(sleeper), url.Values{})
	require.Equal(t, http.StatusForbidden, status, "no CSRF token")
	require.Contains(t, body, "CSRF")
	status, _, _ = b.post(wake(sleeper), url.Values{"csrf": {csrf}}, "Sec-Fetch-Site", "cross-site")
	require.Equal(t, http.StatusForbidden, status, "from another site")
	ro := b.serve(dashboard.Config{ReadOnly: true}, false)
	res, err := http.PostForm(ro.URL+wake(sleeper), url.Values{"csrf": {csrf}})
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusForbidden, res.StatusCode, "read-only")
	require.Equal(t, jobs.StateScheduled, b.state(sleeper), "nothing woken yet")

	status, location, body := b.post(wake(sleeper), url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Equal(t, fmt.Sprintf("../../jobs/%d", sleeper), location)
	require.Equal(t, fmt.Sprintf("Job %d woken: its sleep is over; it runs at once.", sleeper), b.flash(fmt.Sprintf("/jobs/%d", sleeper)))
	require.Equal(t, jobs.StatePending, b.state(sleeper))
	status, _, body = b.post(wake(awaiter), url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Equal(t, fmt.Sprintf("Job %d woken: its wait for an event timed out; it runs at once.", awaiter), b.flash(fmt.Sprintf("/jobs/%d", awaiter)))
	require.Equal(t, jobs.StatePending, b.state(awaiter))

	for _, tc := range []struct {
		name   string
		path   string
		status int
		says   string
	}{
		{"woken already", wake(sleeper), http.StatusConflict, "job not waiting (pending)"},
		{"in no wait", wake(b.live), http.StatusConflict, "job not waiting (pending)"},
		{"cancelled", wake(b.dead), http.StatusConflict, "job already finished: it is cancelled"},
		{"unknown", "/jobs/424242/wake", http.StatusNotFound, "job not found"},
		{"not an id", "/jobs/x/wake", http.StatusBadRequest, "is not a job id"},
	} {
		status, _, body := b.post(tc.path, url.Values{"csrf": {csrf}})
		require.Equal(t, tc.status, status, "%s: %s", tc.name, body)
		require.Contains(t, body, tc.says, tc.name)
	}
	require.Equal(t, jobs.StatePending, b.state(b.live), "a refused wake changes nothing")
}
