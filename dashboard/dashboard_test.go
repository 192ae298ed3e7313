package dashboard_test

import (
	"context"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/dashboard"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type Mail struct {
	To string `json:"to"`
}

var mail = jobs.MustDefine[Mail]("mail", jobs.Defaults(jobs.Queue("email")))

// bed is a dashboard on a fresh schema with a job in each state, served
// over HTTP, and a browser-like client (cookies, no redirects followed).
type bed struct {
	t      *testing.T
	ctx    context.Context
	srv    *httptest.Server
	http   *http.Client
	pool   *pgxpool.Pool
	client *hopper.Client
	live   int64 // a pending job, whose payload carries a <script>
	dead   int64 // two finished ones, in the dead table as cancelled
	done   int64
}

const token = "s3cret-token"

func newBed(t *testing.T, cfg dashboard.Config) *bed {
	t.Helper()
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	pool := testdb.New(t).Pool
	b := &bed{t: t, ctx: ctx, pool: pool, client: hopper.NewClient(pool)}
	res, err := mail.Enqueue(ctx, pool, Mail{To: `<script>alert("x")</script>`}, jobs.Metadata(jobs.Meta{"tenant": "<b>acme</b>"}), jobs.ConcurrencyKey("tenant:<i>acme</i>"))
	require.NoError(t, err)
	b.live = res.ID
	res, err = mail.Enqueue(ctx, pool, Mail{To: "dead"})
	require.NoError(t, err)
	b.dead = res.ID
	res, err = mail.Enqueue(ctx, pool, Mail{To: "cancelled"})
	require.NoError(t, err)
	b.done = res.ID
	_, err = mail.Enqueue(ctx, pool, Mail{To: "later"}, jobs.Delay(time.Hour))
	require.NoError(t, err)
	// Dead-table rows (retry and purge treat dead and cancelled alike).
	require.NoError(t, b.client.CancelJob(ctx, b.done))
	require.NoError(t, b.client.CancelJob(ctx, b.dead))

	cfg.DB = pool
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := dashboard.New(cfg)
	require.NoError(t, err)
	b.srv = httptest.NewServer(d)
	t.Cleanup(b.srv.Close)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	b.http = &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return b
}

