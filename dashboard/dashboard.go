package dashboard

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// ErrNoAuth is returned by New for a dashboard that could change the queue
// with nobody checking who asks: set Token, ReadOnly, or OwnAuth.
var ErrNoAuth = errors.New("hopper: dashboard: no token and not read-only")

// Config configures a Dashboard.
type Config struct {
	// DB is where Hopper's tables are: a pool (or jobs.InSchema of one).
	DB jobs.DBTX
	// Token is required, once per browser session, for anything that
	// changes state: open the dashboard at ?token=… (it is then kept in a
	// cookie), or send it as "Authorization: Bearer …".
	Token string
	// OwnAuth says the mounting service authenticates every request itself
	// (its own middleware around Handler): no token is asked for.
	OwnAuth bool
	// ReadOnly refuses every change (403), whoever asks.
	ReadOnly bool
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
	client  *hopper.Client
	secret  []byte // signs the CSRF tokens of this process
	samples *sampler
	mux     http.Handler
}

// New returns a dashboard on cfg.DB.
func New(cfg Config) (*Dashboard, error) {
	if cfg.DB == nil {
		return nil, errors.New("hopper: dashboard: nil DB")
	}
	if cfg.Token == "" && !cfg.OwnAuth && !cfg.ReadOnly {
		return nil, ErrNoAuth
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("hopper: dashboard: %w", err)
	}
	d := &Dashboard{cfg: cfg, client: hopper.NewClient(cfg.DB), secret: secret}
	d.samples = newSampler(time.Hour / cfg.SampleEvery)
	d.mux = d.routes()
	return d, nil
}

// Run samples the queues every SampleEvery until ctx ends: the overview's
// charts of depth, claim lag and completions over the last hour.
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
	if s, err := d.client.Stats(ctx); err == nil {
		d.samples.add(s)
	}
}

// ServeHTTP serves the dashboard.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) { d.mux.ServeHTTP(w, r) }

const (
	tokenCookie   = "hopper_token"
	sessionCookie = "hopper_session"
	maxBody       = 64 << 10 // forms are small; anything bigger is refused
)

// session returns the browser's session id, setting one if it has none;
// the CSRF token of its forms is derived from it.
func (d *Dashboard) session(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(sessionCookie); err == nil && len(c.Value) == 32 {
		return c.Value
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	return id
}

// csrf is the token a form of this session must carry.
func (d *Dashboard) csrf(session string) string {
	m := hmac.New(sha256.New, d.secret)
	m.Write([]byte(session))
	return hex.EncodeToString(m.Sum(nil))
}

// rememberToken keeps a token given as ?token= in a cookie, so that the
// page's own forms carry it.
func (d *Dashboard) rememberToken(w http.ResponseWriter, r *http.Request) {
	if t := r.URL.Query().Get("token"); t != "" && d.tokenOK(t) {
		http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: t, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	}
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
	if h := r.Header.Get("Authorization"); len(h) > 7 && h[:7] == "Bearer " {
		if d.tokenOK(h[7:]) || d.cfg.OwnAuth {
			return 0, "" // a program, not a browser: no cookie for another site to ride on
		}
		return http.StatusUnauthorized, "Wrong token."
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
