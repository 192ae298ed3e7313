package dashboard_test

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/dashboard"
)

// TestHostCheckedOnEveryRoute: a request for a Host the dashboard does
// not answer (a DNS-rebinding page's) gets 421 and nothing else on every
// route: pages, JSON-like fragments, static files, the token in the
// query (no cookie is set) and changes (nothing changes, even with the
// token); the same requests for an allowed Host are answered.
func TestHostCheckedOnEveryRoute(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token, AllowedHosts: []string{"dash.example"}})
	live := strconv.FormatInt(b.live, 10)
	do := func(method, path, host string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, b.srv.URL+path, nil)
		require.NoError(t, err)
		req.Host = host
		if method == http.MethodPost {
			req.Header.Set("Authorization", "Bearer "+token) // a program's change: no CSRF token needed
		}
		res, err := http.DefaultTransport.RoundTrip(req)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res, string(body)
	}
	routes := []struct {
		method, path string
		status       int // for an allowed Host
	}{
		{"GET", "/", 200},
		{"GET", "/overview/live", 200},
		{"GET", "/jobs", 200},
		{"GET", "/jobs/" + live, 200},
		{"GET", "/dead", 200},
		{"GET", "/schedules", 200},
		{"GET", "/sequences", 200},
		{"GET", "/static/style.css", 200},
		{"GET", "/static/live.js", 200},
		{"GET", "/nowhere", 404},
		{"HEAD", "/", 200},
		{"GET", "/?token=" + token, 303},
		{"POST", "/queues/email/pause", 303},
	}
	port := strconv.Itoa(b.srv.Listener.Addr().(*net.TCPAddr).Port)
	for _, host := range []string{"evil.example", "evil.example:" + port, "EVIL.example.:" + port} {
		for _, r := range routes {
			res, body := do(r.method, r.path, host)
			require.Equal(t, http.StatusMisdirectedRequest, res.StatusCode, "%s %s for %s", r.method, r.path, host)
			require.Empty(t, res.Cookies(), "%s %s for %s: no cookie", r.method, r.path, host)
			if r.method != "HEAD" {
				require.Contains(t, body, `does not answer for the host name "evil.example"`)
				require.NotContains(t, body, "<script>", "no page, no payload")
			}
		}
	}
	qs, err := b.client.ListQueues(b.ctx)
	require.NoError(t, err)
	for _, q := range qs {
		require.False(t, q.Paused(), "refused changes changed nothing")
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "dash.example", "DASH.example:" + port} {
		for _, r := range routes {
			if r.method == "POST" {
				continue // once is enough: below
			}
			res, _ := do(r.method, r.path, host)
			require.Equal(t, r.status, res.StatusCode, "%s %s for %s", r.method, r.path, host)
		}
	}
	res, _ := do("POST", "/queues/email/pause", "dash.example")
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "a change for an allowed Host")
	_, err = dashboard.New(dashboard.Config{DB: b.pool, Token: token, AllowedHosts: []string{"https://dash.example/"}})
	require.ErrorContains(t, err, `"https://dash.example/" is not a host name`)
}
