package dashboard

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/buildinfo"
	"github.com/hopperq/hopper/jobs"
)

//go:embed templates/*.html static/*
var files embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"stamp": func(t time.Time) string { return t.Local().Format(time.DateTime) },
	"stampp": func(t *time.Time) string {
		if t == nil {
			return "—"
		}
		return t.Local().Format(time.DateTime)
	},
	"since": func(d time.Duration) string { return d.Round(time.Second).String() },
	// attempts is a job's attempts as they count against its limit,
	// "charged/allowed" (claims given back uncharged left out).
	"attempts": func(r jobs.Row) string {
		charged, allowed := r.Attempts()
		return fmt.Sprintf("%d/%d", charged, allowed)
	},
	"ago": ago,
	// pathesc makes a name one path segment: a queue "a/b" is
	// queues/a%2Fb/pause, and "a%2Fb" is queues/a%252Fb/pause.
	"pathesc": url.PathEscape,
}).ParseFS(files, "templates/*.html"))

// page is what every page's template gets.
type page struct {
	Base     string // the dashboard's root relative to this page, for <base>
	Title    string
	CSRF     string
	ReadOnly bool
	Flash    string
	// Lag, with Config.ReadDB, says how stale the page's reads are.
	Lag string
	// Shard names the shard of a sharded Hopper this dashboard shows
	// (NewSharded); Shards is set on the sharded dashboard's own pages.
	Shard  string
	Shards bool
	Data   any
	// Build is the dashboard process's own build, in every page's footer:
	// the dashboard a person looks at is one more build to tell apart
	// during a rollout.
	Build buildinfo.Build
}

func (d *Dashboard) routes() http.Handler {
	mux := http.NewServeMux()
	static := http.FileServerFS(files)
	mux.Handle("GET /static/", static)
	mux.HandleFunc("GET /{$}", d.overview)
	mux.HandleFunc("GET /overview/live", d.overviewLive)
	mux.HandleFunc("GET /jobs", d.jobsList)
	mux.HandleFunc("GET /jobs/{id}", d.jobDetail)
	mux.HandleFunc("POST /jobs/{id}/cancel", d.change(d.cancelJob))
	mux.HandleFunc("POST /jobs/{id}/edit", d.change(d.editJob))
	mux.HandleFunc("POST /jobs/{id}/run-now", d.change(d.runJobNow))
	mux.HandleFunc("POST /jobs/{id}/delete", d.change(d.deleteJob))
	mux.HandleFunc("POST /jobs/{id}/wake", d.change(d.wakeJob))
	mux.HandleFunc("GET /dead", d.deadList)
	mux.HandleFunc("POST /dead/retry", d.change(d.retryDead))
	mux.HandleFunc("POST /dead/purge", d.change(d.purgeDead))
	mux.HandleFunc("POST /queues/{name}/{action}", d.change(d.queueAction))
	mux.HandleFunc("GET /schedules", d.schedulesList)
	mux.HandleFunc("POST /schedules/{name}/{action}", d.change(d.scheduleAction))
	mux.HandleFunc("GET /workers", d.workersList)
	mux.HandleFunc("GET /workers/{id}/release", d.workerRelease)
	mux.HandleFunc("POST /workers/{id}/release", d.change(d.releaseWorker))
	mux.HandleFunc("GET /sequences", d.sequencesList)
	mux.HandleFunc("GET /sequences/{key}/skip", d.sequenceSkip)
	mux.HandleFunc("POST /sequences/{key}/retry", d.change(d.retrySequence))
	mux.HandleFunc("POST /sequences/{key}/skip", d.change(d.skipSequence))
	mux.HandleFunc("GET /workflows", d.workflowsPage)
	mux.HandleFunc("POST /workflows/cancel", d.change(d.cancelWorkflow))
	mux.HandleFunc("POST /workflows/retry", d.change(d.retryWorkflow))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		d.fail(w, r, http.StatusNotFound, "No such page.")
	})
	return d.guard(mux)
}

