package hopper

import (
	"context"
	"fmt"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/schedule"
	"github.com/hopperq/hopper/jobs"
)

// ScheduleInfo is one periodic job (see worker.Schedule), as its row says.
// In JSON its fields are snake_case, as hopper schedules list --json prints
// them.
type ScheduleInfo struct {
	Name string `json:"name"`
	// Kind, Expression, TimeZone, Queue and the missed-slot policy (Policy:
	// skip, once or catch_up; CatchUp slots for catch_up) are the
	// definition in force: the newest one a running worker reports.
	Kind       string `json:"kind"`
	Expression string `json:"expression"`
	TimeZone   string `json:"time_zone"`
	Queue      string `json:"queue"`
	Policy     string `json:"policy"`
	CatchUp    int    `json:"catch_up"`
	// NextFireAt is its next slot; LastFireAt when a worker last fired it,
	// LastSlot the slot it fired then.
	NextFireAt time.Time  `json:"next_fire_at"`
	LastFireAt *time.Time `json:"last_fire_at,omitempty"`
	LastSlot   *time.Time `json:"last_slot,omitempty"`
	// PausedAt is when it was paused (nil: it is active); TriggeredAt a fire an
	// operator asked for that no worker has made yet.
	PausedAt    *time.Time `json:"paused_at,omitempty"`
	TriggeredAt *time.Time `json:"triggered_at,omitempty"`
	// Stale reports that no running worker defines the schedule: none has
	// reported its definition in force (worker.Schedule) within that
	// worker's Config.ScheduleStaleAfter (5m by default; a worker reports
	// every fifth of it, so a stopped worker's schedule turns stale within
	// that time). A stale schedule is kept, but nothing fires it until a
	// worker that defines it starts. Not stale says a worker defines it,
	// not that it fires: see PausedAt. LastReported is when a worker last
	// reported the definition; nil if none ever did.
	Stale        bool       `json:"stale"`
	LastReported *time.Time `json:"last_reported,omitempty"`
}

// ListSchedules lists every schedule, by name.
func (c *Client) ListSchedules(ctx context.Context) ([]ScheduleInfo, error) {
	return c.ListSchedulesTx(ctx, c.db)
}

// ListSchedulesTx is ListSchedules on the caller's transaction.
func (c *Client) ListSchedulesTx(ctx context.Context, tx jobs.DBTX) ([]ScheduleInfo, error) {
	rows, err := c.queries(tx).ListSchedules(ctx)
	if err != nil {
		return nil, fmt.Errorf("schedules: %w", err)
	}
	out := make([]ScheduleInfo, len(rows))
	for i, r := range rows {
		out[i] = ScheduleInfo{
			Name: r.Name, Kind: r.Kind, Expression: r.Expression, TimeZone: r.TimeZone, Queue: r.Queue,
			Policy: r.Policy, CatchUp: int(r.CatchUp), NextFireAt: r.NextFireAt, LastFireAt: r.LastFireAt,
			LastSlot: r.LastSlot, PausedAt: r.PausedAt, TriggeredAt: r.TriggeredAt, Stale: r.Stale, LastReported: r.LastSeenAt,
		}
	}
	return out, nil
}

// PauseSchedule stops every worker from firing a schedule until it is
// resumed (a trigger still fires). Pausing a paused schedule is not an
// error: the result's Changed is false. Errors wrap ErrUnknownSchedule.
func (c *Client) PauseSchedule(ctx context.Context, name string) (PauseResult, error) {
	return c.PauseScheduleTx(ctx, c.db, name)
}

// PauseScheduleTx is PauseSchedule on the caller's transaction.
func (c *Client) PauseScheduleTx(ctx context.Context, tx jobs.DBTX, name string) (PauseResult, error) {
	r, err := c.queries(tx).PauseSchedule(ctx, name)
	if isNoRows(err) {
		return PauseResult{}, fmt.Errorf("pause schedule: %w %q", ErrUnknownSchedule, name)
	}
	if err != nil {
		return PauseResult{}, fmt.Errorf("pause schedule %s: %w", name, err)
	}
	return PauseResult{Changed: !r.WasPaused, PausedAt: r.PausedAt}, nil
}

// ResumeSchedule resumes a paused schedule at its next slot: the slots that
// fell due while it was paused do not fire. Resuming a schedule that is not
// paused is not an error: the result's Changed is false. Errors wrap
// ErrUnknownSchedule.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (PauseResult, error) {
	return c.ResumeScheduleTx(ctx, c.db, name)
}

// ResumeScheduleTx is ResumeSchedule on the caller's transaction.
func (c *Client) ResumeScheduleTx(ctx context.Context, tx jobs.DBTX, name string) (PauseResult, error) {
	row, err := c.queries(tx).GetSchedule(ctx, name)
	if isNoRows(err) {
		return PauseResult{}, fmt.Errorf("resume schedule: %w %q", ErrUnknownSchedule, name)
	}
	if err != nil {
		return PauseResult{}, fmt.Errorf("resume schedule %s: %w", name, err)
	}
	spec, err := schedule.Parse(row.Expression, row.TimeZone)
	if err != nil {
		return PauseResult{}, fmt.Errorf("resume schedule %s: %w", name, err)
	}
	r, err := c.queries(tx).ResumeSchedule(ctx, db.ResumeScheduleParams{Name: name, NextFireAt: spec.Next(time.Now())})
	if isNoRows(err) {
		return PauseResult{}, nil
	}
	if err != nil {
		return PauseResult{}, fmt.Errorf("resume schedule %s: %w", name, err)
	}
	return resumed(r.WasPaused, r.PausedAt), nil
}

// TriggerSchedule asks for one fire of a schedule now, paused or not: a
// worker that defines it enqueues the job at once (its slot is the time of
// the trigger), without moving the schedule on. It returns that time.
// Errors wrap ErrUnknownSchedule.
func (c *Client) TriggerSchedule(ctx context.Context, name string) (time.Time, error) {
	return c.TriggerScheduleTx(ctx, c.db, name)
}

// TriggerScheduleTx is TriggerSchedule on the caller's transaction.
func (c *Client) TriggerScheduleTx(ctx context.Context, tx jobs.DBTX, name string) (time.Time, error) {
	at, err := c.queries(tx).TriggerSchedule(ctx, name)
	if isNoRows(err) {
		return time.Time{}, fmt.Errorf("trigger schedule: %w %q", ErrUnknownSchedule, name)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("trigger schedule %s: %w", name, err)
	}
	return at, nil
}
