package dashboard_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/dashboard"
)

// TestProtectReads: with ProtectReads every page and the overview's
// fragment answer 401 without the token (and show nothing of the jobs);
// the static files stay open; the token as ?token= (then its cookie) or
// as a bearer token opens them; a wrong one does not.
func TestProtectReads(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token, ProtectReads: true})
	live := strconv.FormatInt(b.live, 10)
	reads := []string{"/", "/overview/live", "/jobs", "/jobs/" + live, "/dead", "/schedules", "/sequences", "/jobs?kind=mail"}
	for _, path := range reads {
		status, body := b.get(path)
		require.Equal(t, http.StatusUnauthorized, status, path)
		require.Contains(t, body, "A token is needed to see this dashboard", path)
		require.NotContains(t, body, "alert", "%s: no payload", path)
	}
	status, _ := b.get("/static/style.css")
	require.Equal(t, http.StatusOK, status, "static files hold nothing of the queue's")
	status, _ = b.get("/jobs?token=wrong")
	require.Equal(t, http.StatusUnauthorized, status, "a wrong token opens nothing")

	for _, path := range reads {
		req, err := http.NewRequest(http.MethodGet, b.srv.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		res, _ := b.send(req)
		require.Equal(t, http.StatusOK, res.StatusCode, "%s with the bearer token", path)
	}

	res, _ := b.getRes("/?token=" + token)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	for _, path := range reads {
		status, _ := b.get(path)
		require.Equal(t, http.StatusOK, status, "%s with the token's cookie", path)
	}
	status, _, _ = b.post("/queues/email/pause", url.Values{"csrf": {b.csrf()}})
	require.Equal(t, http.StatusSeeOther, status, "changes as before")
}

// TestReadOnlyToken: with ReadOnly, a Token is refused unless
// ProtectReads gives it a use (it would guard nothing); with
// ProtectReads it gates reading, and changes stay refused.
func TestReadOnlyToken(t *testing.T) {
	b := newBed(t, dashboard.Config{ReadOnly: true, ProtectReads: true, Token: token})
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, err := dashboard.New(dashboard.Config{DB: b.pool, ReadOnly: true, Token: token, Logger: logger})
	require.ErrorIs(t, err, dashboard.ErrUnusedToken)
	_, err = dashboard.New(dashboard.Config{DB: b.pool, ProtectReads: true, OwnAuth: true, Logger: logger})
	require.ErrorContains(t, err, "ProtectReads needs a Token")

	status, _ := b.get("/")
	require.Equal(t, http.StatusUnauthorized, status)
	_, _ = b.get("/?token=" + token)
	status, body := b.get("/")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "read-only")
	status, _, body = b.post("/queues/email/pause", url.Values{}, "Authorization", "Bearer "+token)
	require.Equal(t, http.StatusForbidden, status, "read-only, token or not")
	require.Contains(t, body, "read-only")
}