func (b *bed) get(path string) (int, string) {
	b.t.Helper()
	res, err := b.http.Get(b.srv.URL + path)
	require.NoError(b.t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(b.t, err)
	return res.StatusCode, string(body)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// csrf is the CSRF token the pages give this client.
func (b *bed) csrf() string {
	b.t.Helper()
	_, body := b.get("/")
	m := csrfField.FindStringSubmatch(body)
	require.NotNil(b.t, m, "the overview has forms with a CSRF token")
	return m[1]
}

func (b *bed) post(path string, form url.Values, header ...string) (int, string, string) {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+path, strings.NewReader(form.Encode()))
	require.NoError(b.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := b.http.Do(req)
	require.NoError(b.t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(b.t, err)
	return res.StatusCode, res.Header.Get("Location"), string(body)
}

var flashText = regexp.MustCompile(`<p class="flash">([^<]*)</p>`)

// flash is the flash message the page at path shows, or "".
func (b *bed) flash(path string) string {
	b.t.Helper()
	status, body := b.get(path)
	require.Equal(b.t, http.StatusOK, status, body)
	if m := flashText.FindStringSubmatch(body); m != nil {
		return html.UnescapeString(m[1])
	}
	require.NotContains(b.t, body, `class="flash"`)
	return ""
}

// send sends req with the bed's client, and returns the response with its
// body read.
func (b *bed) send(req *http.Request) (*http.Response, string) {
	b.t.Helper()
	res, err := b.http.Do(req)
	require.NoError(b.t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(b.t, err)
	return res, string(body)
}

// getRes is get with the response's headers.
func (b *bed) getRes(path string) (*http.Response, string) {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.srv.URL+path, nil)
	require.NoError(b.t, err)
	return b.send(req)
}

func (b *bed) state(id int64) jobs.State {
	b.t.Helper()
	row, err := b.client.GetJob(b.ctx, id)
	require.NoError(b.t, err)
	return row.State
}

// TestPages: every page answers, bad input gets a clear 4xx page (never a
// 500 or a stack), user data is escaped.
func TestPages(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	for _, tc := range []struct {
		path   string
		status int
		want   string
	}{
		{"/", 200, `<table id="queues">`},
		{"/overview/live", 200, `<table id="queues">`},
		{"/jobs", 200, `<table id="jobs">`},
		{"/jobs?queue=email&kind=mail&state=pending&age=1h", 200, `href="jobs/` + strconv.FormatInt(b.live, 10) + `"`},
		{"/jobs/" + strconv.FormatInt(b.live, 10), 200, `<pre id="payload">`},
		{"/jobs/" + strconv.FormatInt(b.dead, 10), 200, `id="retry"`},
		{"/dead", 200, `name="id" value="` + strconv.FormatInt(b.dead, 10) + `"`},
		{"/schedules", 200, "No schedules."},
		{"/static/style.css", 200, "font:"},
		{"/jobs/abc", 400, "is not a job id"},
		{"/jobs/-3", 400, "is not a job id"},
		{"/jobs/99999999", 404, "job not found"},
		{"/jobs?state=lost", 400, "invalid job state"},
		{"/jobs?age=forever", 400, "is not a duration"},
		{"/jobs?age=-1h", 400, "is not a duration"},
		{"/jobs?after=not-a-cursor", 400, "invalid page cursor"},
		{"/nowhere", 404, "No such page."},
	} {
		status, body := b.get(tc.path)
		require.Equal(t, tc.status, status, "%s: %s", tc.path, body)
		require.Contains(t, body, tc.want, tc.path)
		require.NotContains(t, body, "goroutine", "no stack on any page")
	}
	_, body := b.get("/jobs/" + strconv.FormatInt(b.live, 10))
	require.NotContains(t, body, "<script>alert", "payloads are user data: escaped")
	require.Contains(t, body, `&lt;script&gt;alert(\&#34;x\&#34;)&lt;/script&gt;`)
	require.Contains(t, body, "&lt;b&gt;acme&lt;/b&gt;", "so is metadata")
	require.Contains(t, body, "<dt>Concurrency key</dt><dd>tenant:&lt;i&gt;acme&lt;/i&gt;</dd>", "and the concurrency key")
}

// TestChangesNeedTokenAndCSRF: reading needs nothing; a change needs the
// token (once, kept in a cookie) and the form's CSRF token, and comes from
// the dashboard's own origin.
func TestChangesNeedTokenAndCSRF(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	pause := "/queues/email/pause"
	csrf := b.csrf()

	status, _, body := b.post(pause, url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusUnauthorized, status, "no token yet")
	require.Contains(t, body, "?token=")

	_, _ = b.get("/?token=" + token) // kept in a cookie from now on
	status, _, body = b.post(pause, url.Values{})
	require.Equal(t, http.StatusForbidden, status, "no CSRF token")
	require.Contains(t, body, "CSRF")
	status, _, _ = b.post(pause, url.Values{"csrf": {strings.Repeat("0", 64)}})
	require.Equal(t, http.StatusForbidden, status, "a wrong CSRF token")
	status, _, _ = b.post(pause, url.Values{"csrf": {csrf}}, "Sec-Fetch-Site", "cross-site")
	require.Equal(t, http.StatusForbidden, status, "from another site")
	status, _, _ = b.post(pause, url.Values{"csrf": {csrf}}, "Origin", "https://evil.example")
	require.Equal(t, http.StatusForbidden, status, "from another origin")
	qs, err := b.client.ListQueues(b.ctx)
	require.NoError(t, err)
	require.False(t, qs[0].Paused(), "nothing refused changed anything")

	status, location, _ := b.post(pause, url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, "../../", location, "relative: from queues/email/pause to the overview")
	require.Equal(t, "Queue email paused.", b.flash("/"))
	qs, err = b.client.ListQueues(b.ctx)
	require.NoError(t, err)
	require.True(t, qs[0].Paused())

	// A program sends the token as a bearer token: no cookie, no CSRF.
	prog := &http.Client{CheckRedirect: b.http.CheckRedirect}
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+"/queues/email/resume", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := prog.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	req.Header.Set("Authorization", "Bearer wrong")
	res, err = prog.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
}

// TestActions: cancel, retry (one, selected, by kind), purge.
func TestActions(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	_, _ = b.get("/?token=" + token)
	csrf := b.csrf()
	id := func(n int64) string { return strconv.FormatInt(n, 10) }

	status, _, _ := b.post("/jobs/"+id(b.live)+"/cancel", url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, jobs.StateCancelled, b.state(b.live))
	status, _, body := b.post("/jobs/"+id(b.live)+"/cancel", url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusConflict, status, "cancelled already")
	require.Contains(t, body, "already finished")

	status, location, _ := b.post("/dead/retry", url.Values{"csrf": {csrf}, "id": {id(b.dead)}})
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, "../dead", location)
	require.Equal(t, "Retried 1 of 1 selected job(s).", b.flash("/dead"))
	require.Equal(t, jobs.StatePending, b.state(b.dead))

	status, _, _ = b.post("/dead/purge", url.Values{"csrf": {csrf}, "id": {id(b.done)}})
	require.Equal(t, http.StatusSeeOther, status)
	_, err := b.client.GetJob(b.ctx, b.done)
	require.ErrorIs(t, err, hopper.ErrNotFound, "purged")

	status, _, _ = b.post("/dead/retry", url.Values{"csrf": {csrf}, "kind": {"mail"}})
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, "Retried 1 of the dead jobs of kind mail.", b.flash("/dead"))
	require.Equal(t, jobs.StatePending, b.state(b.live))

	for _, tc := range []struct {
		path   string
		form   url.Values
		status int
	}{
		{"/dead/retry", url.Values{}, 400},                        // nothing chosen
		{"/dead/retry", url.Values{"id": {"x"}}, 400},             // a bad id
		{"/jobs/abc/cancel", url.Values{}, 400},                   // a bad id
		{"/jobs/99999999/cancel", url.Values{}, 404},              // no such job
		{"/queues/email/explode", url.Values{}, 400},              // no such action
		{"/schedules/nightly/pause", url.Values{}, 404},           // no such schedule
		{"/jobs/1/cancel?x=" + strings.Repeat("y", 10), nil, 403}, // no CSRF token
	} {
		form := tc.form
		if form != nil {
			form.Set("csrf", csrf)
		}
		status, _, body := b.post(tc.path, form)
		require.Equal(t, tc.status, status, "%s: %s", tc.path, body)
	}
	big := url.Values{"csrf": {csrf}, "id": {strings.Repeat("1", 70<<10)}}
	status, _, _ = b.post("/dead/retry", big)
	require.Equal(t, http.StatusRequestEntityTooLarge, status, "oversize requests are refused")
}

// TestReadOnly: no forms, and every change refused, token or not (a
// token with ReadOnly needs ProtectReads: TestReadOnlyToken).
func TestReadOnly(t *testing.T) {
	b := newBed(t, dashboard.Config{ReadOnly: true, ProtectReads: true, Token: token})
	_, _ = b.get("/?token=" + token)
	status, body := b.get("/")
	require.Equal(t, 200, status)
	require.Contains(t, body, "read-only")
	require.NotContains(t, body, "<form method=\"post\"")
	m := csrfField.FindStringSubmatch(body)
	require.Nil(t, m)
	status, _, body = b.post("/queues/email/pause", url.Values{})
	require.Equal(t, http.StatusForbidden, status)
	require.Contains(t, body, "read-only")
	_, err := dashboard.New(dashboard.Config{DB: b.pool})
	require.ErrorIs(t, err, dashboard.ErrNoAuth, "no token, not read-only, no auth of the mounting service's: refused")
}

// TestMounted: under a prefix of the mounting service, with its own auth,
// links resolve under the prefix.
func TestMounted(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	d, err := dashboard.New(dashboard.Config{DB: b.pool, OwnAuth: true})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/admin/jobs/", http.StripPrefix("/admin/jobs", d))
	mux.Handle("/admin/jobs", http.StripPrefix("/admin/jobs", d)) // the prefix itself too: the dashboard sees ""
	srv := httptest.NewServer(mux)
	defer srv.Close()
	res, err := http.Get(srv.URL + "/admin/jobs/jobs/" + strconv.FormatInt(b.live, 10))
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, 200, res.StatusCode)
	require.Contains(t, string(body), `<base href="../">`, "relative: /admin/jobs/jobs/ID to /admin/jobs/")

	// Asked for the prefix itself, it sends the browser to the root under
	// it, not to the host's.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err = noFollow.Get(srv.URL + "/admin/jobs")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusTemporaryRedirect, res.StatusCode)
	require.Equal(t, "./jobs/", res.Header.Get("Location"))
	res, err = noFollow.Get(srv.URL + "/admin/jobs/static")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, "./static/", res.Header.Get("Location"), "the mux's own redirects are relative too")
}

