package dashboard_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/dashboard"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
	"github.com/hopperq/hopper/jobs"
)

// TestEditJobPage: the page of a pending or scheduled job offers run now,
// an edit form and delete; a running or finished job's page, and a
// read-only dashboard's, offers none of them.
func TestEditJobPage(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	_, _ = b.get("/?token=" + token)
	future := time.Now().Add(time.Hour)
	for _, id := range []int64{b.live, testfactory.Job(b.ctx, t, b.pool, &testfactory.JobOpts{State: testfactory.Scheduled, RunAt: &future}).ID} {
		status, body := b.get(fmt.Sprintf("/jobs/%d", id))
		require.Equal(t, http.StatusOK, status, body)
		require.Equal(t, fmt.Sprintf("jobs/%d/run-now", id), formAction(t, body, "<h2>Change this job</h2>"))
		require.Equal(t, fmt.Sprintf("jobs/%d/edit", id), formAction(t, body, `id="run-now"`))
		require.Equal(t, fmt.Sprintf("jobs/%d/edit", id), formAction(t, body, `<button>Save changes</button>`), "the payload's own form")
		require.Contains(t, body, `<textarea name="payload" rows="8" cols="80">{`, "the payload as it is, to edit")
		require.Equal(t, fmt.Sprintf("jobs/%d/delete", id), formAction(t, body, `<button>Replace the payload</button>`))
		require.Contains(t, body, `<button id="delete" class="danger">Delete this job for good</button>`)
		require.NotContains(t, body, `<script>alert`, "the payload in the form is escaped")
	}
	for _, id := range []int64{b.dead, testfactory.Job(b.ctx, t, b.pool, &testfactory.JobOpts{State: testfactory.Running}).ID} {
		_, body := b.get(fmt.Sprintf("/jobs/%d", id))
		require.NotContains(t, body, "Change this job")
		require.NotContains(t, body, "/edit")
		require.NotContains(t, body, "/delete")
	}
	ro := b.serve(dashboard.Config{ReadOnly: true}, false)
	status, page := getFrom(t, fmt.Sprintf("%s/jobs/%d", ro.URL, b.live))
	require.Equal(t, http.StatusOK, status)
	require.NotContains(t, page, "Change this job")
	require.NotContains(t, page, "<form method=\"post\"")
}

