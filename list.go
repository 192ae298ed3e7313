package hopper

import (
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/rows"
	"github.com/hopperq/hopper/jobs"
)

// GetJob returns the job of that id, wherever it is: live (pending,
// scheduled, running), dead, cancelled, or completed (kept by history).
// Errors wrap ErrNotFound when there is none.
func (c *Client) GetJob(ctx context.Context, id int64) (jobs.Row, error) {
	return c.GetJobTx(ctx, c.db, id)
}

// GetJobTx is GetJob on the caller's transaction.
func (c *Client) GetJobTx(ctx context.Context, tx jobs.DBTX, id int64) (jobs.Row, error) {
	if id < 1 {
		return jobs.Row{}, fmt.Errorf("job %d: %w", id, ErrNotFound)
	}
	r, err := c.queries(tx).FindJob(ctx, id)
	if isNoRows(err) {
		return jobs.Row{}, fmt.Errorf("job %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return jobs.Row{}, fmt.Errorf("job %d: %w", id, err)
	}
	row, err := rows.Any(r)
	if err != nil {
		return jobs.Row{}, fmt.Errorf("job %d: %w", id, err)
	}
	if err := c.withProgress(ctx, tx, &row); err != nil {
		return jobs.Row{}, fmt.Errorf("job %d: %w", id, err)
	}
	return row, nil
}

// ListParams filters and pages ListJobs. Every filter is optional; the
// zero value lists every job, newest first, 50 at a time.
type ListParams struct {
	// Queue and Kind, when set, keep the jobs of that queue or kind.
	Queue string
	Kind  string
	// States keeps the jobs in these states (none: every state). A table
	// none of whose states is asked for is not read at all.
	States []jobs.State
	// UniqueKey keeps the jobs that carry this key: at most one live job,
	// and any number of finished ones.
	UniqueKey string
	// CreatedFrom and CreatedTo keep jobs created in [CreatedFrom,
	// CreatedTo); a zero time leaves that end open.
	CreatedFrom time.Time
	CreatedTo   time.Time
	// Limit is the page size: 1 to MaxListLimit, default DefaultListLimit.
	Limit int
	// After is the Next cursor of the previous page ("" for the first).
	// Pages are keyset pages: a page deep in a million jobs costs what the
	// first one does.
	After string
}

// Page sizes of ListJobs.
const (
	DefaultListLimit = 50
	MaxListLimit     = 1000
)

// JobPage is one page of ListJobs.
type JobPage struct {
	// Jobs, newest (highest id) first.
	Jobs []jobs.Row
	// Next is the cursor of the following page, or "" when this one is the
	// last. Pass it as ListParams.After with the same filters.
	Next string
}

// ListJobs lists jobs of every state (live, dead, cancelled, and
// completed ones where history is kept), newest first, one page at a time.
// Errors wrap ErrInvalidFilter or ErrInvalidCursor for bad parameters.
func (c *Client) ListJobs(ctx context.Context, p ListParams) (JobPage, error) {
	return c.ListJobsTx(ctx, c.db, p)
}

// ListJobsTx is ListJobs on the caller's transaction.
func (c *Client) ListJobsTx(ctx context.Context, tx jobs.DBTX, p ListParams) (JobPage, error) {
	q, err := p.query()
	if err != nil {
		return JobPage{}, fmt.Errorf("list jobs: %w", err)
	}
	// One more than the page: whether it exists says if there is a next.
	q.MaxJobs++
	var found []db.HopperAllJob
	if p.UniqueKey != "" {
		found, err = c.queries(tx).ListJobsByKey(ctx, db.ListJobsByKeyParams{
			UniqueKey: p.UniqueKey, BeforeID: q.BeforeID, States: q.States, Queue: q.Queue, Kind: q.Kind,
			CreatedFrom: q.CreatedFrom, CreatedTo: q.CreatedTo, MaxJobs: q.MaxJobs,
		})
	} else {
		found, err = c.queries(tx).ListJobs(ctx, q)
	}
	if err != nil {
		return JobPage{}, fmt.Errorf("list jobs: %w", err)
	}
	page := JobPage{Jobs: make([]jobs.Row, 0, min(len(found), int(q.MaxJobs)-1))}
	for i, r := range found {
		if i == int(q.MaxJobs)-1 {
			page.Next = encodeCursor(page.Jobs[i-1].ID)
			break
		}
		row, err := rows.Any(r)
		if err != nil {
			return JobPage{}, fmt.Errorf("list jobs: job %d: %w", r.ID, err)
		}
		page.Jobs = append(page.Jobs, row)
	}
	return page, nil
}

// query checks the parameters and turns them into the statement's.
func (p ListParams) query() (db.ListJobsParams, error) {
	q := db.ListJobsParams{BeforeID: math.MaxInt64, States: []string{}, MaxJobs: DefaultListLimit}
	switch {
	case p.Limit < 0 || p.Limit > MaxListLimit:
		return q, fmt.Errorf("%w: limit %d is outside 1 to %d", ErrInvalidFilter, p.Limit, MaxListLimit)
	case p.Limit > 0:
		q.MaxJobs = int32(p.Limit)
	}
	if p.After != "" {
		id, err := decodeCursor(p.After)
		if err != nil {
			return q, err
		}
		q.BeforeID = id
	}
	for _, s := range p.States {
		if _, err := jobs.ParseState(string(s)); err != nil {
			return q, fmt.Errorf("%w: %w", ErrInvalidFilter, err)
		}
		q.States = append(q.States, string(s))
	}
	if !p.CreatedFrom.IsZero() && !p.CreatedTo.IsZero() && !p.CreatedFrom.Before(p.CreatedTo) {
		return q, fmt.Errorf("%w: the time range [%s, %s) is empty", ErrInvalidFilter,
			p.CreatedFrom.Format(time.RFC3339), p.CreatedTo.Format(time.RFC3339))
	}
	q.Queue, q.Kind = optional(p.Queue), optional(p.Kind)
	q.CreatedFrom, q.CreatedTo = optionalTime(p.CreatedFrom), optionalTime(p.CreatedTo)
	return q, nil
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// A cursor names the last job of a page: the next page starts below it.
// It is opaque to callers: "j" and the id, base64url-encoded, so that a
// cursor is not mistaken for a job id.
func encodeCursor(lastID int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("j" + strconv.FormatInt(lastID, 10)))
}

func decodeCursor(cursor string) (int64, error) {
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err == nil {
		digits, ok := strings.CutPrefix(string(raw), "j")
		var id int64
		if id, err = strconv.ParseInt(digits, 10, 64); ok && err == nil && id > 0 {
			return id, nil
		}
	}
	return 0, fmt.Errorf("%w: %q (pass the Next of a page ListJobs returned)", ErrInvalidCursor, cursor)
}
