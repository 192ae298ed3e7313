package dashboard

import (
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBase: the page base is relative ("./", then "../" per segment below
// the root) and, resolved against the page the browser is on, is the
// dashboard's root: mounted under a prefix, behind a proxy that strips
// one, and never on another host. The cookies' path is the mount prefix
// as far as the handler can tell.
func TestBase(t *testing.T) {
	for _, tc := range []struct {
		browser    string // the page's path in the browser
		requestURI string // what reaches the handler's server
		seen       string // what the handler sees (after StripPrefix)
		want       string // the base
		root       string // the base resolved against the browser's page
		cookiePath string
	}{
		{"/", "/", "/", "./", "/", "/"},
		{"/jobs?state=dead", "/jobs?state=dead", "/jobs", "./", "/", "/"},
		{"/jobs/42", "/jobs/42", "/jobs/42", "../", "/", "/"},
		{"/admin/jobs/jobs/42", "/admin/jobs/jobs/42", "/jobs/42", "../", "/admin/jobs/", "/admin/jobs"},
		{"/admin/jobs/queues/a%2Fb/pause", "/admin/jobs/queues/a%2Fb/pause", "/queues/a%2Fb/pause", "../../", "/admin/jobs/", "/admin/jobs"},
		{"/admin%20ui/jobs", "/admin%20ui/jobs", "/jobs", "./", "/admin%20ui/", "/admin%20ui"},
		// A proxy strips /admin/hopper: the handler never sees it, the
		// relative base still leads the browser there; cookies are for "/".
		{"/admin/hopper/jobs/5", "/jobs/5", "/jobs/5", "../", "/admin/hopper/", "/"},
		{"/admin/hopper/", "/", "/", "./", "/admin/hopper/", "/"},
		// Relative bases cannot leave the host, whatever the path.
		{"//evil.example/jobs", "//evil.example/jobs", "/jobs", "./", "//evil.example/", "/"},
		{`/\evil.example/jobs`, `/\evil.example/jobs`, "/jobs", "./", "/%5Cevil.example/", "/%5Cevil.example"},
		{"/elsewhere", "/elsewhere", "/jobs", "./", "/", "/"},
	} {
		r := httptest.NewRequest("GET", "http://h"+tc.seen, nil)
		r.RequestURI = tc.requestURI
		got := relBase(r)
		require.Equal(t, tc.want, got, tc.browser)
		page, err := url.Parse("http://h" + tc.browser)
		require.NoError(t, err)
		ref, err := url.Parse(got)
		require.NoError(t, err)
		root := page.ResolveReference(ref)
		require.Equal(t, "h", root.Host, "%s: on the same host", tc.browser)
		require.Equal(t, tc.root, root.EscapedPath(), tc.browser)
		require.Equal(t, tc.cookiePath, cookiePath(r), tc.browser)
	}
}
