package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/dashboard"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/shard"
)

// plainShards is a dashboard.ShardSet on plain PostgreSQL: two Hopper
// schemas whose ids step by two from their position, so that, as in a
// shard.Set (which needs Citus: tests/citus covers it), id mod 2 names
// the shard.
type plainShards struct {
	pool     *pgxpool.Pool
	names    []string
	clients  []*hopper.Client
	pools    []*pgxpool.Pool
	cancels  atomic.Int64
	statuses atomic.Int64
}

func newPlainShards(t *testing.T, ctx context.Context) *plainShards {
	t.Helper()
	s := &plainShards{}
	for k := range 2 {
		d := testdb.NewEmpty(t)
		require.NoError(t, schema.Up(ctx, d.Pool))
		// As shard.Create prepares a shard: ids k, k+2, … (from 2 for
		// position 0).
		_, err := d.Pool.Exec(ctx, "ALTER TABLE hopper_jobs ALTER COLUMN id SET INCREMENT BY 2 RESTART WITH "+strconv.Itoa(2-k))
		require.NoError(t, err)
		s.pool = d.Pool // any pool of the database: the dashboard scopes it to each shard
		s.names = append(s.names, d.Schema)
		s.clients = append(s.clients, hopper.NewClient(d.Pool))
		s.pools = append(s.pools, d.Pool)
	}
	return s
}

func (s *plainShards) Names() []string { return s.names }

func (s *plainShards) ShardOfID(id int64) string {
	if id < 1 {
		return ""
	}
	return s.names[id%2]
}

func (s *plainShards) ListShardStatus(ctx context.Context) ([]shard.Status, error) {
	s.statuses.Add(1)
	out := make([]shard.Status, len(s.names))
	for k, name := range s.names {
		st, err := s.clients[k].GetStats(ctx)
		if err != nil {
			return nil, err
		}
		out[k] = shard.Status{Shard: name, Position: k, Node: "127.0.0.1:5432", Version: 1, Counts: st.Total}
	}
	return out, nil
}

func (s *plainShards) CancelJob(ctx context.Context, id int64) error {
	s.cancels.Add(1)
	return s.clients[id%2].CancelJob(ctx, id)
}

// shardedBed is a Sharded dashboard on plainShards, served over HTTP,
// with a job in each shard.
type shardedBed struct {
	*bed
	shards *plainShards
	even   int64 // a pending job of shard 0
	odd    int64 // a pending job of shard 1
}

func newShardedBed(t *testing.T, cfg dashboard.Config) *shardedBed {
	t.Helper()
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	s := newPlainShards(t, ctx)
	b := &shardedBed{bed: &bed{t: t, ctx: ctx}, shards: s}
	for k, pool := range s.pools {
		res, err := mail.Enqueue(ctx, pool, Mail{To: fmt.Sprintf("shard-%d", k)})
		require.NoError(t, err)
		require.Equal(t, int64(k), res.ID%2, "the job's id names its shard")
		if k == 0 {
			b.even = res.ID
		} else {
			b.odd = res.ID
		}
	}
	cfg.DB = s.pool
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := dashboard.NewSharded(dashboard.ShardedConfig{Config: cfg, Set: s})
	require.NoError(t, err)
	b.srv = httptest.NewServer(d)
	t.Cleanup(b.srv.Close)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	b.http = &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return b
}

// TestShardedPages: the sharded overview lists every shard with its
// counts and links; a job id is looked up in the shard it names; each
// shard's pages are its own dashboard's, with a way back; bad input gets
// a 4xx page.
func TestShardedPages(t *testing.T) {
	b := newShardedBed(t, dashboard.Config{Token: token})
	a, z := b.shards.names[0], b.shards.names[1]
	status, body := b.get("/")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `<table id="shards">`)
	for _, name := range b.shards.names {
		require.Contains(t, body, `<a href="s/`+name+`/">`+name+`</a>`)
	}
	require.Contains(t, body, `<form method="get" action="find" id="find">`)
	require.NotContains(t, body, `href="jobs"`, "the sharded overview links no one schema's pages")

	status, _, _ = b.post("/find", nil)
	require.Equal(t, http.StatusNotFound, status, "find is a GET")

	res, _ := b.getRes("/find?id=" + strconv.FormatInt(b.odd, 10))
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "./s/"+z+"/jobs/"+strconv.FormatInt(b.odd, 10), res.Header.Get("Location"))
	status, body = b.get("/s/" + z + "/jobs/" + strconv.FormatInt(b.odd, 10))
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "shard-1", "the job, read from its shard")
	require.Contains(t, body, `<span class="badge" id="shard">shard `+z+`</span>`)
	require.Contains(t, body, `<a href="../../" id="all-shards">All shards</a>`)
	require.Contains(t, body, `<base href="../">`, "the base is the shard's root, and All shards two segments above it")

	status, body = b.get("/s/" + a + "/jobs")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `href="jobs/`+strconv.FormatInt(b.even, 10)+`"`)
	require.NotContains(t, body, `href="jobs/`+strconv.FormatInt(b.odd, 10)+`"`, "a shard's list is its own jobs")
	status, body = b.get("/s/" + a + "/jobs/" + strconv.FormatInt(b.odd, 10))
	require.Equal(t, http.StatusNotFound, status, "another shard's job is not in this one: %s", body)

	res, _ = b.getRes("/s/" + a)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "./"+a+"/", res.Header.Get("Location"))
	for _, tc := range []struct {
		path   string
		status int
		want   string
	}{
		{"/s/" + a + "/", 200, `<table id="queues">`},
		{"/s/" + a + "/overview/live", 200, `<table id="queues">`},
		{"/s/" + a + "/static/style.css", 200, "font:"},
		{"/static/style.css", 200, "font:"},
		{"/find?id=abc", 400, "is not a job id"},
		{"/find?id=-4", 400, "is not a job id"},
		{"/find", 400, "is not a job id"},
		{"/s/nope/", 404, "No such shard."},
		{"/jobs", 404, "No such page."},
	} {
		status, body := b.get(tc.path)
		require.Equal(t, tc.status, status, "%s: %s", tc.path, body)
		require.Contains(t, body, tc.want, tc.path)
	}
}

