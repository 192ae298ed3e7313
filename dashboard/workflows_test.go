package dashboard_test

import (
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/dashboard"
	"github.com/hopperq/hopper/jobs"
)

// workflow enqueues the workflow id of mail steps: fetch, then resize and
// thumb after it, publish after both, and notify after fetch and publish
// (its layer is one past publish's, not fetch's). It returns the steps'
// ids by name.
func (b *bed) workflow(id string) map[string]int64 {
	b.t.Helper()
	step := func(name string) jobs.Entry { return mail.Entry(Mail{To: name}, jobs.MaxAttempts(1)) }
	wf := jobs.NewWorkflow(id).
		Add("fetch", step("fetch")).
		Add("resize", step("resize"), jobs.After("fetch")).
		Add("thumb", step("thumb"), jobs.After("fetch")).
		Add("publish", step("publish"), jobs.After("resize", "thumb")).
		Add("notify", step("notify"), jobs.After("fetch", "publish"))
	res, err := jobs.EnqueueWorkflow(b.ctx, b.pool, wf)
	require.NoError(b.t, err)
	return res.Steps
}

// layer is the part of a workflow page that shows layer n.
func layer(t *testing.T, page string, n int) string {
	t.Helper()
	m := regexp.MustCompile(fmt.Sprintf(`(?s)<section class="layer" data-layer="%d">.*?</section>`, n)).FindString(page)
	require.NotEmpty(t, m, "a layer %d in %s", n, page)
	return m
}

