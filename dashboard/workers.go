package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hopperq/hopper"
)

// pageError is an error whose text is the sentence its page shows, with
// the status it is answered with; it still matches what it wraps.
type pageError struct {
	status int
	msg    string
	err    error
}

func (e *pageError) Error() string { return e.msg }
func (e *pageError) Unwrap() error { return e.err }

// workersData is the workers page: the registry, live and gone.
type workersData struct {
	Workers []hopper.WorkerInfo
	At      time.Time
}

func (d *Dashboard) workersList(w http.ResponseWriter, r *http.Request) {
	list, err := d.reads.ListWorkers(r.Context())
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "workers", "Workers", workersData{Workers: list, At: time.Now()})
}

// findWorker reads the worker id from the registry.
func (d *Dashboard) findWorker(r *http.Request, id string) (hopper.WorkerInfo, error) {
	list, err := d.client.ListWorkers(r.Context())
	if err != nil {
		return hopper.WorkerInfo{}, err
	}
	for _, w := range list {
		if w.ID == id {
			return w, nil
		}
	}
	return hopper.WorkerInfo{}, unknownWorker(id)
}

func unknownWorker(id string) error {
	return &pageError{http.StatusNotFound, fmt.Sprintf("No worker %q in the registry: it never started, stopped cleanly, "+
		"or was gone so long ago that its row was pruned.", id), hopper.ErrUnknownWorker}
}

// workerRelease is the page before a release: what the worker is and holds
// and, for a live one, what a forced release risks, with its own button.
func (d *Dashboard) workerRelease(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	info, err := d.findWorker(r, id)
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "worker-release", "Release the jobs of worker "+id, info)
}

// releaseWorker hands back every job a worker holds: a gone worker's at
// once, a live one's only when the form says force=yes (the force
// button of the page before), else 409 and nothing released.
func (d *Dashboard) releaseWorker(r *http.Request) (string, string, error) {
	id := r.PathValue("id")
	if id == "" {
		return "", "", fmt.Errorf("%w: no worker id", hopper.ErrInvalidFilter)
	}
	force := r.PostFormValue("force") == "yes"
	res, err := d.client.ReleaseWorkerJobs(r.Context(), id, hopper.ReleaseOptions{Force: force})
	switch {
	case errors.Is(err, hopper.ErrUnknownWorker):
		return "", "", unknownWorker(id)
	case errors.Is(err, hopper.ErrWorkerAlive):
		return "", "", &pageError{http.StatusConflict, fmt.Sprintf("Worker %s is alive: its jobs are its own, and nothing was released. "+
			"Live workers hand its jobs back by themselves once it misses three beats. If you know its process is dead, "+
			"use Force release on the workers page: each of its jobs may then run twice at once.", id), err}
	case err != nil:
		return "", "", err
	}
	n := len(res.Requeued) + len(res.Dead)
	level := d.cfg.Logger.Info
	if force {
		level = d.cfg.Logger.Warn
	}
	level("dashboard: worker's jobs released", "worker", id, "force", force, "requeued", res.Requeued, "dead", res.Dead)
	if n == 0 {
		return "workers", fmt.Sprintf("Worker %s held no jobs: nothing was released.", id), nil
	}
	done := fmt.Sprintf("Worker %s: released %d job(s): %d requeued, %d dead", id, n, len(res.Requeued), len(res.Dead))
	if len(res.Dead) > 0 {
		done += " (that was their last attempt)"
	}
	return "workers", done + ".", nil
}

// ago says how long ago something was, to the second: "4s ago",
// "2m05s ago", "3h07m ago".
func ago(d time.Duration) string {
	d = max(d, 0).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds ago", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm ago", int(d.Hours()), int(d.Minutes())%60)
}
