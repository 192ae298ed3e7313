package dashboard_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/dashboard"
	"github.com/hopperq/hopper/jobs"
)

// sequence puts n mail jobs in the sequence key, on their last attempt,
// and returns their ids, the head first.
func (b *bed) sequence(key string, n int) []int64 {
	b.t.Helper()
	ids := make([]int64, n)
	for i := range n {
		res, err := mail.Enqueue(b.ctx, b.pool, Mail{To: fmt.Sprint(key, " ", i)}, jobs.Sequence(key), jobs.MaxAttempts(1))
		require.NoError(b.t, err)
		ids[i] = res.ID
	}
	return ids
}

// blockedSequence is sequence with its head cancelled: the sequence is
// blocked.
func (b *bed) blockedSequence(key string, n int) []int64 {
	b.t.Helper()
	ids := b.sequence(key, n)
	require.NoError(b.t, b.client.CancelJob(b.ctx, ids[0]))
	info, err := b.client.GetSequence(b.ctx, key)
	require.NoError(b.t, err)
	require.NotNil(b.t, info.Blocked, "cancelling the head blocks %s", key)
	return ids
}

// TestSequencesPage: the sequences page, linked from every page's
// navigation, lists the blocked sequences in key order (key, the head that
// blocks it, linked, its queue, kind, state, reason, when, how many wait),
// not those that run, each with a retry button and a link to the page
// before a skip; read-only, none. A full page links to the next.
func TestSequencesPage(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	status, body := b.get("/sequences")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "<title>Blocked sequences · Hopper</title>")
	require.Contains(t, body, `<td colspan="9">No blocked sequences.</td>`)

	acct1 := b.blockedSequence("acct-1", 3)
	acct2 := b.blockedSequence("acct 2", 1)
	b.sequence("acct-3", 2) // runs: not blocked

	for _, path := range []string{"/", "/jobs", "/dead", "/schedules", "/workers", "/sequences", fmt.Sprintf("/jobs/%d", acct1[1])} {
		_, body := b.get(path)
		require.Contains(t, body, `<a href="sequences">Sequences</a>`, path)
	}
	status, body = b.get("/sequences")
	require.Equal(t, http.StatusOK, status, body)
	require.NotContains(t, body, "acct-3")
	require.Less(t, strings.Index(body, `data-sequence="acct 2"`), strings.Index(body, `data-sequence="acct-1"`), "in key order")
	one := row(t, body, `<tr data-sequence="acct-1">`)
	require.Regexp(t, fmt.Sprintf(`<td>acct-1</td><td><a href="jobs/%d">%d</a></td><td>email</td><td>mail</td>\s*`, acct1[0], acct1[0])+
		`<td class="state-cancelled">cancelled</td><td>[^<]*</td><td>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d</td><td>2</td>`, one)
	require.Equal(t, "sequences/acct-1/retry", formAction(t, one, `data-sequence="acct-1"`))
	require.Contains(t, one, `<a class="danger" href="sequences/acct-1/skip">Skip its head…</a>`)
	require.NotContains(t, one, `action="sequences/acct-1/skip"`, "no skip in one click")
	two := row(t, body, `<tr data-sequence="acct 2">`)
	require.Regexp(t, fmt.Sprintf(`<td><a href="jobs/%d">%d</a></td>`, acct2[0], acct2[0]), two)
	require.Contains(t, two, "<td>0</td>")
	require.Equal(t, "sequences/acct%202/retry", formAction(t, two, `data-sequence="acct 2"`))
	require.NotContains(t, body, `id="next"`)

	ro := b.serve(dashboard.Config{ReadOnly: true}, false)
	status, page := getFrom(t, ro.URL+"/sequences")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `<tr data-sequence="acct-1">`)
	require.NotContains(t, page, `<form method="post"`)
	require.NotContains(t, page, "Skip its head")

	// A full page links to the next, which starts after its last key.
	for i := range 49 {
		b.blockedSequence(fmt.Sprintf("bulk-%02d", i), 1)
	}
	_, body = b.get("/sequences")
	require.Contains(t, body, `<tr data-sequence="bulk-47">`)
	require.NotContains(t, body, `<tr data-sequence="bulk-48">`)
	m := regexp.MustCompile(`<a id="next" href="([^"]+)">`).FindStringSubmatch(body)
	require.NotNil(t, m, "a next page")
	require.Equal(t, "sequences?after=bulk-47", m[1])
	_, body = b.get("/" + m[1])
	require.Contains(t, body, `<tr data-sequence="bulk-48">`)
	require.NotContains(t, body, `<tr data-sequence="bulk-47">`)
	require.NotContains(t, body, `id="next"`)
}