// guard wraps the dashboard's routes in its safety checks.
func (d *Dashboard) guard(mux http.Handler) http.Handler {
	// The Host is checked first, on every route (static files and JSON
	// included). Cross-origin state-changing requests are refused by the
	// standard library's check (Sec-Fetch-Site / Origin), before the
	// form's own CSRF token is looked at.
	return d.recovering(secure(d.checkHost(relativeRedirects(http.NewCrossOriginProtection().Handler(d.takeToken(d.protectReads(mux)))))))
}

// csp allows the dashboard's own styles, script and images only, in no
// frame (no clickjacking), with no <base> and no form pointing elsewhere.
const csp = "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; " +
	"frame-ancestors 'none'; base-uri 'self'; form-action 'self'"

// secure sets the security headers of every response.
func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// relativeRedirects makes the redirects of the mux (a path cleaned, a
// slash added) relative, like the dashboard's own: the absolute path the
// mux writes is the one it saw, without the prefix the dashboard is
// mounted under. Mounted with http.StripPrefix("/p", …), a request for
// "/p" itself is sent to "/p/".
func relativeRedirects(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "" {
			loc := "./"
			if u, err := url.ParseRequestURI(r.RequestURI); err == nil {
				if seg := lastSegment(u.EscapedPath()); seg != "" && seg != "." && seg != ".." {
					loc += seg + "/"
				}
			}
			if r.URL.RawQuery != "" {
				loc += "?" + r.URL.RawQuery
			}
			w.Header().Set("Location", loc)
			w.WriteHeader(http.StatusTemporaryRedirect)
			return
		}
		next.ServeHTTP(relativeWriter{w, r}, r)
	})
}

type relativeWriter struct {
	http.ResponseWriter
	r *http.Request
}

