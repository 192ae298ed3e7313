package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// What a durable handler recorded (worker.Step, Sleep, AwaitEvent,
// SetProgress), on the job's page, and the Wake action that ends its
// wait.

// stepView is one record of a durable job, as the job page's table
// shows it.
type stepView struct {
	Position int
	Kind     hopper.StepKind
	Name     string
	// State is the record's (done, waiting, timed_out), except that a wait
	// whose time has passed says so: a sleep that is over stays "waiting"
	// in its record.
	State  string
	Until  *time.Time // nil for a step
	Result string     // a step's result or an event's payload, cut to maxShownRecord characters
}

// maxShownRecord bounds a record's result on the page, in characters.
const maxShownRecord = 200

// durableData reads what job's handler recorded into data: its records
// and the wait it is in; its progress came with the job (GetJob).
func (d *Dashboard) durableData(r *http.Request, job jobs.Row, data *detailData) error {
	steps, err := d.reads.ListJobSteps(r.Context(), job.ID)
	if err != nil {
		return err
	}
	now := time.Now()
	data.Wait = hopper.SuspensionOf(job.State, steps, now)
	data.Steps = make([]stepView, len(steps))
	for i, s := range steps {
		v := stepView{Position: s.Position, Kind: s.Kind, Name: s.Name, State: string(s.State), Result: clip(shown(s.Result), maxShownRecord)}
		if !s.Until.IsZero() {
			until := s.Until
			v.Until = &until
			if s.State == hopper.StepStateWaiting && !until.After(now) {
				v.State = "deadline passed"
				if s.Kind == hopper.StepKindSleep {
					v.State = "over"
				}
			}
		}
		data.Steps[i] = v
	}
	if p := job.Progress; p != nil {
		data.Progress, data.ProgressAt = string(p.Value), p.UpdatedAt
	}
	return nil
}

// clip folds s onto one line and cuts it to n characters, an ellipsis
// saying so.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// wakeJob ends the durable wait of a job: its sleep is over, or its wait
// for an event times out; it runs at once.
func (d *Dashboard) wakeJob(r *http.Request) (string, string, error) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", hopper.ErrInvalidFilter, err)
	}
	kind, err := d.client.WakeJob(r.Context(), id)
	if errors.Is(err, hopper.ErrNotFound) {
		// WakeJob says "not found" of a job that has ended too: say that
		// it has, as cancel and edit do.
		if row, gerr := d.client.GetJob(r.Context(), id); gerr == nil && !row.State.Live() {
			return "", "", fmt.Errorf("wake job %d: %w: it is %s", id, hopper.ErrFinished, row.State)
		}
	}
	if err != nil {
		return "", "", err
	}
	done := fmt.Sprintf("Job %d woken: its sleep is over; it runs at once.", id)
	if kind == hopper.StepKindEvent {
		done = fmt.Sprintf("Job %d woken: its wait for an event timed out; it runs at once.", id)
	}
	return fmt.Sprintf("jobs/%d", id), done, nil
}