// TestRetryAndSkipSequence: retrying and skipping are changes like the
// others: they need the token and the form's CSRF token, from the
// dashboard's own origin, and a read-only dashboard refuses them. Retry
// runs the head again in one click; skip has a page before it that says
// what it leaves behind; a sequence that is not blocked is a 409 that
// says so, and a head purged from the dead table cannot be retried.
func TestRetryAndSkipSequence(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	ids := b.blockedSequence("acct-1", 3)
	csrf := b.csrf()
	retry, skip := "/sequences/acct-1/retry", "/sequences/acct-1/skip"
	blocked := func() {
		t.Helper()
		info, err := b.client.GetSequence(b.ctx, "acct-1")
		require.NoError(t, err)
		require.NotNil(t, info.Blocked, "nothing done")
		require.Equal(t, jobs.StateWaiting, b.state(ids[1]))
	}

	status, _, body := b.post(retry, url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusUnauthorized, status, "no token yet: %s", body)
	_, _ = b.get("/?token=" + token)
	for _, path := range []string{retry, skip} {
		status, _, body = b.post(path, url.Values{})
		require.Equal(t, http.StatusForbidden, status, "%s: no CSRF token", path)
		require.Contains(t, body, "CSRF")
		status, _, _ = b.post(path, url.Values{"csrf": {csrf}}, "Sec-Fetch-Site", "cross-site")
		require.Equal(t, http.StatusForbidden, status, "%s: from another site", path)
		status, _, _ = b.post(path, url.Values{"csrf": {csrf}}, "Origin", "https://evil.example")
		require.Equal(t, http.StatusForbidden, status, "%s: from another origin", path)
	}
	ro := b.serve(dashboard.Config{ReadOnly: true}, false)
	for _, path := range []string{retry, skip} {
		res, err := http.PostForm(ro.URL+path, url.Values{"csrf": {csrf}})
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusForbidden, res.StatusCode, "%s: read-only", path)
	}
	blocked()

	// The page before a skip: the head, what skipping leaves, and both
	// buttons; read-only, none.
	status, body = b.get(skip)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "<title>Skip the head of sequence acct-1 · Hopper</title>")
	require.Contains(t, body, `<base href="../../">`)
	require.Contains(t, body, fmt.Sprintf(`<dt>Head</dt><dd><a href="jobs/%d">job %d</a></dd>`, ids[0], ids[0]))
	require.Contains(t, body, "<dt>Waiting</dt><dd>2 job(s)</dd>")
	require.Contains(t, body, fmt.Sprintf(`<p class="error" id="risk">Skipping leaves job %d cancelled: it does not run again`, ids[0]))
	require.Equal(t, "sequences/acct-1/skip", formAction(t, body, `id="risk"`))
	require.Contains(t, body, fmt.Sprintf(`<button id="skip" class="danger">Skip job %d: the next job runs</button>`, ids[0]))
	require.Equal(t, "sequences/acct-1/retry", formAction(t, body, `id="skip"`))
	status, page := getFrom(t, ro.URL+skip)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `id="risk"`)
	require.NotContains(t, page, "<form")

	// Retry: the head runs again, first; then the sequence is not blocked.
	status, location, body := b.post(retry, url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Equal(t, "../../sequences", location)
	require.Equal(t, fmt.Sprintf("Sequence acct-1: job %d runs again as its head; the jobs behind it follow once it succeeds.", ids[0]), b.flash("/sequences"))
	require.Equal(t, jobs.StatePending, b.state(ids[0]))
	require.Equal(t, jobs.StateWaiting, b.state(ids[1]))
	for _, path := range []string{retry, skip} {
		status, _, body = b.post(path, url.Values{"csrf": {csrf}})
		require.Equal(t, http.StatusConflict, status, path)
		require.Contains(t, body, "Sequence acct-1 is not blocked: nothing was")
	}
	status, body = b.get(skip)
	require.Equal(t, http.StatusConflict, status)
	require.Contains(t, body, "Sequence acct-1 is not blocked: nothing was skipped.")

	// Skip: the head stays as it ended, the next job runs.
	require.NoError(t, b.client.CancelJob(b.ctx, ids[0]))
	blocked()
	status, location, body = b.post(skip, url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Equal(t, "../../sequences", location)
	require.Equal(t, fmt.Sprintf("Sequence acct-1: job %d skipped; job %d runs next.", ids[0], ids[1]), b.flash("/sequences"))
	require.Equal(t, jobs.StateCancelled, b.state(ids[0]))
	require.Equal(t, jobs.StatePending, b.state(ids[1]))
	require.Equal(t, jobs.StateWaiting, b.state(ids[2]))

	// A head purged from the dead table cannot run again: skip it.
	gone := b.blockedSequence("acct-9", 1)
	_, err := b.client.PurgeDeadJobs(b.ctx, hopper.DeadFilter{IDs: gone, States: []jobs.State{jobs.StateCancelled}})
	require.NoError(t, err)
	status, _, body = b.post("/sequences/acct-9/retry", url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusConflict, status)
	require.Contains(t, body, "The head of sequence acct-9 is no longer in the dead table (purged, or retried meanwhile): nothing was retried.")
	_, _, _ = b.post("/sequences/acct-9/skip", url.Values{"csrf": {csrf}})
	require.Equal(t, fmt.Sprintf("Sequence acct-9: job %d skipped; no job waits behind it.", gone[0]), b.flash("/sequences"))

	// A program with the token as a bearer token.
	more := b.blockedSequence("acct-7", 2)
	prog := &http.Client{CheckRedirect: b.http.CheckRedirect}
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+"/sequences/acct-7/skip", strings.NewReader(""))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := prog.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, jobs.StatePending, b.state(more[1]))
}