func (w relativeWriter) WriteHeader(code int) {
	h := w.Header()
	if loc := h.Get("Location"); code/100 == 3 && strings.HasPrefix(loc, "/") && !strings.HasPrefix(loc, "//") {
		h.Set("Location", relBase(w.r)+loc[1:])
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w relativeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// recovering turns a panic into a plain 500 page; the stack goes to the
// log, never to the browser.
func (d *Dashboard) recovering(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				d.cfg.Logger.Error("dashboard: panic", "path", r.URL.Path, "panic", v)
				d.fail(w, r, http.StatusInternalServerError, "Something went wrong on the server; it is in the log.")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// relBase is the dashboard's root relative to the page r asks for: "./"
// at the root's level, then "../" for each path segment below it (counted
// in the escaped path, as the browser counts them: a queue "a/b" is one
// segment). Relative, it holds behind a proxy that strips a prefix the
// handler never sees, and it cannot point to another host.
func relBase(r *http.Request) string {
	if n := strings.Count(r.URL.EscapedPath(), "/") - 1; n > 0 {
		return strings.Repeat("../", n)
	}
	return "./"
}

// cookiePath is the path the dashboard is mounted under, as far as this
// handler can tell (the request's path without the part it saw): its
// cookies' Path. Behind a proxy that strips a prefix it is "/".
func cookiePath(r *http.Request) string {
	u, err := url.ParseRequestURI(r.RequestURI)
	if err != nil {
		return "/"
	}
	full, seen := u.EscapedPath(), r.URL.EscapedPath()
	if !strings.HasSuffix(full, seen) {
		return "/"
	}
	prefix := strings.TrimSuffix(full, seen)
	if prefix == "" || strings.HasPrefix(prefix, "//") || strings.Contains(prefix, "\\") {
		return "/"
	}
	return prefix
}

func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) {
	p := page{Base: relBase(r), Title: title, CSRF: d.csrf(d.session(w, r)), ReadOnly: d.cfg.ReadOnly, Lag: d.readLag(r), Data: data,
		Build: buildinfo.Read(), Shard: d.shard, Shards: d.shards}
	if r.Method == http.MethodGet && name != "overview-live" { // a page the browser shows, not a part of one
		p.Flash = d.takeFlash(w, r)
	}
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, name, p); err != nil {
		d.cfg.Logger.Error("dashboard: render", "page", name, "error", err)
		http.Error(w, "render failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail renders an error page: a status and one sentence, never a stack.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	d.render(w, r, status, "error", http.StatusText(status), struct {
		Status int
		Text   string
	}{status, msg})
}

// failErr maps an operations error to a page.
func (d *Dashboard) failErr(w http.ResponseWriter, r *http.Request, err error) {
	var pe *pageError
	switch {
	case errors.As(err, &pe):
		d.fail(w, r, pe.status, pe.msg)
	case errors.Is(err, hopper.ErrNotFound), errors.Is(err, hopper.ErrUnknownQueue), errors.Is(err, hopper.ErrUnknownSchedule),
		errors.Is(err, hopper.ErrUnknownWorker):
		d.fail(w, r, http.StatusNotFound, firstLine(err))
	case errors.Is(err, hopper.ErrInvalidCursor), errors.Is(err, hopper.ErrInvalidFilter), errors.Is(err, jobs.ErrInvalidState),
		errors.Is(err, jobs.ErrInvalidQueue), errors.Is(err, jobs.ErrInvalidPriority), errors.Is(err, jobs.ErrInvalidMaxAttempts),
		errors.Is(err, jobs.ErrInvalidRunAt), errors.Is(err, jobs.ErrMarshal), errors.Is(err, jobs.ErrPayloadTooLarge),
		errors.Is(err, hopper.ErrPayloadMismatch):
		d.fail(w, r, http.StatusBadRequest, firstLine(err))
	case errors.Is(err, hopper.ErrFinished), errors.Is(err, hopper.ErrWorkerAlive), errors.Is(err, hopper.ErrRunning),
		errors.Is(err, hopper.ErrNotWaiting), errors.Is(err, hopper.ErrHasRecords):
		d.fail(w, r, http.StatusConflict, firstLine(err))
	case r.Context().Err() != nil:
		d.fail(w, r, http.StatusServiceUnavailable, "The request was cancelled.")
	default:
		d.cfg.Logger.Error("dashboard: request failed", "path", r.URL.Path, "error", err)
		d.fail(w, r, http.StatusInternalServerError, "The database did not answer as expected; the error is in the log.")
	}
}

func firstLine(err error) string { return strings.SplitN(err.Error(), "\n", 2)[0] }

// change wraps a state-changing handler: a bounded body, the token, the
// CSRF token, then a redirect (relative: to, from the dashboard's root)
// and what was done in a flash cookie for the page it leads to.
func (d *Dashboard) change(fn func(r *http.Request) (redirect, done string, err error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		if err := r.ParseForm(); err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				d.fail(w, r, http.StatusRequestEntityTooLarge, "The request is too large.")
				return
			}
			d.fail(w, r, http.StatusBadRequest, "The form could not be read.")
			return
		}
		if status, msg := d.authorized(r); status != 0 {
			d.fail(w, r, status, msg)
			return
		}
		to, done, err := fn(r)
		if err != nil {
			d.failErr(w, r, err)
			return
		}
		d.setFlash(w, r, done)
		seeOther(w, relBase(r)+to)
	}
}

// overviewData is the overview: queues and charts.
type overviewData struct {
	Queues    []hopper.QueueInfo
	Total     hopper.Counts
	Charts    []chart
	Schedules int
	At        time.Time
}

// overviewData reads the queues (and with them the stats, once) and adds
// them up: Stats' totals are the sum of the same rows.
func (d *Dashboard) overviewData(r *http.Request) (overviewData, error) {
	qs, err := d.reads.ListQueues(r.Context())
	if err != nil {
		return overviewData{}, err
	}
	at := time.Now()
	var total hopper.Counts
	for _, q := range qs {
		total.Add(q.Counts)
	}
	if len(d.samples.all()) == 0 {
		d.sample(r.Context()) // a first point before Run's first tick (the charts need the finished count too)
	}
	scheds, err := d.reads.ListSchedules(r.Context())
	if err != nil {
		return overviewData{}, err
	}
	return overviewData{Queues: qs, Total: total, Charts: charts(d.samples.all()), Schedules: len(scheds), At: at}, nil
}

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request) {
	data, err := d.overviewData(r)
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "overview", "Overview", data)
}

