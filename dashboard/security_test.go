package dashboard_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/dashboard"
	"github.com/hopperq/hopper/jobs"
)

// cookie is the cookie named name that res sets, or nil.
func cookie(res *http.Response, name string) *http.Cookie {
	for _, c := range res.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// serve serves a second dashboard on the bed's schema.
func (b *bed) serve(cfg dashboard.Config, tls bool) *httptest.Server {
	b.t.Helper()
	cfg.DB = b.pool
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := dashboard.New(cfg)
	require.NoError(b.t, err)
	srv := httptest.NewUnstartedServer(d)
	if tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	b.t.Cleanup(srv.Close)
	return srv
}

// formAction is the action of the first form after the text at in the
// page, HTML-unescaped: a path relative to the page's base ("./").
func formAction(t *testing.T, page, at string) string {
	t.Helper()
	m := regexp.MustCompile(regexp.QuoteMeta(at) + `(?s:.*?)<form method="post" action="([^"]+)"`).FindStringSubmatch(page)
	require.NotNil(t, m, "a form after %s", at)
	return html.UnescapeString(m[1])
}

// TestNamesArePathEscaped: queue and schedule names are one path segment
// in the forms' actions, and the handler reads them back as they are: a
// queue "a/b" and a queue "a%2Fb" are two queues, paused and resumed
// each through its own form.
func TestNamesArePathEscaped(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	names := []string{"a/b", "a%2Fb"}
	for _, q := range names {
		_, err := mail.Enqueue(b.ctx, b.pool, Mail{To: q}, jobs.Queue(q))
		require.NoError(t, err)
		_, err = b.pool.Exec(b.ctx, `INSERT INTO hopper_schedules (name, kind, expression, time_zone, policy, queue, definition_hash, next_fire_at)
			VALUES ($1, 'mail', '@hourly', 'UTC', 'once', 'email', 'h', now() + interval '1 hour')`, q)
		require.NoError(t, err)
	}
	_, _ = b.get("/?token=" + token)
	csrf := b.csrf()
	paused := func() map[string]bool {
		qs, err := b.client.ListQueues(b.ctx)
		require.NoError(t, err)
		out := map[string]bool{}
		for _, q := range qs {
			out[q.Name] = q.Paused()
		}
		ss, err := b.client.ListSchedules(b.ctx)
		require.NoError(t, err)
		for _, s := range ss {
			out["schedule "+s.Name] = s.PausedAt != nil
		}
		return out
	}
	// act posts the form found after at in the page at path, as a browser
	// would: its action resolved against the page's base (the root).
	act := func(path, at, want string) {
		t.Helper()
		_, body := b.get(path)
		action := formAction(t, body, at)
		require.Equal(t, want, action)
		u, err := url.Parse(b.srv.URL + "/")
		require.NoError(t, err)
		ref, err := url.Parse(action)
		require.NoError(t, err)
		status, _, body := b.post(u.ResolveReference(ref).EscapedPath(), url.Values{"csrf": {csrf}})
		require.Equal(t, http.StatusSeeOther, status, "%s: %s", action, body)
	}

	_, body := b.get("/")
	require.Contains(t, body, `href="jobs?queue=a%2fb"`, "in a query, names are query-escaped")
	require.Contains(t, body, `href="jobs?queue=a%252Fb"`)

	act("/", `data-queue="a/b"`, "queues/a%2Fb/pause")
	require.Equal(t, map[string]bool{"a/b": true, "a%2Fb": false, "email": false,
		"schedule a/b": false, "schedule a%2Fb": false}, paused())
	act("/", `data-queue="a%2Fb"`, "queues/a%252Fb/pause")
	require.Equal(t, map[string]bool{"a/b": true, "a%2Fb": true, "email": false,
		"schedule a/b": false, "schedule a%2Fb": false}, paused())
	require.Equal(t, "Queue a%2Fb paused.", b.flash("/"))
	act("/", `data-queue="a/b"`, "queues/a%2Fb/resume")
	require.Equal(t, map[string]bool{"a/b": false, "a%2Fb": true, "email": false,
		"schedule a/b": false, "schedule a%2Fb": false}, paused())
	act("/", `data-queue="a%2Fb"`, "queues/a%252Fb/resume")

	act("/schedules", `<td>a%2Fb</td>`, "schedules/a%252Fb/pause")
	require.Equal(t, map[string]bool{"a/b": false, "a%2Fb": false, "email": false,
		"schedule a/b": false, "schedule a%2Fb": true}, paused())
	act("/schedules", `<td>a/b</td>`, "schedules/a%2Fb/pause")
	act("/schedules", `<td>a%2Fb</td>`, "schedules/a%252Fb/resume")
	require.Equal(t, map[string]bool{"a/b": false, "a%2Fb": false, "email": false,
		"schedule a/b": true, "schedule a%2Fb": false}, paused())
	require.Equal(t, "Schedule a%2Fb: resume done.", b.flash("/schedules"))
	_, body = b.get("/schedules")
	require.Equal(t, "schedules/a%2Fb/trigger", html.UnescapeString(
		regexp.MustCompile(`<td>a/b</td>(?s:.*?)action="(schedules/[^"]+/trigger)"`).FindStringSubmatch(body)[1]))
}

// TestTokenLeavesTheURL: a token given as ?token= is kept in a cookie and
// the browser is sent to the same page without it (a relative location,
// the other parameters kept); no next-page link carries a token.
func TestTokenLeavesTheURL(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	live := strconv.FormatInt(b.live, 10)
	for _, tc := range []struct{ path, location string }{
		{"/?token=" + token, "./"},
		{"/jobs?state=pending&token=" + token + "&kind=mail", "./jobs?state=pending&kind=mail"},
		{"/jobs/" + live + "?token=" + url.QueryEscape(token), "./" + live},
		{"/dead?to%6Ben=" + token + "&token=" + token + "&queue=a%2Fb", "./dead?queue=a%2Fb"},
	} {
		res, _ := b.getRes(tc.path)
		require.Equal(t, http.StatusSeeOther, res.StatusCode, tc.path)
		require.Equal(t, tc.location, res.Header.Get("Location"), tc.path)
		c := cookie(res, "hopper_token")
		require.NotNil(t, c, tc.path)
		require.Equal(t, token, c.Value)
		require.True(t, c.HttpOnly)
	}
	status, _, _ := b.post("/queues/email/pause", url.Values{"csrf": {b.csrf()}})
	require.Equal(t, http.StatusSeeOther, status, "the cookie is the token")

	// A wrong token is not taken: the page shows, and its next-page link
	// does not carry it.
	_, err := mail.EnqueueMany(b.ctx, b.pool, jobs.Items(make([]Mail, 60)...))
	require.NoError(t, err)
	b.http.Jar, _ = cookiejar.New(nil)
	res, body := b.getRes("/jobs?kind=mail&token=wrong")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Nil(t, cookie(res, "hopper_token"))
	next := regexp.MustCompile(`id="next" href="([^"]+)"`).FindStringSubmatch(body)
	require.NotNil(t, next, "more than a page of jobs")
	require.Contains(t, next[1], "kind=mail")
	require.NotContains(t, next[1], "token")
	require.NotContains(t, next[1], "wrong")
}

// TestOwnAuthBearerIsNoCSRFPass: with OwnAuth, an Authorization: Bearer
// header (the mounting service's own, which a browser may send by
// itself) does not exempt a form from its CSRF token; only the dashboard's
// Token does.
func TestOwnAuthBearerIsNoCSRFPass(t *testing.T) {
	b := newBed(t, dashboard.Config{OwnAuth: true})
	pause := "/queues/email/pause"
	status, _, body := b.post(pause, url.Values{}, "Authorization", "Bearer bogus")
	require.Equal(t, http.StatusForbidden, status, body)
	require.Contains(t, body, "CSRF")
	qs, err := b.client.ListQueues(b.ctx)
	require.NoError(t, err)
	require.False(t, qs[0].Paused(), "refused")
	status, _, body = b.post(pause, url.Values{"csrf": {b.csrf()}}, "Authorization", "Bearer bogus")
	require.Equal(t, http.StatusSeeOther, status, "a browser of the service, with the form's CSRF token: %s", body)

	// With a Token too, the Token as a bearer token is a program's pass.
	srv := b.serve(dashboard.Config{OwnAuth: true, Token: token}, false)
	for _, tc := range []struct {
		bearer string
		status int
	}{
		{"bogus", http.StatusForbidden},
		{token + "x", http.StatusForbidden},
		{"", http.StatusForbidden},
		{token, http.StatusSeeOther},
	} {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/queues/email/resume", nil)
		require.NoError(t, err)
		if tc.bearer != "" {
			req.Header.Set("Authorization", "Bearer "+tc.bearer)
		}
		res, _ := b.send(req)
		require.Equal(t, tc.status, res.StatusCode, "Bearer %q", tc.bearer)
	}
	qs, err = b.client.ListQueues(b.ctx)
	require.NoError(t, err)
	require.False(t, qs[0].Paused(), "resumed by the program")
}

// TestCookies: the dashboard's cookies are HttpOnly, SameSite Strict,
// Secure over TLS, and scoped to its mount point: two dashboards on one
// host do not share them.
func TestCookies(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	res, _ := b.getRes("/?token=" + token)
	for _, c := range []*http.Cookie{cookie(res, "hopper_token")} {
		require.NotNil(t, c)
		require.Equal(t, "/", c.Path)
		require.False(t, c.Secure, "plain HTTP")
		require.True(t, c.HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, c.SameSite)
	}

	tls := b.serve(dashboard.Config{Token: token}, true)
	client := tls.Client()
	client.CheckRedirect = b.http.CheckRedirect
	for _, path := range []string{"/?token=" + token, "/"} {
		res, err := client.Get(tls.URL + path)
		require.NoError(t, err)
		res.Body.Close()
		require.NotEmpty(t, res.Cookies(), path)
		for _, c := range res.Cookies() {
			require.True(t, c.Secure, "%s: %s over TLS", path, c.Name)
			require.True(t, c.HttpOnly)
		}
	}

	// Two dashboards under one host, with the same token.
	mux := http.NewServeMux()
	for _, prefix := range []string{"/one", "/two"} {
		d, err := dashboard.New(dashboard.Config{DB: b.pool, Token: token, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		require.NoError(t, err)
		mux.Handle(prefix+"/", http.StripPrefix(prefix, d))
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar, CheckRedirect: b.http.CheckRedirect}
	do := func(method, path string, form url.Values) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		res, err := c.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res, string(body)
	}
	res, _ = do(http.MethodGet, "/one/?token="+token, nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "/one", cookie(res, "hopper_token").Path)
	csrfOf := func(prefix string) string {
		_, body := do(http.MethodGet, prefix+"/", nil)
		m := csrfField.FindStringSubmatch(body)
		require.NotNil(t, m)
		return m[1]
	}
	one, two := csrfOf("/one"), csrfOf("/two")
	require.NotEqual(t, one, two, "a session each")
	res, body := do(http.MethodPost, "/two/queues/email/pause", url.Values{"csrf": {two}})
	require.Equal(t, http.StatusUnauthorized, res.StatusCode, "the token of /one is not sent to /two: %s", body)
	res, body = do(http.MethodPost, "/one/queues/email/pause", url.Values{"csrf": {one}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	require.Equal(t, "../../", res.Header.Get("Location"))
	u, err := url.Parse(srv.URL + "/two/")
	require.NoError(t, err)
	for _, c := range jar.Cookies(u) {
		require.NotEqual(t, "hopper_token", c.Name)
		require.NotEqual(t, "hopper_flash", c.Name, "what /one did is not shown by /two")
	}
}

// TestSecurityHeaders: every response, page or not, forbids framing and
// sniffing, and pages allow only the dashboard's own script, base and
// form targets.
func TestSecurityHeaders(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	check := func(res *http.Response, what string) {
		t.Helper()
		csp := res.Header.Get("Content-Security-Policy")
		for _, d := range []string{"default-src 'self'", "script-src 'self'", "frame-ancestors 'none'", "base-uri 'self'", "form-action 'self'"} {
			require.Contains(t, csp, d, what)
		}
		require.Equal(t, "DENY", res.Header.Get("X-Frame-Options"), what)
		require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"), what)
		require.Equal(t, "same-origin", res.Header.Get("Referrer-Policy"), what)
	}
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/", 200}, {"/overview/live", 200}, {"/jobs", 200}, {"/static/style.css", 200},
		{"/nowhere", 404}, {"/jobs/abc", 400}, {"/?token=" + token, 303}, {"/static", 307},
	} {
		res, _ := b.getRes(tc.path)
		require.Equal(t, tc.status, res.StatusCode, tc.path)
		check(res, tc.path)
	}
	csrf := b.csrf()
	for _, tc := range []struct {
		header []string
		status int
	}{
		{nil, http.StatusSeeOther},
		{[]string{"Origin", "https://evil.example"}, http.StatusForbidden},
	} {
		req, err := http.NewRequest(http.MethodPost, b.srv.URL+"/queues/email/pause", strings.NewReader(url.Values{"csrf": {csrf}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for i := 0; i+1 < len(tc.header); i += 2 {
			req.Header.Set(tc.header[i], tc.header[i+1])
		}
		res, _ := b.send(req)
		require.Equal(t, tc.status, res.StatusCode)
		check(res, fmt.Sprint("POST ", tc.header))
	}
}

// countingDB counts the stats queries run on it.
type countingDB struct {
	jobs.DBTX
	stats atomic.Int64
}

func (c *countingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if strings.HasPrefix(sql, "-- name: Stats ") {
		c.stats.Add(1)
	}
	return c.DBTX.Query(ctx, sql, args...)
}

// TestOverviewReadsStatsOnce: an overview (and its live part) reads the
// stats once, and its totals are what Stats adds up; the charts' samples
// read none (ListQueueDepths, not GetStats).
func TestOverviewReadsStatsOnce(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	_, err := mail.Enqueue(b.ctx, b.pool, Mail{To: "other"}, jobs.Queue("other"))
	require.NoError(t, err)
	db := &countingDB{DBTX: b.pool}
	d, err := dashboard.New(dashboard.Config{DB: db, ReadOnly: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(d)
	defer srv.Close()
	get := func(path string) string {
		t.Helper()
		res, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode, string(body))
		return string(body)
	}
	get("/") // the first takes the charts' first sample too (Run has not run)
	require.Equal(t, int64(1), db.stats.Load(), "the charts' sample reads the queues' depths, not the stats")
	stats, err := b.client.GetStats(b.ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), stats.Total.Ready, "email and other")
	tot := stats.Total
	want := fmt.Sprintf("<tfoot><tr><th>All</th><th>%d</th><th>%d</th><th>%d</th><th>%d</th><th>%d</th><th>%d</th>",
		tot.Ready, tot.Scheduled, tot.Running, tot.Waiting, tot.Dead, tot.Cancelled)
	for _, path := range []string{"/", "/overview/live"} {
		before := db.stats.Load()
		body := get(path)
		require.Equal(t, int64(1), db.stats.Load()-before, "%s reads the stats once", path)
		require.Contains(t, body, want, path)
		require.Contains(t, body, `<tr data-queue="other">`)
	}
}

// TestBehindAPrefixStrippingProxy: a proxy serves the dashboard at
// /admin/hopper/ and strips the prefix: the handler never sees it, and the
// relative base, links and redirects still lead the browser under it.
func TestBehindAPrefixStrippingProxy(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	backend, err := url.Parse(b.srv.URL)
	require.NoError(t, err)
	const prefix = "/admin/hopper"
	proxy := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(backend)
		pr.Out.URL.RawPath = strings.TrimPrefix(pr.In.URL.EscapedPath(), prefix)
		pr.Out.URL.Path, _ = url.PathUnescape(pr.Out.URL.RawPath)
		pr.Out.Host = pr.In.Host
	}})
	defer proxy.Close()
	at := func(page, ref string) string { // where ref on page leads the browser
		t.Helper()
		p, err := url.Parse(proxy.URL + page)
		require.NoError(t, err)
		r, err := url.Parse(ref)
		require.NoError(t, err)
		return p.ResolveReference(r).RequestURI()
	}
	live := prefix + "/jobs/" + strconv.FormatInt(b.live, 10)

	res, err := b.http.Get(proxy.URL + live + "?token=" + token)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, live, at(live, res.Header.Get("Location")), "the token's redirect")

	res, err = b.http.Get(proxy.URL + live)
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	base := regexp.MustCompile(`<base href="([^"]*)">`).FindStringSubmatch(string(body))
	require.NotNil(t, base)
	require.Equal(t, prefix+"/", at(live, base[1]), "the base is the dashboard's root under the prefix")
	require.Equal(t, prefix+"/static/style.css", at(at(live, base[1]), "static/style.css"))

	csrf := csrfField.FindStringSubmatch(string(body))[1]
	page := prefix + "/queues/email/pause"
	req, err := http.NewRequest(http.MethodPost, proxy.URL+page, strings.NewReader(url.Values{"csrf": {csrf}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, body2 := b.send(req)
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body2)
	require.Equal(t, prefix+"/", at(page, res.Header.Get("Location")), "a change's redirect")
	res, err = b.http.Get(proxy.URL + prefix + "/")
	require.NoError(t, err)
	body, err = io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(body), `<p class="flash">Queue email paused.</p>`, "the flash cookie reaches the page under the prefix")
}

// TestFlash: what a change did is shown once, on the page its redirect
// leads to, from a short-lived signed HttpOnly cookie; a crafted ?done= or
// cookie shows nothing.
func TestFlash(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	for _, path := range []string{"/?done=Your+session+expired%3A+log+in+at+evil.example", "/jobs?done=x", "/dead?done=x&queue=email"} {
		require.Equal(t, "", b.flash(path), path)
		_, body := b.get(path)
		require.NotContains(t, body, "evil.example", path)
	}
	u, err := url.Parse(b.srv.URL + "/")
	require.NoError(t, err)
	forged := base64.RawURLEncoding.EncodeToString([]byte("Log in at evil.example"))
	for _, v := range []string{forged, forged + "." + strings.Repeat("0", 64), "x.y"} {
		b.http.Jar.SetCookies(u, []*http.Cookie{{Name: "hopper_flash", Value: v}})
		require.Equal(t, "", b.flash("/"), "a cookie this dashboard did not sign")
	}

	_, _ = b.get("/?token=" + token)
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+"/queues/email/pause", strings.NewReader(url.Values{"csrf": {b.csrf()}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, _ := b.send(req)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "../../", res.Header.Get("Location"), "nothing in the URL")
	c := cookie(res, "hopper_flash")
	require.NotNil(t, c)
	require.True(t, c.HttpOnly)
	require.Positive(t, c.MaxAge)
	require.LessOrEqual(t, c.MaxAge, 60, "short-lived")

	_, live := b.get("/overview/live")
	require.NotContains(t, live, "flash", "the overview's live part neither shows nor takes it")
	require.Equal(t, "Queue email paused.", b.flash("/"))
	require.Equal(t, "", b.flash("/"), "shown once")
}
