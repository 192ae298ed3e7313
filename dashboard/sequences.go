package dashboard

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"time"

	"github.com/hopperq/hopper"
)

// sequencesPageSize is how many blocked sequences a page lists.
const sequencesPageSize = 50

// sequencesData is the sequences page: a page of blocked sequences.
type sequencesData struct {
	Sequences []hopper.BlockedSequence
	Next      template.URL // the next page, "" on the last one
	At        time.Time
}

// sequencesList lists the blocked sequences, in key order, a page at a
// time (?after=KEY).
func (d *Dashboard) sequencesList(w http.ResponseWriter, r *http.Request) {
	after := r.URL.Query().Get("after")
	list, err := d.reads.ListBlockedSequences(r.Context(), hopper.SequencePage{After: after, Limit: sequencesPageSize})
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	data := sequencesData{Sequences: list, At: time.Now()}
	if len(list) == sequencesPageSize {
		last := list[len(list)-1].Key
		more, err := d.reads.ListBlockedSequences(r.Context(), hopper.SequencePage{After: last, Limit: 1})
		if err != nil {
			d.failErr(w, r, err)
			return
		}
		if len(more) > 0 {
			// Built here from escaped parts, as the jobs' next page is.
			data.Next = template.URL("sequences?" + url.Values{"after": {last}}.Encode())
		}
	}
	d.render(w, r, http.StatusOK, "sequences", "Blocked sequences", data)
}

// sequenceSkipData is the page before a skip: the block, and how many
// jobs wait behind it.
type sequenceSkipData struct {
	Key     string
	Blocked hopper.BlockedSequence
}

// blockedSequence reads the block of the sequence key, or the page error
// for a sequence that is not blocked.
func (d *Dashboard) blockedSequence(r *http.Request, key, nothing string) (hopper.BlockedSequence, error) {
	info, err := d.client.GetSequence(r.Context(), key)
	if err != nil {
		return hopper.BlockedSequence{}, err
	}
	if info.Blocked == nil {
		return hopper.BlockedSequence{}, notBlocked(key, nothing, hopper.ErrNotBlocked)
	}
	return *info.Blocked, nil
}

func notBlocked(key, nothing string, err error) error {
	return &pageError{http.StatusConflict, fmt.Sprintf("Sequence %s is not blocked: nothing was %s.", key, nothing), err}
}

// sequenceSkip is the page before a skip: which job the sequence passes
// over, and what that means, with its own button.
func (d *Dashboard) sequenceSkip(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	b, err := d.blockedSequence(r, key, "skipped")
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "sequence-skip", "Skip the head of sequence "+key, sequenceSkipData{Key: key, Blocked: b})
}

// retrySequence runs a blocked sequence's head again, first.
func (d *Dashboard) retrySequence(r *http.Request) (string, string, error) {
	key := r.PathValue("key")
	id, err := d.client.RetrySequence(r.Context(), key)
	switch {
	case errors.Is(err, hopper.ErrNotBlocked):
		return "", "", notBlocked(key, "retried", err)
	case errors.Is(err, hopper.ErrNotFound):
		return "", "", &pageError{http.StatusConflict, fmt.Sprintf("The head of sequence %s is no longer in the dead table "+
			"(purged, or retried meanwhile): nothing was retried. Skip it to let the next job run.", key), err}
	case err != nil:
		return "", "", err
	}
	d.cfg.Logger.Info("dashboard: sequence retried", "sequence", key, "job", id)
	return "sequences", fmt.Sprintf("Sequence %s: job %d runs again as its head; the jobs behind it follow once it succeeds.", key, id), nil
}

// skipSequence lifts a sequence's block without running its head again:
// the next job runs.
func (d *Dashboard) skipSequence(r *http.Request) (string, string, error) {
	key := r.PathValue("key")
	b, err := d.blockedSequence(r, key, "skipped")
	if err != nil {
		return "", "", err
	}
	promoted, err := d.client.SkipSequence(r.Context(), key)
	switch {
	case errors.Is(err, hopper.ErrNotBlocked):
		return "", "", notBlocked(key, "skipped", err)
	case err != nil:
		return "", "", err
	}
	d.cfg.Logger.Warn("dashboard: sequence skipped", "sequence", key, "job", b.JobID, "next", promoted)
	if promoted == 0 {
		return "sequences", fmt.Sprintf("Sequence %s: job %d skipped; no job waits behind it.", key, b.JobID), nil
	}
	return "sequences", fmt.Sprintf("Sequence %s: job %d skipped; job %d runs next.", key, b.JobID, promoted), nil
}