// overviewLive is the overview's live part, fetched by the page's script
// every few seconds: no reload, nothing else on the page is touched.
func (d *Dashboard) overviewLive(w http.ResponseWriter, r *http.Request) {
	data, err := d.overviewData(r)
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "overview-live", "", data)
}

// listData is a page of jobs with its filters.
type listData struct {
	Queue, Kind, State, Age string
	States                  []jobs.State
	Jobs                    []jobs.Row
	Next                    template.URL // the next page, "" on the last one
}

func (d *Dashboard) jobsList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	data := listData{Queue: q.Get("queue"), Kind: q.Get("kind"), State: q.Get("state"), Age: q.Get("age"), States: jobs.States()}
	p := hopper.ListParams{Queue: data.Queue, Kind: data.Kind, After: q.Get("after"), Limit: 50}
	if data.State != "" {
		s, err := jobs.ParseState(data.State)
		if err != nil {
			d.fail(w, r, http.StatusBadRequest, firstLine(err))
			return
		}
		p.States = []jobs.State{s}
	}
	if data.Age != "" {
		age, err := time.ParseDuration(data.Age)
		if err != nil || age <= 0 {
			d.fail(w, r, http.StatusBadRequest, fmt.Sprintf("age %q is not a duration like 15m or 24h", data.Age))
			return
		}
		p.CreatedFrom = time.Now().Add(-age)
	}
	d.listPage(w, r, p, &data, "jobs", "Jobs")
}

func (d *Dashboard) deadList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	data := listData{Queue: q.Get("queue"), Kind: q.Get("kind")}
	p := hopper.ListParams{Queue: data.Queue, Kind: data.Kind, After: q.Get("after"), Limit: 50,
		States: []jobs.State{jobs.StateDead, jobs.StateCancelled}}
	d.listPage(w, r, p, &data, "dead", "Dead jobs")
}

func (d *Dashboard) listPage(w http.ResponseWriter, r *http.Request, p hopper.ListParams, data *listData, name, title string) {
	page, err := d.reads.ListJobs(r.Context(), p)
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	data.Jobs = page.Jobs
	if page.Next != "" {
		q := r.URL.Query()
		q.Set("after", page.Next)
		q.Del("done")  // a flash of old links, never shown again
		q.Del("token") // a link carries no secret
		// Built here from escaped parts: a template would escape the
		// query's own = and & again.
		data.Next = template.URL(name + "?" + q.Encode())
	}
	d.render(w, r, http.StatusOK, name, title, data)
}

// detailData is one job in full.
type detailData struct {
	Job     jobs.Row
	Payload string // pretty-printed, or "encrypted (key ID)"
	Result  string
	// Encrypted: the payload is (jobs.Encrypted), so the page offers no
	// payload edit: it has no key.
	Encrypted bool
	Meta      []metaPair
	Live      bool
	// Editable: pending, scheduled or waiting, so the page offers the
	// edit, run now (not to a waiting job, which keeps waiting) and delete
	// forms.
	Editable bool
	// Sequence is the job's sequence key ("" for none); BlocksSequence:
	// the job, dead or cancelled, holds its sequence's jobs back.
	Sequence       string
	BlocksSequence bool
	// Workflow and Step name the workflow the job is a step of ("" for
	// none), and its step's name.
	Workflow, Step string
	// Wait is the durable wait the job is in (a sleep or an event; zero
	// for none), which the page offers to end; Steps are the records its
	// durable handler left, and Progress its last progress (JSON, "" for
	// none), set at ProgressAt.
	Wait       hopper.Suspension
	Steps      []stepView
	Progress   string
	ProgressAt time.Time
}

type metaPair struct{ Key, Value string }

func parseID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("%q is not a job id (a positive number)", s)
	}
	return id, nil
}