// stepItem is the list item of the step named name.
func stepItem(t *testing.T, page, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<li class="step" data-step="` + regexp.QuoteMeta(name) + `">.*?</li>`).FindString(page)
	require.NotEmpty(t, m, "a step %s in %s", name, page)
	return m
}

// TestWorkflowsPage: the workflows page, linked from every page's
// navigation, looks a workflow up by id and shows its steps in layers (a
// step's layer is one past the highest of its parents'), each with its
// name, state, job link and parents by name, and the buttons that cancel
// its live steps and retry its failed ones; read-only, none. An unknown
// id is a 404 that says so.
func TestWorkflowsPage(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	ids := b.workflow("wf-1")

	for _, path := range []string{"/", "/jobs", "/dead", "/schedules", "/workers", "/sequences", "/workflows", fmt.Sprintf("/jobs/%d", ids["fetch"])} {
		_, body := b.get(path)
		require.Contains(t, body, `<a href="workflows">Workflows</a>`, path)
	}
	status, body := b.get("/workflows")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "<title>Workflows · Hopper</title>")
	require.Contains(t, body, `<form method="get" action="workflows" class="filters" id="lookup">`)
	require.Contains(t, body, `<input name="id" value="" required>`)
	require.NotContains(t, body, `id="graph"`)

	status, body = b.get("/workflows?id=nobody")
	require.Equal(t, http.StatusNotFound, status, body)
	require.Contains(t, body, "No workflow nobody: no step of it is known")

	status, body = b.get("/workflows?id=wf-1")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "<title>Workflow wf-1 · Hopper</title>")
	require.Contains(t, body, `<input name="id" value="wf-1" required>`)
	require.Contains(t, body, `<p id="summary">5 step(s): 1 <span class="state-pending">pending</span>, 4 <span class="state-waiting">waiting</span>.</p>`)
	for n, names := range map[int][]string{1: {"fetch"}, 2: {"resize", "thumb"}, 3: {"publish"}, 4: {"notify"}} {
		l := layer(t, body, n)
		require.Equal(t, len(names), strings.Count(l, `<li class="step"`), "layer %d: %s", n, l)
		for _, name := range names {
			require.Contains(t, l, `data-step="`+name+`"`, "layer %d", n)
		}
	}
	require.NotContains(t, body, `data-layer="5"`)
	fetch := stepItem(t, body, "fetch")
	require.Contains(t, fetch, fmt.Sprintf(`<strong>fetch</strong> <span class="state-pending">pending</span> <a href="jobs/%d">job %d</a>`, ids["fetch"], ids["fetch"]))
	require.Contains(t, fetch, `<span class="muted">mail on email</span>`)
	require.NotContains(t, fetch, "after")
	notify := stepItem(t, body, "notify")
	require.Contains(t, notify, `<span class="state-waiting">waiting</span>`)
	require.Contains(t, notify, fmt.Sprintf(`<span class="parents">after <a href="jobs/%d">fetch</a>, <a href="jobs/%d">publish</a></span>`, ids["fetch"], ids["publish"]))
	require.Equal(t, "workflows/cancel", formAction(t, body, `id="summary"`))
	require.Contains(t, body, `<input type="hidden" name="id" value="wf-1"><button id="cancel" class="danger">Cancel its 5 live step(s)</button>`)
	require.NotContains(t, body, `id="retry"`, "nothing to retry")

	ro := b.serve(dashboard.Config{ReadOnly: true}, false)
	status, page := getFrom(t, ro.URL+"/workflows?id=wf-1")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `data-step="notify"`)
	require.NotContains(t, page, `<form method="post"`)

	// The root cancelled, the others with it: a retry button, no cancel;
	// each step says why it was cancelled.
	require.NoError(t, b.client.CancelJob(b.ctx, ids["fetch"]))
	_, body = b.get("/workflows?id=wf-1")
	require.Contains(t, body, `<p id="summary">5 step(s): 5 <span class="state-cancelled">cancelled</span>.</p>`)
	require.Contains(t, body, `<button id="retry">Retry its 5 dead or cancelled step(s)</button>`)
	require.Equal(t, "workflows/retry", formAction(t, body, `id="summary"`))
	require.NotContains(t, body, `id="cancel"`)
	require.Contains(t, stepItem(t, body, "resize"), fmt.Sprintf(`<span class="reason">parent %d ended cancelled</span>`, ids["fetch"]))

	// A parent that completed and left no history is named by its id.
	gone := b.workflow("wf-2")
	_, err := b.client.DeleteJob(b.ctx, gone["fetch"])
	require.NoError(t, err)
	_, body = b.get("/workflows?id=wf-2")
	require.Contains(t, layer(t, body, 1), `data-step="resize"`, "its parent is gone: a first step")
	require.Contains(t, stepItem(t, body, "resize"), fmt.Sprintf(`after job %d <span class="muted">(gone)</span>`, gone["fetch"]))
	require.Contains(t, layer(t, body, 3), `data-step="notify"`)
}

// TestWorkflowsList: the workflows page without an id lists the
// workflows with live steps in id order (bytewise), each linked to its
// page, with how many of its steps wait, are ready and run, and how long
// ago its oldest live step was enqueued; not a workflow whose steps have
// all ended; the lookup form stays above it. A full page links to the
// next.
func TestWorkflowsList(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	status, body := b.get("/workflows")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `<td colspan="5">No workflow has live steps.</td>`)

	b.workflow("wf-1")
	gone := b.workflow("wf 2") // bytewise before wf-1
	_, err := b.client.DeleteJob(b.ctx, gone["fetch"])
	require.NoError(t, err)
	ended := b.workflow("wf-3")
	require.NoError(t, b.client.CancelJob(b.ctx, ended["fetch"]))

	status, body = b.get("/workflows")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "<title>Workflows · Hopper</title>")
	require.Contains(t, body, `<form method="get" action="workflows" class="filters" id="lookup">`)
	require.Contains(t, body, `<input name="id" value="" required>`)
	require.NotContains(t, body, `id="graph"`)
	require.NotContains(t, body, "No workflow has live steps.")
	require.NotContains(t, body, "wf-3", "its steps have all ended")
	require.Less(t, strings.Index(body, `data-workflow="wf 2"`), strings.Index(body, `data-workflow="wf-1"`), "in id order")
	require.Regexp(t, `<tr data-workflow="wf-1"><td><a href="workflows\?id=wf-1">wf-1</a></td><td>4</td><td>1</td><td>0</td><td>\d+s ago</td></tr>`,
		row(t, body, `<tr data-workflow="wf-1">`))
	require.Regexp(t, `<tr data-workflow="wf 2"><td><a href="workflows\?id=wf%202">wf 2</a></td><td>2</td><td>2</td><td>0</td><td>\d+s ago</td></tr>`,
		row(t, body, `<tr data-workflow="wf 2">`))
	require.NotContains(t, body, `id="next"`)
	_, page := b.get("/workflows?id=wf%202")
	require.Contains(t, page, `data-step="resize"`, "the link leads to the workflow")

	ro := b.serve(dashboard.Config{ReadOnly: true}, false)
	status, page = getFrom(t, ro.URL+"/workflows")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `<tr data-workflow="wf-1">`)

	// A full page links to the next, which starts after its last id: 2
	// workflows above and 99 more, the last of the page "x &096".
	for i := range 99 {
		_, err := jobs.EnqueueWorkflow(b.ctx, b.pool, jobs.NewWorkflow(fmt.Sprintf("x &%03d", i)).Add("only", mail.Entry(Mail{To: "x"})))
		require.NoError(t, err)
	}
	_, body = b.get("/workflows")
	require.Equal(t, 100, strings.Count(body, "<tr data-workflow="), body)
	require.Contains(t, body, `<tr data-workflow="x &amp;097">`)
	require.NotContains(t, body, `<tr data-workflow="x &amp;098">`)
	m := regexp.MustCompile(`<a id="next" href="([^"]+)">`).FindStringSubmatch(body)
	require.NotNil(t, m, "a next page")
	next, err := url.Parse(html.UnescapeString(m[1]))
	require.NoError(t, err)
	require.Equal(t, "workflows", next.Path)
	require.Equal(t, "x &097", next.Query().Get("after"))
	_, body = b.get("/" + html.UnescapeString(m[1]))
	require.Equal(t, 1, strings.Count(body, "<tr data-workflow="), body)
	require.Contains(t, body, `<tr data-workflow="x &amp;098">`)
	require.NotContains(t, body, `id="next"`)
}

