package dashboard_test

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/dashboard"
	"github.com/hopperq/hopper/internal/buildinfo"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
	"github.com/hopperq/hopper/jobs"
)

// registry writes the workers of the workers' tests: gone-1 (gone for
// five minutes, holding a job with attempts left and one on its last),
// live-1 (alive, holding two jobs) and sched-1 (alive, no queue, no job).
// It returns the jobs, by worker.
func (b *bed) registry() map[string][]int64 {
	b.t.Helper()
	testfactory.Worker(b.ctx, b.t, b.pool, &testfactory.WorkerOpts{ID: "gone-1", Host: "node-a", PID: 11,
		Queues: []string{"email", "default"}, StaleAfter: time.Second, LastBeatAgo: 5 * time.Minute})
	testfactory.Worker(b.ctx, b.t, b.pool, &testfactory.WorkerOpts{ID: "live-1", Host: "node-b", PID: 22, StaleAfter: time.Hour,
		Version: "v1.2.0"})
	testfactory.Worker(b.ctx, b.t, b.pool, &testfactory.WorkerOpts{ID: "sched-1", Host: "node-c", PID: 33, Queues: []string{}, StaleAfter: time.Hour})
	held := func(owner string, maxAttempts int32) int64 {
		return testfactory.Job(b.ctx, b.t, b.pool, &testfactory.JobOpts{
			State: testfactory.Running, LeaseOwner: owner, MaxAttempts: maxAttempts}).ID
	}
	return map[string][]int64{
		"gone-1": {held("gone-1", 3), held("gone-1", 1)},
		"live-1": {held("live-1", 3), held("live-1", 3)},
	}
}