func (d *Dashboard) jobDetail(w http.ResponseWriter, r *http.Request) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		d.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	job, err := d.reads.GetJob(r.Context(), id)
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	_, encrypted := jobs.EncryptedWith(job.Payload)
	data := detailData{Job: job, Payload: pretty(job.Payload), Result: pretty(job.Result), Encrypted: encrypted,
		Live:     job.State.Live(),
		Editable: job.State == jobs.StatePending || job.State == jobs.StateScheduled || job.State == jobs.StateWaiting}
	for k, v := range job.Meta {
		data.Meta = append(data.Meta, metaPair{k, v})
	}
	data.Sequence = job.Meta[jobs.MetaSequence]
	data.Workflow, data.Step = job.Meta[jobs.MetaWorkflow], job.Meta[jobs.MetaStep]
	if data.Sequence != "" && (job.State == jobs.StateDead || job.State == jobs.StateCancelled) {
		info, err := d.reads.GetSequence(r.Context(), data.Sequence)
		if err != nil {
			d.failErr(w, r, err)
			return
		}
		data.BlocksSequence = info.Blocked != nil && info.Blocked.JobID == job.ID
	}
	if err := d.durableData(r, job, &data); err != nil {
		d.failErr(w, r, err)
		return
	}
	sort.Slice(data.Meta, func(i, j int) bool { return data.Meta[i].Key < data.Meta[j].Key })
	d.render(w, r, http.StatusOK, "job", fmt.Sprintf("Job %d", id), data)
}

// shown is a stored JSON value as it is, or, encrypted (jobs.Encrypted),
// named so with its key: the dashboard has no key, and base64 tells a
// reader nothing.
func shown(raw json.RawMessage) string {
	if key, ok := jobs.EncryptedWith(raw); ok {
		return "encrypted (key " + key + ")"
	}
	return string(raw)
}

func pretty(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	if _, ok := jobs.EncryptedWith(raw); ok {
		return shown(raw)
	}
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}

func (d *Dashboard) cancelJob(r *http.Request) (string, string, error) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", hopper.ErrInvalidFilter, err)
	}
	if err := d.cancel(r.Context(), id); err != nil {
		return "", "", err
	}
	return fmt.Sprintf("jobs/%d", id), fmt.Sprintf("Job %d cancelled.", id), nil
}

// editJob changes a job that has not started from the job page's edit
// form: each field left empty keeps what the job has.
func (d *Dashboard) editJob(r *http.Request) (string, string, error) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", hopper.ErrInvalidFilter, err)
	}
	var u hopper.JobUpdate
	var changed []string
	number := func(field, what string) (*int, error) {
		v := strings.TrimSpace(r.PostFormValue(field))
		if v == "" {
			return nil, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %q is not a whole number", hopper.ErrInvalidFilter, what, v)
		}
		changed = append(changed, what)
		return &n, nil
	}
	if u.Priority, err = number("priority", "priority"); err != nil {
		return "", "", err
	}
	if u.MaxAttempts, err = number("max_attempts", "max attempts"); err != nil {
		return "", "", err
	}
	if q := r.PostFormValue("queue"); q != "" {
		u.Queue = &q
		changed = append(changed, "queue")
	}
	if at := strings.TrimSpace(r.PostFormValue("run_at")); at != "" {
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return "", "", fmt.Errorf("%w: run at %q is not a time like 2026-11-22T15:04:05Z (RFC 3339)", jobs.ErrInvalidRunAt, at)
		}
		u.RunAt = &t
		changed = append(changed, "run time")
	}
	if p := strings.TrimSpace(r.PostFormValue("payload")); p != "" {
		u.Payload = hopper.RawPayload(json.RawMessage(p), 0)
		changed = append(changed, "payload")
	}
	if len(changed) == 0 {
		return "", "", fmt.Errorf("%w: the form changes nothing: fill in what to change", hopper.ErrInvalidFilter)
	}
	if _, err := d.client.UpdateJob(r.Context(), id, u); err != nil {
		return "", "", err
	}
	return fmt.Sprintf("jobs/%d", id), fmt.Sprintf("Job %d updated: %s.", id, strings.Join(changed, ", ")), nil
}

// runJobNow makes a job that has not started ready now.
func (d *Dashboard) runJobNow(r *http.Request) (string, string, error) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", hopper.ErrInvalidFilter, err)
	}
	if _, err := d.client.UpdateJob(r.Context(), id, hopper.JobUpdate{RunNow: true}); err != nil {
		return "", "", err
	}
	return fmt.Sprintf("jobs/%d", id), fmt.Sprintf("Job %d is ready to run now.", id), nil
}