// TestCancelAndRetryWorkflow: cancelling and retrying a workflow are
// changes like the others: they need the token and the form's CSRF token,
// from the dashboard's own origin, and a read-only dashboard refuses them.
// A workflow with nothing to cancel or retry is a 409 that says so, an
// unknown one a 404.
func TestCancelAndRetryWorkflow(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	ids := b.workflow("wf-1")
	csrf := b.csrf()
	form := url.Values{"csrf": {csrf}, "id": {"wf-1"}}
	cancel, retry := "/workflows/cancel", "/workflows/retry"

	status, _, body := b.post(cancel, form)
	require.Equal(t, http.StatusUnauthorized, status, "no token yet: %s", body)
	_, _ = b.get("/?token=" + token)
	for _, path := range []string{cancel, retry} {
		status, _, body = b.post(path, url.Values{"id": {"wf-1"}})
		require.Equal(t, http.StatusForbidden, status, "%s: no CSRF token", path)
		require.Contains(t, body, "CSRF")
		status, _, _ = b.post(path, form, "Sec-Fetch-Site", "cross-site")
		require.Equal(t, http.StatusForbidden, status, "%s: from another site", path)
		status, _, _ = b.post(path, form, "Origin", "https://evil.example")
		require.Equal(t, http.StatusForbidden, status, "%s: from another origin", path)
	}
	ro := b.serve(dashboard.Config{ReadOnly: true}, false)
	for _, path := range []string{cancel, retry} {
		res, err := http.PostForm(ro.URL+path, form)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusForbidden, res.StatusCode, "%s: read-only", path)
	}
	require.Equal(t, jobs.StatePending, b.state(ids["fetch"]), "nothing done")

	status, _, body = b.post(retry, form)
	require.Equal(t, http.StatusConflict, status, body)
	require.Contains(t, body, "Workflow wf-1 has no dead or cancelled step: nothing was retried.")
	status, _, body = b.post(cancel, url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusBadRequest, status, body)
	require.Contains(t, body, "the form names no workflow")
	for _, path := range []string{cancel, retry} {
		status, _, body = b.post(path, url.Values{"csrf": {csrf}, "id": {"nobody"}})
		require.Equal(t, http.StatusNotFound, status, path)
		require.Contains(t, body, "No workflow nobody: no step of it is known")
	}

	status, location, body := b.post(cancel, form)
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Equal(t, "../workflows?id=wf-1", location)
	require.Equal(t, "Workflow wf-1: 5 step(s) cancelled.", b.flash("/workflows?id=wf-1"))
	for name, id := range ids {
		require.Equal(t, jobs.StateCancelled, b.state(id), name)
	}
	status, _, body = b.post(cancel, form)
	require.Equal(t, http.StatusConflict, status, body)
	require.Contains(t, body, "Workflow wf-1 has no live step: nothing was cancelled.")

	status, location, body = b.post(retry, form)
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Equal(t, "../workflows?id=wf-1", location)
	require.Equal(t, "Workflow wf-1: 5 step(s) back; each runs once its parents have succeeded.", b.flash("/workflows?id=wf-1"))
	require.Equal(t, jobs.StatePending, b.state(ids["fetch"]))
	require.Equal(t, jobs.StateWaiting, b.state(ids["notify"]))

	// A program with the token as a bearer token.
	prog := &http.Client{CheckRedirect: b.http.CheckRedirect}
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+cancel, strings.NewReader(url.Values{"id": {"wf-1"}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := prog.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, jobs.StateCancelled, b.state(ids["fetch"]))
}