// TestShardedChanges: a change on a shard's page needs the token and the
// form's CSRF token as on one dashboard; a cancel goes through the set
// (on Citus, the shard's own cancel does not run).
func TestShardedChanges(t *testing.T) {
	b := newShardedBed(t, dashboard.Config{Token: token})
	z := b.shards.names[1]
	jobPage := "/s/" + z + "/jobs/" + strconv.FormatInt(b.odd, 10)
	cancelPath := jobPage + "/cancel"
	_, body := b.get(jobPage)
	m := csrfField.FindStringSubmatch(body)
	require.NotNil(t, m)
	status, _, body := b.post(cancelPath, url.Values{"csrf": {m[1]}})
	require.Equal(t, http.StatusUnauthorized, status, "no token yet: %s", body)

	res, _ := b.getRes("/?token=" + token)
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "the token goes to a cookie for every shard's pages")
	status, _, _ = b.post(cancelPath, url.Values{"csrf": {"0123"}})
	require.Equal(t, http.StatusForbidden, status, "a wrong CSRF token")
	_, body = b.get(jobPage)
	m = csrfField.FindStringSubmatch(body)
	require.NotNil(t, m)
	status, loc, body := b.post(cancelPath, url.Values{"csrf": {m[1]}})
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Equal(t, "../../jobs/"+strconv.FormatInt(b.odd, 10), loc)
	require.Equal(t, int64(1), b.shards.cancels.Load(), "cancelled through the set")
	row, err := b.shards.clients[1].GetJob(b.ctx, b.odd)
	require.NoError(t, err)
	require.Equal(t, jobs.StateCancelled, row.State)
	require.Equal(t, fmt.Sprintf("Job %d cancelled.", b.odd), b.flash(jobPage))

	req, err := http.NewRequest(http.MethodGet, b.srv.URL+"/s/"+z+"/", nil)
	require.NoError(t, err)
	req.Host = "evil.example"
	res, _ = b.send(req)
	require.Equal(t, http.StatusMisdirectedRequest, res.StatusCode, "a shard's pages check the Host")
	req.URL.Path = "/"
	res, _ = b.send(req)
	require.Equal(t, http.StatusMisdirectedRequest, res.StatusCode, "so does the overview")
}

// TestShardedSafety: ReadOnly and ProtectReads hold on the sharded pages
// and every shard's.
func TestShardedSafety(t *testing.T) {
	t.Run("ReadOnly", func(t *testing.T) {
		b := newShardedBed(t, dashboard.Config{ReadOnly: true})
		page := "/s/" + b.shards.names[0] + "/jobs/" + strconv.FormatInt(b.even, 10)
		status, body := b.get(page)
		require.Equal(t, http.StatusOK, status, body)
		require.Contains(t, body, `<span class="badge">read-only</span>`)
		status, _, _ = b.post(page+"/cancel", url.Values{"csrf": {"x"}}, "Authorization", "Bearer "+token)
		require.Equal(t, http.StatusForbidden, status)
		require.Zero(t, b.shards.cancels.Load())
	})
	t.Run("ProtectReads", func(t *testing.T) {
		b := newShardedBed(t, dashboard.Config{Token: token, ProtectReads: true})
		for _, path := range []string{"/", "/find?id=1", "/s/" + b.shards.names[0] + "/", "/s/" + b.shards.names[1] + "/jobs"} {
			status, body := b.get(path)
			require.Equal(t, http.StatusUnauthorized, status, "%s: %s", path, body)
		}
		require.Zero(t, b.shards.statuses.Load(), "nothing read without the token")
		res, _ := b.getRes("/?token=" + token)
		require.Equal(t, http.StatusSeeOther, res.StatusCode)
		status, body := b.get("/s/" + b.shards.names[1] + "/jobs")
		require.Equal(t, http.StatusOK, status, body)
	})
	t.Run("Config", func(t *testing.T) {
		t.Parallel()
		_, err := dashboard.NewSharded(dashboard.ShardedConfig{Config: dashboard.Config{Token: token}})
		require.ErrorContains(t, err, "nil Set")
		_, err = dashboard.NewSharded(dashboard.ShardedConfig{Config: dashboard.Config{DB: &pgxpool.Pool{}, ReadOnly: true, Token: token}, Set: &plainShards{names: []string{"a"}}})
		require.ErrorIs(t, err, dashboard.ErrUnusedToken, "New's checks hold")
		_, err = dashboard.NewSharded(dashboard.ShardedConfig{Config: dashboard.Config{DB: &pgxpool.Pool{}, Token: token}, Set: &plainShards{names: []string{"bad\x00name"}}})
		require.ErrorContains(t, err, "shard bad")
	})
}