// TestEditJob: editing, running now and deleting are changes like the
// others (the token, the form's CSRF token, the dashboard's own origin,
// not read-only); each changes what its form says, and a job that cannot
// be changed, or a change that cannot be made, is refused with the reason
// and changes nothing.
func TestEditJob(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	csrf := b.csrf()
	edit := fmt.Sprintf("/jobs/%d/edit", b.live)
	form := url.Values{"csrf": {csrf}, "priority": {"3"}}

	status, _, body := b.post(edit, form)
	require.Equal(t, http.StatusUnauthorized, status, "no token yet: %s", body)
	_, _ = b.get("/?token=" + token)
	status, _, body = b.post(edit, url.Values{"priority": {"3"}})
	require.Equal(t, http.StatusForbidden, status, "no CSRF token")
	require.Contains(t, body, "CSRF")
	status, _, _ = b.post(edit, form, "Sec-Fetch-Site", "cross-site")
	require.Equal(t, http.StatusForbidden, status, "from another site")
	for _, path := range []string{edit, fmt.Sprintf("/jobs/%d/run-now", b.live), fmt.Sprintf("/jobs/%d/delete", b.live)} {
		ro := b.serve(dashboard.Config{ReadOnly: true}, false)
		res, err := http.PostForm(ro.URL+path, form)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusForbidden, res.StatusCode, "read-only: %s", path)
	}
	row, err := b.client.GetJob(b.ctx, b.live)
	require.NoError(t, err)
	require.Equal(t, 0, row.Priority, "nothing changed yet")

	status, location, body := b.post(edit, url.Values{"csrf": {csrf}, "priority": {"3"}, "queue": {"bulk"}, "max_attempts": {"7"},
		"run_at": {time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)}, "payload": {`{"to": "grace"}`}})
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Equal(t, "../../jobs/"+strconv.FormatInt(b.live, 10), location)
	require.Equal(t, fmt.Sprintf("Job %d updated: priority, max attempts, queue, run time, payload.", b.live), b.flash(fmt.Sprintf("/jobs/%d", b.live)))
	row, err = b.client.GetJob(b.ctx, b.live)
	require.NoError(t, err)
	require.Equal(t, 3, row.Priority)
	require.Equal(t, "bulk", row.Queue)
	require.Equal(t, 7, row.MaxAttempts)
	require.Equal(t, jobs.StateScheduled, row.State)
	require.JSONEq(t, `{"to":"grace"}`, string(row.Payload))

	status, _, body = b.post(fmt.Sprintf("/jobs/%d/run-now", b.live), url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Equal(t, fmt.Sprintf("Job %d is ready to run now.", b.live), b.flash(fmt.Sprintf("/jobs/%d", b.live)))
	require.Equal(t, jobs.StatePending, b.state(b.live))

	running := testfactory.Job(b.ctx, t, b.pool, &testfactory.JobOpts{State: testfactory.Running}).ID
	for _, tc := range []struct {
		name   string
		path   string
		form   url.Values
		status int
		says   string
	}{
		{"running", fmt.Sprintf("/jobs/%d/edit", running), url.Values{"priority": {"1"}}, http.StatusConflict, "job is running"},
		{"running, run now", fmt.Sprintf("/jobs/%d/run-now", running), nil, http.StatusConflict, "job is running"},
		{"running, delete", fmt.Sprintf("/jobs/%d/delete", running), nil, http.StatusConflict, "job is running"},
		{"cancelled", fmt.Sprintf("/jobs/%d/edit", b.dead), url.Values{"priority": {"1"}}, http.StatusConflict, "job already finished: it is cancelled"},
		{"cancelled, delete", fmt.Sprintf("/jobs/%d/delete", b.dead), nil, http.StatusConflict, "job already finished: it is cancelled"},
		{"unknown", "/jobs/424242/edit", url.Values{"priority": {"1"}}, http.StatusNotFound, "job not found"},
		{"not an id", "/jobs/x/delete", nil, http.StatusBadRequest, "is not a job id"},
		{"bad priority", edit, url.Values{"priority": {"12"}}, http.StatusBadRequest, "invalid priority: 12 is outside 0"},
		{"priority not a number", edit, url.Values{"priority": {"high"}}, http.StatusBadRequest, "priority &#34;high&#34; is not a whole number"},
		{"bad queue", edit, url.Values{"queue": {string(make([]byte, 200))}}, http.StatusBadRequest, "invalid queue name"},
		{"bad payload", edit, url.Values{"payload": {`{"to":`}}, http.StatusBadRequest, "not valid JSON"},
		{"payload of another type", edit, url.Values{"payload": {`["a"]`}}, http.StatusBadRequest, "payload does not fit the job"},
		{"bad run at", edit, url.Values{"run_at": {"tomorrow"}}, http.StatusBadRequest, "is not a time like"},
		{"max attempts too few", edit, url.Values{"max_attempts": {"0"}}, http.StatusBadRequest, "invalid max attempts"},
		{"nothing", edit, url.Values{}, http.StatusBadRequest, "the form changes nothing"},
	} {
		f := url.Values{"csrf": {csrf}}
		for k, v := range tc.form {
			f[k] = v
		}
		status, _, body := b.post(tc.path, f)
		require.Equal(t, tc.status, status, "%s: %s", tc.name, body)
		require.Contains(t, body, tc.says, tc.name)
	}
	require.Equal(t, jobs.StateRunning, b.state(running))
	after, err := b.client.GetJob(b.ctx, b.live)
	require.NoError(t, err)
	require.Equal(t, 3, after.Priority, "refused changes changed nothing")
	require.JSONEq(t, `{"to":"grace"}`, string(after.Payload))

	status, location, body = b.post(fmt.Sprintf("/jobs/%d/delete", b.live), url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Equal(t, "../../jobs", location)
	require.Equal(t, fmt.Sprintf("Job %d (pending, kind mail, queue bulk) deleted.", b.live), b.flash("/jobs"))
	_, err = b.client.GetJob(b.ctx, b.live)
	require.Error(t, err, "deleted for good")
}