// TestWorkflowIDsAreEscaped: a workflow id and a step name are user data,
// escaped in the pages (the list of live workflows too), carried in a
// query and a form field, read back as they were.
func TestWorkflowIDsAreEscaped(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	const id = `<b>wf</b>/a%2Fb&id=x "q"`
	const stepName = `<i>step</i> "one"`
	wf := jobs.NewWorkflow(id).
		Add(stepName, mail.Entry(Mail{To: "a"})).
		Add("two", mail.Entry(Mail{To: "b"}), jobs.After(stepName))
	res, err := jobs.EnqueueWorkflow(b.ctx, b.pool, wf)
	require.NoError(t, err)
	_, _ = b.get("/?token=" + token)
	csrf := b.csrf()

	query := "/workflows?" + url.Values{"id": {id}}.Encode()
	status, body := b.get(query)
	require.Equal(t, http.StatusOK, status, body)
	require.NotContains(t, body, "<b>wf")
	require.NotContains(t, body, "<i>step")
	require.Contains(t, body, "<title>Workflow &lt;b&gt;wf&lt;/b&gt;/a%2Fb&amp;id=x &#34;q&#34; · Hopper</title>")
	require.Contains(t, body, `<strong>&lt;i&gt;step&lt;/i&gt; &#34;one&#34;</strong>`)
	require.Contains(t, body, `after <a href="jobs/`+fmt.Sprint(res.Steps[stepName])+`">&lt;i&gt;step&lt;/i&gt; &#34;one&#34;</a>`)
	m := regexp.MustCompile(`<input type="hidden" name="id" value="([^"]*)">`).FindStringSubmatch(body)
	require.NotNil(t, m, body)
	require.Equal(t, id, html.UnescapeString(m[1]))

	// The list shows it escaped, linked by its id query-escaped.
	status, body = b.get("/workflows")
	require.Equal(t, http.StatusOK, status, body)
	require.NotContains(t, body, "<b>wf")
	m = regexp.MustCompile(`<tr data-workflow="([^"]*)"><td><a href="([^"]*)">([^<]*)</a></td>`).FindStringSubmatch(body)
	require.NotNil(t, m, body)
	require.Equal(t, id, html.UnescapeString(m[1]))
	require.Equal(t, id, html.UnescapeString(m[3]))
	link, err := url.Parse(html.UnescapeString(m[2]))
	require.NoError(t, err)
	require.Equal(t, "workflows", link.Path)
	require.Equal(t, id, link.Query().Get("id"))
	status, body = b.get("/" + html.UnescapeString(m[2]))
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `<strong>&lt;i&gt;step&lt;/i&gt; &#34;one&#34;</strong>`)

	// The job page links to its workflow, the id query-escaped.
	_, body = b.get(fmt.Sprintf("/jobs/%d", res.Steps["two"]))
	require.NotContains(t, body, "<b>wf")
	m = regexp.MustCompile(`<dd id="workflow"><a href="([^"]*)">`).FindStringSubmatch(body)
	require.NotNil(t, m, body)
	link, err = url.Parse(html.UnescapeString(m[1]))
	require.NoError(t, err)
	require.Equal(t, "workflows", link.Path)
	require.Equal(t, id, link.Query().Get("id"))

	status, location, body := b.post("/workflows/cancel", url.Values{"csrf": {csrf}, "id": {id}})
	require.Equal(t, http.StatusSeeOther, status, body)
	loc, err := url.Parse(location)
	require.NoError(t, err)
	require.Equal(t, id, loc.Query().Get("id"))
	require.Equal(t, "Workflow "+id+": 2 step(s) cancelled.", b.flash(query))
	require.Equal(t, jobs.StateCancelled, b.state(res.Steps["two"]))
}

// TestWorkflowJobPages: a step's job page names its workflow, linked to
// the workflow's page, and its step; a waiting step says that it waits
// for its parents, not for a turn in a sequence.
func TestWorkflowJobPages(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	ids := b.workflow("wf-1")
	_, _ = b.get("/?token=" + token)

	status, body := b.get(fmt.Sprintf("/jobs/%d", ids["publish"]))
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `<dd id="state" class="state-waiting">waiting</dd>`)
	require.Contains(t, body, `<dt>Workflow</dt><dd id="workflow"><a href="workflows?id=wf-1">wf-1</a>, step publish <span class="muted">(waits for its parents: it runs once they have all ended)</span></dd>`)
	require.Contains(t, body, "It waits for its parents in its workflow")
	require.NotContains(t, body, "turn in its sequence")
	require.NotContains(t, body, "waits for its turn")
	require.NotContains(t, body, "run-now")

	_, body = b.get(fmt.Sprintf("/jobs/%d", ids["fetch"]))
	require.Contains(t, body, `<dd id="workflow"><a href="workflows?id=wf-1">wf-1</a>, step fetch</dd>`)
	_, body = b.get(fmt.Sprintf("/jobs/%d", b.live))
	require.NotContains(t, body, `id="workflow"`, "a job of no workflow")
}

// TestWorkflowsProtectReads: with ProtectReads the workflows page, with
// or without an id, needs the token like every other page.
func TestWorkflowsProtectReads(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token, ProtectReads: true})
	b.workflow("wf-1")
	for _, path := range []string{"/workflows", "/workflows?id=wf-1"} {
		status, body := b.get(path)
		require.Equal(t, http.StatusUnauthorized, status, path)
		require.NotContains(t, body, "fetch", path)
	}
	_, _ = b.getRes("/?token=" + token)
	status, body := b.get("/workflows?id=wf-1")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `data-step="fetch"`)
}
