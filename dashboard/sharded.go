package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/shard"
)

// ShardSet is the sharded Hopper a Sharded dashboard shows: a
// *shard.Set (package shard) is one.
type ShardSet interface {
	// Names are the shards' schema names, in position order.
	Names() []string
	// ShardOfID is the shard holding the job of that id ("" for none).
	ShardOfID(id int64) string
	// ListShardStatus is every shard's node, migration version and job
	// counts.
	ListShardStatus(ctx context.Context) ([]shard.Status, error)
	// CancelJob cancels a job in its shard and tells its worker: a shard's
	// pages cancel through it (on Citus, hopper.Client's cancel of one
	// schema does not run).
	CancelJob(ctx context.Context, id int64) error
}

var _ ShardSet = (*shard.Set)(nil)

// ShardedConfig configures a Sharded dashboard.
type ShardedConfig struct {
	// Config is every shard's dashboard's, and the sharded pages': DB is
	// the Citus coordinator's pool (each shard's dashboard reads and
	// changes its shard through jobs.InSchema of it), Token, OwnAuth,
	// ReadOnly, ProtectReads and AllowedHosts guard every page as they
	// guard one dashboard. ReadDB must be nil.
	Config
	// Set is the sharded Hopper: shard.Open of the coordinator.
	Set ShardSet
}

// Sharded is the dashboard of a sharded Hopper: its own overview of every
// shard (its node, migration version and jobs by state) and a job id
// lookup, and under s/<shard>/ each shard's whole dashboard (New, on the
// shard's schema), with a link back. An http.Handler, mounted like
// Dashboard; Run samples every shard for its charts.
type Sharded struct {
	root   *Dashboard
	set    ShardSet
	shards map[string]*Dashboard
	names  []string
	mux    http.Handler
}

// NewSharded returns the dashboard of the sharded Hopper cfg.Set, on the
// coordinator's pool cfg.DB. Its safety is Dashboard's (see the package
// documentation): the Host check, the Token and its cookie (one for
// every shard's pages), ReadOnly, ProtectReads, the CSRF check of every
// form.
func NewSharded(cfg ShardedConfig) (*Sharded, error) {
	switch {
	case cfg.Set == nil:
		return nil, errors.New("dashboard: sharded: nil Set")
	case cfg.ReadDB != nil:
		return nil, errors.New("dashboard: sharded: ReadDB is for one schema; a sharded dashboard reads the coordinator")
	}
	root, err := New(cfg.Config)
	if err != nil {
		return nil, err
	}
	root.shards = true
	s := &Sharded{root: root, set: cfg.Set, shards: map[string]*Dashboard{}, names: cfg.Set.Names()}
	if len(s.names) == 0 {
		return nil, errors.New("dashboard: sharded: the set has no shard")
	}
	for _, name := range s.names {
		db, err := jobs.InSchema(cfg.DB, name)
		if err != nil {
			return nil, fmt.Errorf("dashboard: shard %s: %w", name, err)
		}
		c := cfg.Config
		c.DB = db
		d, err := New(c)
		if err != nil {
			return nil, fmt.Errorf("dashboard: shard %s: %w", name, err)
		}
		d.shard, d.secret, d.cancel = name, root.secret, cfg.Set.CancelJob
		s.shards[name] = d
	}
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.FileServerFS(files))
	mux.HandleFunc("GET /{$}", s.overview)
	mux.HandleFunc("GET /find", s.find)
	mux.HandleFunc("/s/", s.shard)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		root.fail(w, r, http.StatusNotFound, "No such page.")
	})
	s.mux = root.guard(mux)
	return s, nil
}

// ServeHTTP serves the sharded dashboard.
func (s *Sharded) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Run samples every shard's queues for its dashboard's charts (see
// Dashboard.Run), until ctx ends.
func (s *Sharded) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, d := range s.shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.Run(ctx)
		}()
	}
	wg.Wait()
}

// shardsData is the sharded overview.
type shardsData struct {
	Shards []shard.Status
	Total  hopper.Counts
}

func (s *Sharded) overview(w http.ResponseWriter, r *http.Request) {
	list, err := s.set.ListShardStatus(r.Context())
	if err != nil {
		s.root.failErr(w, r, err)
		return
	}
	data := shardsData{Shards: list}
	for _, st := range list {
		data.Total.Add(st.Counts)
	}
	s.root.render(w, r, http.StatusOK, "shards", "Shards", data)
}

// find sends the browser to the page of the job ?id= names, in its shard.
func (s *Sharded) find(w http.ResponseWriter, r *http.Request) {
	q := strings.TrimSpace(r.URL.Query().Get("id"))
	id, err := parseID(q)
	if err != nil {
		s.root.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	name := s.set.ShardOfID(id)
	if s.shards[name] == nil {
		s.root.fail(w, r, http.StatusNotFound, fmt.Sprintf("No shard holds job %d.", id))
		return
	}
	seeOther(w, fmt.Sprintf("%ss/%s/jobs/%d", relBase(r), url.PathEscape(name), id))
}

// shard serves s/<shard>/… with that shard's dashboard, which sees the
// path below it.
func (s *Sharded) shard(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/s/")
	name, _, below := strings.Cut(rest, "/")
	d := s.shards[name]
	if d == nil {
		s.root.fail(w, r, http.StatusNotFound, "No such shard.")
		return
	}
	if !below { // s/<shard>: its root is s/<shard>/
		seeOther(w, "./"+url.PathEscape(name)+"/")
		return
	}
	http.StripPrefix("/s/"+name, d).ServeHTTP(w, r)
}
