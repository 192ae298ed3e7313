package dashboard

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBase: the page base is the mount prefix as the browser sees it, and
// never one that points to another host.
func TestBase(t *testing.T) {
	for _, tc := range []struct{ requestURI, seen, want string }{
		{"/", "/", "/"},
		{"/jobs?state=dead", "/jobs", "/"},
		{"/admin/jobs/jobs/42", "/jobs/42", "/admin/jobs/"},
		{"/admin%20ui/jobs", "/jobs", "/admin%20ui/"},
		{"//evil.example/jobs", "/jobs", "/"},
		{`/\evil.example/jobs`, "/jobs", "/%5Cevil.example/"}, // escaped: a path on this host
		{"/elsewhere", "/jobs", "/"},
	} {
		r := httptest.NewRequest("GET", "http://h"+tc.seen, nil)
		r.RequestURI = tc.requestURI
		require.Equal(t, tc.want, base(r), tc.requestURI)
	}
}
