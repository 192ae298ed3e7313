package dashboard

import (
	"net/http"
	"strings"
)

// protectReads, with ProtectReads, answers 401 to a request that carries
// no Token, reads included. It runs after takeToken, so a browser opened
// at ?token=… has its cookie by then. The static files stay open: they
// are the same for everyone, and the 401 page itself uses them.
func (d *Dashboard) protectReads(next http.Handler) http.Handler {
	if !d.cfg.ProtectReads {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/static/") || d.carriesToken(r) {
			next.ServeHTTP(w, r)
			return
		}
		d.fail(w, r, http.StatusUnauthorized, "A token is needed to see this dashboard: open it with ?token=… (hopper ui prints the address).")
	})
}

// carriesToken reports whether r carries the Token: as a bearer token (a
// program) or in the cookie takeToken set (a browser). Enough to read; a
// change still needs authorized's checks (CSRF, ReadOnly).
func (d *Dashboard) carriesToken(r *http.Request) bool {
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "Bearer ") && d.tokenOK(h[7:]) {
		return true
	}
	c, err := r.Cookie(tokenCookie)
	return err == nil && d.tokenOK(c.Value)
}