// row is the table row of the page whose opening tag has at.
func row(t *testing.T, page, at string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)` + regexp.QuoteMeta(at) + `.*?</tr>`).FindString(page)
	require.NotEmpty(t, m, "a row %s in %s", at, page)
	return m
}

// getFrom gets url with a client of no session: its status and body.
func getFrom(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(body)
}

// TestWorkersPage: the workers page, linked from every page's navigation,
// shows each worker of the registry (host, pid, the Hopper version it was
// built with, queues, jobs held, last beat, alive or gone); a gone worker holding jobs has a release button, a
// live one a link to the page that says what forcing risks; read-only, none.
func TestWorkersPage(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	_, body := b.get("/workers")
	require.Contains(t, body, `<td colspan="9">No workers in the registry.</td>`)
	b.registry()

	for _, path := range []string{"/", "/jobs", "/dead", "/schedules", "/workers"} {
		_, body := b.get(path)
		require.Contains(t, body, `<a href="workers">Workers</a>`, path)
	}
	status, body := b.get("/workers")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "<title>Workers · Hopper</title>")
	gone := row(t, body, `<tr data-worker="gone-1">`)
	require.Regexp(t, `<td>gone-1</td><td>node-a</td><td>11</td><td><span class="muted">unknown</span></td>\s*<td><a href="jobs\?queue=email">email</a>, <a href="jobs\?queue=default">default</a></td>\s*`+
		`<td>2</td><td>5m\d\ds ago</td>\s*<td><span class="paused">gone</span></td>`, gone)
	require.Equal(t, "workers/gone-1/release", formAction(t, gone, `data-worker="gone-1"`))
	require.NotContains(t, gone, "force")
	live := row(t, body, `<tr data-worker="live-1">`)
	require.Regexp(t, `<td>2</td><td>\d+s ago</td>\s*<td>alive</td>`, live)
	require.Contains(t, live, `<td>22</td><td>v1.2.0</td>`, "the Hopper it was built with")
	require.Contains(t, live, `<a class="danger" href="workers/live-1/release">Force release…</a>`)
	require.NotContains(t, live, "<form", "no release in one click for a live worker")
	sched := row(t, body, `<tr data-worker="sched-1">`)
	require.Contains(t, sched, `<span class="muted">none (schedules only)</span>`)
	require.Contains(t, sched, `<td>0</td>`)
	require.NotContains(t, sched, "release", "nothing to release")

	ro := b.serve(dashboard.Config{ReadOnly: true}, false)
	status, page := getFrom(t, ro.URL+"/workers")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `<tr data-worker="gone-1">`)
	require.NotContains(t, page, "<form method=\"post\"")
	require.NotContains(t, page, "Force release")
}

// TestReleaseWorker: releasing a worker's jobs is a change like the
// others: it needs the token and the form's CSRF token, from the
// dashboard's own origin, and a read-only dashboard refuses it. A gone
// worker's jobs are released in one click; a live worker's are refused
// (409, nothing released) unless the form says force=yes, which only the
// page that says what it risks sends.
func TestReleaseWorker(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	held := b.registry()
	csrf := b.csrf()
	goneRelease, liveRelease := "/workers/gone-1/release", "/workers/live-1/release"
	running := func(worker string) {
		t.Helper()
		for _, id := range held[worker] {
			require.Equal(t, jobs.StateRunning, b.state(id), "%s: nothing released", worker)
		}
	}

	status, _, body := b.post(goneRelease, url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusUnauthorized, status, "no token yet: %s", body)
	_, _ = b.get("/?token=" + token)
	status, _, body = b.post(goneRelease, url.Values{})
	require.Equal(t, http.StatusForbidden, status, "no CSRF token")
	require.Contains(t, body, "CSRF")
	status, _, _ = b.post(goneRelease, url.Values{"csrf": {csrf}}, "Sec-Fetch-Site", "cross-site")
	require.Equal(t, http.StatusForbidden, status, "from another site")
	status, _, _ = b.post(liveRelease, url.Values{"csrf": {csrf}, "force": {"yes"}}, "Origin", "https://evil.example")
	require.Equal(t, http.StatusForbidden, status, "from another origin, forced")
	ro := b.serve(dashboard.Config{ReadOnly: true}, false)
	res, err := http.PostForm(ro.URL+goneRelease, url.Values{"csrf": {csrf}})
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusForbidden, res.StatusCode, "read-only")
	running("gone-1")
	running("live-1")

	// A gone worker: one click.
	status, location, body := b.post(goneRelease, url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Equal(t, "../../workers", location)
	require.Equal(t, "Worker gone-1: released 2 job(s): 1 requeued, 1 dead (that was their last attempt).", b.flash("/workers"))
	require.Equal(t, jobs.StatePending, b.state(held["gone-1"][0]))
	require.Equal(t, jobs.StateDead, b.state(held["gone-1"][1]))
	_, _, _ = b.post(goneRelease, url.Values{"csrf": {csrf}})
	require.Equal(t, "Worker gone-1 held no jobs: nothing was released.", b.flash("/workers"))

	// A live worker: refused unless forced.
	for _, force := range []string{"", "1", "true"} {
		status, _, body = b.post(liveRelease, url.Values{"csrf": {csrf}, "force": {force}})
		require.Equal(t, http.StatusConflict, status, "force=%q: %s", force, body)
		require.Contains(t, body, "Worker live-1 is alive: its jobs are its own, and nothing was released.")
		require.Contains(t, body, "use Force release on the workers page: each of its jobs may then run twice at once.")
	}
	running("live-1")

	// The page before a forced release says what it risks; its button
	// sends force=yes.
	status, body = b.get(liveRelease)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "<title>Release the jobs of worker live-1 · Hopper</title>")
	require.Contains(t, body, `<base href="../../">`)
	require.Contains(t, body, "<dt>Version</dt><dd>v1.2.0</dd>")
	require.Regexp(t, `(?s)<p class="error" id="risk">This worker is alive: its last heartbeat was \d+s ago\..*each may run twice at once\.</p>`, body)
	require.Contains(t, body, `<input type="hidden" name="force" value="yes"><button id="force" class="danger">Force release: its jobs may run twice</button>`)
	require.Equal(t, "workers/live-1/release", formAction(t, body, `id="risk"`))
	status, location, body = b.post(liveRelease, url.Values{"csrf": {csrf}, "force": {"yes"}})
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Equal(t, "../../workers", location)
	require.Equal(t, "Worker live-1: released 2 job(s): 2 requeued, 0 dead.", b.flash("/workers"))
	for _, id := range held["live-1"] {
		require.Equal(t, jobs.StatePending, b.state(id))
	}

	// A gone worker's page offers the plain release, no force.
	status, body = b.get(goneRelease)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `<button id="release">Release its jobs</button>`)
	require.NotContains(t, body, "force")
	// Read-only, the pages show no button.
	status, page := getFrom(t, ro.URL+liveRelease)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `id="risk"`)
	require.NotContains(t, page, "<form")

	// Unknown workers; a program with the token as a bearer token.
	for _, path := range []string{"/workers/nobody/release"} {
		status, body = b.get(path)
		require.Equal(t, http.StatusNotFound, status)
		require.Contains(t, body, `No worker &#34;nobody&#34; in the registry`)
		status, _, body = b.post(path, url.Values{"csrf": {csrf}, "force": {"yes"}})
		require.Equal(t, http.StatusNotFound, status)
		require.Contains(t, body, `No worker &#34;nobody&#34; in the registry`)
	}
	more := testfactory.Job(b.ctx, t, b.pool, &testfactory.JobOpts{State: testfactory.Running, LeaseOwner: "live-1"}).ID
	prog := &http.Client{CheckRedirect: b.http.CheckRedirect}
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+liveRelease, strings.NewReader("force=yes"))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err = prog.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, jobs.StatePending, b.state(more))
}