// TestSequenceKeysAreEscaped: a sequence key is user data, escaped in the
// pages, and one path segment in the forms' actions, read back as it was.
func TestSequenceKeysAreEscaped(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	const key = `<b>acct</b>/a%2Fb`
	ids := b.blockedSequence(key, 2)
	_, _ = b.get("/?token=" + token)
	csrf := b.csrf()
	_, body := b.get("/sequences")
	require.NotContains(t, body, "<b>acct")
	require.Contains(t, body, `<td>&lt;b&gt;acct&lt;/b&gt;/a%2Fb</td>`)
	action := formAction(t, body, `data-sequence="&lt;b&gt;acct&lt;/b&gt;/a%2Fb"`)
	require.Equal(t, "sequences/%3Cb%3Eacct%3C%2Fb%3E%2Fa%252Fb/retry", action)
	status, body := b.get("/sequences/%3Cb%3Eacct%3C%2Fb%3E%2Fa%252Fb/skip")
	require.Equal(t, http.StatusOK, status, body)
	require.NotContains(t, body, "<b>acct")
	status, location, body := b.post("/"+action, url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Equal(t, "../../sequences", location)
	require.Equal(t, jobs.StatePending, b.state(ids[0]))
	require.Equal(t, fmt.Sprintf("Sequence %s: job %d runs again as its head; the jobs behind it follow once it succeeds.", key, ids[0]), b.flash("/sequences"))
}

// TestWaitingJobPages: a job waiting for its turn in a sequence is listed
// under its state (which the jobs page's filter offers), and its page
// says which sequence it waits in; it can be edited or deleted, but has
// no run-now button, since it keeps its place. The dead head that blocks
// a sequence links to the page that retries or skips it.
func TestWaitingJobPages(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	ids := b.blockedSequence("acct-1", 2)
	_, _ = b.get("/?token=" + token)

	_, body := b.get("/jobs")
	require.Contains(t, body, "<option>waiting</option>")
	status, body := b.get("/jobs?state=waiting")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "<option selected>waiting</option>")
	require.Contains(t, body, fmt.Sprintf(`<td><a href="jobs/%d">%d</a></td><td class="state-waiting">waiting</td>`, ids[1], ids[1]))
	require.NotContains(t, body, fmt.Sprintf(`href="jobs/%d"`, ids[0]), "only waiting jobs")

	status, body = b.get(fmt.Sprintf("/jobs/%d", ids[1]))
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `<dd id="state" class="state-waiting">waiting</dd>`)
	require.Contains(t, body, `<dt>Sequence</dt><dd id="sequence">acct-1 <span class="muted">(waits for its turn`)
	require.Contains(t, body, "<h2>Change this job</h2>")
	require.NotContains(t, body, "run-now")
	require.Equal(t, fmt.Sprintf("jobs/%d/edit", ids[1]), formAction(t, body, "<h2>Change this job</h2>"))
	require.Contains(t, body, `<button id="delete" class="danger">Delete this job for good</button>`)
	require.Contains(t, body, `<button id="cancel">Cancel this job</button>`)
	require.NotContains(t, body, `id="blocks"`)

	status, body = b.get(fmt.Sprintf("/jobs/%d", ids[0]))
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `<span class="paused" id="blocks">(this job blocks it:</span> <a href="sequences/acct-1/skip">retry or skip it</a>)`)
	require.NotContains(t, body, "waits for its turn")

	// Once skipped, the head blocks nothing any more.
	_, err := b.client.SkipSequence(b.ctx, "acct-1")
	require.NoError(t, err)
	_, body = b.get(fmt.Sprintf("/jobs/%d", ids[0]))
	require.Contains(t, body, `<dd id="sequence">acct-1</dd>`)
	_, body = b.get(fmt.Sprintf("/jobs/%d", ids[1]))
	require.Contains(t, body, `<dd id="state" class="state-pending">pending</dd>`)
	require.Contains(t, body, `id="run-now"`)
}
