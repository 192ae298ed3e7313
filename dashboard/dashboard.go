package dashboard

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// Config configures a Dashboard.
type Config struct {
	// DB is where Hopper's tables are: a pool (or jobs.InSchema of one).
	DB jobs.DBTX
	// ReadDB, when set, is where pages and the overview's samples read
	// instead: a standby's pool (scoped like DB), to keep the primary
	// free. Every page then says how stale it is (hopper.ReadLag), and
	// every change still goes to DB: a standby refuses writes.
	ReadDB jobs.DBTX
	// Token is required, once per browser session, for anything that
	// changes state: open the dashboard at ?token=… (it is then kept in a
	// cookie), or send it as "Authorization: Bearer …".
	Token string
	// OwnAuth says the mounting service authenticates every request itself
	// (its own middleware around Handler): no token is asked for. Forms
	// still need their CSRF token; an "Authorization: Bearer" header
	// (which may be the service's own) exempts a request from it only when
	// it carries Token.
	OwnAuth bool
	// ReadOnly refuses every change (403), whoever asks.
	ReadOnly bool
	// ProtectReads makes reads need the Token too, like changes: every
	// page and the overview's fragment (not the static files, which hold
	// nothing of the queue's) answer 401 without it. For a dashboard that
	// others can reach. It needs a Token; with ReadOnly, the Token then
	// gates reading only.
	ProtectReads bool
	// AllowedHosts are the host names (without a port) the dashboard
	// answers besides localhost and IP addresses, which it always answers:
	// a request for any other Host gets 421 Misdirected Request, whatever
	// its path, so that a page that makes its own name resolve to the
	// dashboard's address (DNS rebinding) cannot read it. A service that
	// serves the dashboard under a name lists it here; "*" answers every
	// Host (for a service that checks Host itself).
	AllowedHosts []string
	// SampleEvery is how often Run samples the queues for the overview's
	// charts, which keep the last hour. Default 10s.
	SampleEvery time.Duration
	// Logger logs requests that fail on the server's side. Default
	// slog.Default().
	Logger *slog.Logger
}

// Dashboard is the web dashboard: an http.Handler. Mount it under a prefix
// with http.StripPrefix; its links are relative. Run samples the queues
// for the charts.
type Dashboard struct {
	cfg     Config
	hosts   hostRule
	client  *hopper.Client // changes, on DB
	reads   *hopper.Client // reads, on ReadDB (else DB)
	secret  []byte         // signs the CSRF tokens of this process
	samples *sampler
	mux     http.Handler
	// cancel cancels a job: client.CancelJob, or on a shard the
	// ShardSet's (NewSharded).
	cancel func(ctx context.Context, id int64) error
	shard  string // the shard it shows, under NewSharded
	shards bool   // the sharded dashboard's own pages (NewSharded)
}