// TestWorkerIDsAreEscaped: a worker id is user data, escaped in the page,
// and one path segment in the release's action, read back as it was.
func TestWorkerIDsAreEscaped(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	const id = `<b>pod</b>/a%2Fb`
	testfactory.Worker(b.ctx, t, b.pool, &testfactory.WorkerOpts{ID: id, StaleAfter: time.Second, LastBeatAgo: time.Minute})
	job := testfactory.Job(b.ctx, t, b.pool, &testfactory.JobOpts{State: testfactory.Running, LeaseOwner: id}).ID
	_, _ = b.get("/?token=" + token)
	csrf := b.csrf()
	_, body := b.get("/workers")
	require.NotContains(t, body, "<b>pod")
	require.Contains(t, body, `<td>&lt;b&gt;pod&lt;/b&gt;/a%2Fb</td>`)
	action := formAction(t, body, `data-worker="&lt;b&gt;pod&lt;/b&gt;/a%2Fb"`)
	require.Equal(t, "workers/%3Cb%3Epod%3C%2Fb%3E%2Fa%252Fb/release", action)
	status, location, body := b.post("/"+action, url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Equal(t, "../../workers", location)
	require.Equal(t, jobs.StatePending, b.state(job))
	require.Equal(t, "Worker "+id+": released 1 job(s): 1 requeued, 0 dead.", b.flash("/workers"))
}

// TestBuildFooter: every page's footer names the dashboard's own build:
// Hopper's version, the commit (a test binary records none, and says so)
// and Go, so that a person looking at a dashboard during a rollout knows
// which one it is.
func TestBuildFooter(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	build := buildinfo.Read()
	want := `<footer class="muted" id="build">Hopper ` + build.Version + `, commit ` + buildinfo.Unstamped + `, ` + build.Go + `</footer>`
	for _, path := range []string{"/", "/jobs", "/dead", "/schedules", "/workers", "/sequences", "/workflows", "/jobs/999999"} {
		_, body := b.get(path)
		require.Contains(t, body, want, path)
	}
}