// TestMillionRows: the jobs list's first page and a page 550,000 jobs deep,
// over HTTP, on a million jobs. Timings are printed, never asserted.
func TestMillionRows(t *testing.T) {
	testdb.Slow(t, "a million rows written")
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool := testdb.New(t).Pool
	began := time.Now()
	testdb.SeedMillion(t, ctx, pool)
	t.Logf("1,000,000 jobs written in %v", time.Since(began).Round(time.Millisecond))
	d, err := dashboard.New(dashboard.Config{DB: pool, ReadOnly: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(d)
	defer srv.Close()
	// A cursor 550,000 jobs deep, reached a thousand at a time.
	client, p := hopper.NewClient(pool), hopper.ListParams{Limit: hopper.MaxListLimit}
	for range 550 {
		page, err := client.ListJobs(ctx, p)
		require.NoError(t, err)
		p.After = page.Next
	}
	for _, tc := range []struct{ name, path, want string }{
		{"first page, every state", "/jobs", `href="jobs/3050000"`},
		{"a page 550,000 jobs deep", "/jobs?after=" + url.QueryEscape(p.After), `href="jobs/450010"`},
		{"queue q1, pending", "/jobs?queue=q1&state=pending", `class="state-pending"`},
		{"dead and cancelled", "/dead", `class="state-dead"`},
		{"overview", "/", `<table id="queues">`},
	} {
		best := time.Hour
		for range 3 { // the best of three: the first pays for planning and cold pages
			start := time.Now()
			res, err := http.Get(srv.URL + tc.path)
			require.NoError(t, err)
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			require.NoError(t, err)
			best = min(best, time.Since(start))
			require.Equal(t, 200, res.StatusCode, tc.name)
			require.Contains(t, string(body), tc.want, tc.name)
		}
		t.Logf("%-28s rendered in %v", tc.name, best.Round(10*time.Microsecond))
	}

	// The pages link on: the first page's "next" is the second page.
	res, err := http.Get(srv.URL + "/jobs?kind=k3")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	next := regexp.MustCompile(`id="next" href="([^"]+)"`).FindStringSubmatch(string(body))
	require.NotNil(t, next)
	res, err = http.Get(srv.URL + "/" + strings.ReplaceAll(next[1], "&amp;", "&"))
	require.NoError(t, err)
	body, err = io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, 200, res.StatusCode, string(body))
	require.Contains(t, string(body), `value="k3"`, "the filter is kept")
	require.Contains(t, string(body), `id="next"`)
}