// New returns a dashboard on cfg.DB.
func New(cfg Config) (*Dashboard, error) {
	if cfg.DB == nil {
		return nil, errors.New("dashboard: nil DB")
	}
	if cfg.Token == "" && !cfg.OwnAuth && !cfg.ReadOnly {
		return nil, ErrNoAuth
	}
	if cfg.ProtectReads && cfg.Token == "" {
		return nil, errors.New("dashboard: ProtectReads needs a Token")
	}
	if cfg.ReadOnly && cfg.Token != "" && !cfg.ProtectReads {
		return nil, ErrUnusedToken
	}
	hosts, err := newHostRule(cfg.AllowedHosts)
	if err != nil {
		return nil, err
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	d := &Dashboard{cfg: cfg, hosts: hosts, client: hopper.NewClient(cfg.DB), reads: hopper.NewClient(cfg.DB), secret: secret}
	if cfg.ReadDB != nil {
		d.reads = hopper.NewClient(cfg.ReadDB)
	}
	d.cancel = d.client.CancelJob
	d.samples = newSampler(time.Hour / cfg.SampleEvery)
	d.mux = d.routes()
	return d, nil
}

// readLag says how stale r's page is when the dashboard reads a standby
// (Config.ReadDB), or "" when it reads DB. A page that cannot tell says
// so rather than fail.
func (d *Dashboard) readLag(r *http.Request) string {
	if d.cfg.ReadDB == nil {
		return ""
	}
	lag, err := d.reads.GetReadLag(r.Context())
	if err != nil {
		return "read from a standby, lag unknown"
	}
	return lag.String()
}

// Run samples the queues every SampleEvery until ctx ends: the overview's
// charts of depth, claim lag and completions over the last hour. A sample
// reads each queue's depth from bounded index ranges
// (hopper.Client.ListQueueDepths, each count up to
// hopper.DefaultDepthLimit), not the whole tables: its cost does not grow
// with the number of jobs.
func (d *Dashboard) Run(ctx context.Context) {
	t := time.NewTicker(d.cfg.SampleEvery)
	defer t.Stop()
	for {
		d.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (d *Dashboard) sample(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// Not GetStats, which reads the tables whole: the queues' depths, each
	// count bounded, and the table's activity from PostgreSQL's statistics,
	// read from DB: a standby's statistics do not count the primary's
	// writes.
	depths, err := d.reads.ListQueueDepths(ctx, sampleDepthLimit)
	if err != nil {
		return
	}
	activity, err := d.client.GetActivity(ctx)
	if err != nil {
		return
	}
	d.samples.add(sampleOf(time.Now(), depths, activity.Finished))
}

// ServeHTTP serves the dashboard.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) { d.mux.ServeHTTP(w, r) }

const (
	tokenCookie   = "hopper_token"
	sessionCookie = "hopper_session"
	flashCookie   = "hopper_flash"
	flashMaxAge   = 60       // seconds: the flash is for the page the redirect leads to
	maxBody       = 64 << 10 // forms are small; anything bigger is refused
)

// setCookie sets one of the dashboard's cookies: HttpOnly, SameSite
// Strict, Secure over TLS, and scoped to the dashboard's mount point, so
// that two dashboards on one host keep theirs apart. maxAge < 0 deletes
// it; 0 makes a session cookie.
func setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: cookiePath(r), MaxAge: maxAge,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

// session returns the browser's session id, setting one if it has none;
// the CSRF token of its forms is derived from it.
func (d *Dashboard) session(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(sessionCookie); err == nil && len(c.Value) == 32 {
		return c.Value
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	setCookie(w, r, sessionCookie, id, 0)
	return id
}

// csrf is the token a form of this session must carry.
func (d *Dashboard) csrf(session string) string {
	m := hmac.New(sha256.New, d.secret)
	m.Write([]byte(session))
	return hex.EncodeToString(m.Sum(nil))
}

// flashMAC signs a flash cookie's value. The "flash" prefix and its NUL
// keep it apart from a CSRF token (a session id is 32 hex digits).
func (d *Dashboard) flashMAC(value string) string {
	m := hmac.New(sha256.New, d.secret)
	m.Write([]byte("flash\x00" + value))
	return hex.EncodeToString(m.Sum(nil))
}

// setFlash keeps what a change did for the page its redirect leads to, in
// a short-lived cookie signed by this process: never in the URL, where
// anyone could write a link that makes the dashboard say anything.
func (d *Dashboard) setFlash(w http.ResponseWriter, r *http.Request, msg string) {
	v := base64.RawURLEncoding.EncodeToString([]byte(msg))
	setCookie(w, r, flashCookie, v+"."+d.flashMAC(v), flashMaxAge)
}

// takeFlash returns the flash a change left, once: the cookie is cleared.
// One this process did not sign shows nothing.
func (d *Dashboard) takeFlash(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return ""
	}
	setCookie(w, r, flashCookie, "", -1)
	v, mac, ok := strings.Cut(c.Value, ".")
	if !ok || !hmac.Equal([]byte(mac), []byte(d.flashMAC(v))) {
		return ""
	}
	msg, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || !utf8.Valid(msg) {
		return ""
	}
	return string(msg)
}

// takeToken keeps a token given as ?token= in a cookie, so that the
// page's own forms carry it, and sends the browser to the same page
// without it: the token leaves the address bar, the history and what the
// page's links carry.
func (d *Dashboard) takeToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		if t := r.URL.Query().Get("token"); t == "" || !d.tokenOK(t) {
			next.ServeHTTP(w, r)
			return
		}
		setCookie(w, r, tokenCookie, d.cfg.Token, 0)
		loc := "./" + lastSegment(r.URL.EscapedPath())
		if q := withoutToken(r.URL.RawQuery); q != "" {
			loc += "?" + q
		}
		seeOther(w, loc)
	})
}

// lastSegment is the last segment of an escaped path: relative to the
// page's own directory, it names the page ("" for a directory).
func lastSegment(escapedPath string) string {
	return escapedPath[strings.LastIndex(escapedPath, "/")+1:]
}

// withoutToken is a raw query without its token parameters, the others
// kept as they were written.
func withoutToken(rawQuery string) string {
	var kept []string
	for _, kv := range strings.Split(rawQuery, "&") {
		k, _, _ := strings.Cut(kv, "=")
		if kv == "" {
			continue
		}
		if k, err := url.QueryUnescape(k); err == nil && k == "token" {
			continue
		}
		kept = append(kept, kv)
	}
	return strings.Join(kept, "&")
}

// seeOther answers with a 303 to location, written as given: unlike
// http.Redirect, a relative location stays relative, so that it holds
// behind a proxy that strips a prefix.
func seeOther(w http.ResponseWriter, location string) {
	w.Header().Set("Location", location)
	w.WriteHeader(http.StatusSeeOther)
}

func (d *Dashboard) tokenOK(t string) bool {
	return d.cfg.Token != "" && subtle.ConstantTimeCompare([]byte(t), []byte(d.cfg.Token)) == 1
}

// authorized reports whether r may change state, or why not (an HTTP
// status and a message).
func (d *Dashboard) authorized(r *http.Request) (int, string) {
	if d.cfg.ReadOnly {
		return http.StatusForbidden, "This dashboard is read-only."
	}
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "Bearer ") {
		if d.tokenOK(h[7:]) {
			return 0, "" // a program, not a browser: no cookie for another site to ride on
		}
		if !d.cfg.OwnAuth {
			return http.StatusUnauthorized, "Wrong token."
		}
		// With OwnAuth the header may be the mounting service's own, which a
		// browser can send by itself: it proves nothing here, and the
		// form's CSRF token is still needed.
	}
	if !d.cfg.OwnAuth {
		given := ""
		if c, err := r.Cookie(tokenCookie); err == nil {
			given = c.Value
		}
		if !d.tokenOK(given) {
			return http.StatusUnauthorized, "A token is needed to change anything: open the dashboard with ?token=… (hopper ui prints the address)."
		}
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil || !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(d.csrf(c.Value))) {
		return http.StatusForbidden, "This form is out of date or did not come from this dashboard (CSRF check): reload the page and try again."
	}
	return 0, ""
}