// deleteJob deletes a job that has not started, for good; the browser is
// sent to the list of jobs, since the job's page is gone.
func (d *Dashboard) deleteJob(r *http.Request) (string, string, error) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", hopper.ErrInvalidFilter, err)
	}
	row, err := d.client.DeleteJob(r.Context(), id)
	if err != nil {
		return "", "", err
	}
	return "jobs", fmt.Sprintf("Job %d (%s, kind %s, queue %s) deleted.", id, row.State, row.Kind, row.Queue), nil
}

// deadFilter reads the dead-job form: the ids ticked, or a kind.
func deadFilter(r *http.Request) (hopper.DeadFilter, string, error) {
	f := hopper.DeadFilter{States: []jobs.State{jobs.StateDead, jobs.StateCancelled}}
	for _, s := range r.PostForm["id"] {
		id, err := parseID(s)
		if err != nil {
			return f, "", fmt.Errorf("%w: %v", hopper.ErrInvalidFilter, err)
		}
		f.IDs = append(f.IDs, id)
	}
	f.Kind = r.PostFormValue("kind")
	switch {
	case len(f.IDs) > 0:
		return f, fmt.Sprintf("%d selected job(s)", len(f.IDs)), nil
	case f.Kind != "":
		return f, "the dead jobs of kind " + f.Kind, nil
	}
	return f, "", fmt.Errorf("%w: tick some jobs, or name a kind", hopper.ErrInvalidFilter)
}

func (d *Dashboard) retryDead(r *http.Request) (string, string, error) {
	f, what, err := deadFilter(r)
	if err != nil {
		return "", "", err
	}
	res, err := d.client.RetryDeadJobs(r.Context(), f)
	if err != nil {
		return "", "", err
	}
	done := fmt.Sprintf("Retried %d of %s.", len(res.Retried), what)
	if len(res.Kept) > 0 {
		done += fmt.Sprintf(" %d kept dead: a live job holds their unique key.", len(res.Kept))
	}
	return "dead", done, nil
}

func (d *Dashboard) purgeDead(r *http.Request) (string, string, error) {
	f, what, err := deadFilter(r)
	if err != nil {
		return "", "", err
	}
	n, err := d.client.PurgeDeadJobs(r.Context(), f)
	if err != nil {
		return "", "", err
	}
	return "dead", fmt.Sprintf("Purged %d of %s.", n, what), nil
}

func (d *Dashboard) queueAction(r *http.Request) (string, string, error) {
	name := r.PathValue("name")
	switch r.PathValue("action") {
	case "pause":
		if _, err := d.client.PauseQueue(r.Context(), name); err != nil {
			return "", "", err
		}
		return "", "Queue " + name + " paused.", nil
	case "resume":
		if _, err := d.client.ResumeQueue(r.Context(), name); err != nil {
			return "", "", err
		}
		return "", "Queue " + name + " resumed.", nil
	}
	return "", "", fmt.Errorf("%w: no such queue action", hopper.ErrInvalidFilter)
}

func (d *Dashboard) schedulesList(w http.ResponseWriter, r *http.Request) {
	s, err := d.reads.ListSchedules(r.Context())
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "schedules", "Schedules", s)
}

func (d *Dashboard) scheduleAction(r *http.Request) (string, string, error) {
	name := r.PathValue("name")
	var err error
	switch r.PathValue("action") {
	case "pause":
		_, err = d.client.PauseSchedule(r.Context(), name)
	case "resume":
		_, err = d.client.ResumeSchedule(r.Context(), name)
	case "trigger":
		_, err = d.client.TriggerSchedule(r.Context(), name)
	default:
		err = fmt.Errorf("%w: no such schedule action", hopper.ErrInvalidFilter)
	}
	if err != nil {
		return "", "", err
	}
	return "schedules", "Schedule " + name + ": " + r.PathValue("action") + " done.", nil
}
