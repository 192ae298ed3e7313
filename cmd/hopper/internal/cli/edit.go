package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"time"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// editFlags are the flags of hopper jobs edit and delete. --queue is the
// listing's flag, read by edit as the queue to move the job to.
type editFlags struct {
	runNow                         bool
	runAt, payload                 string
	priority, maxAttempts, version int
	yes                            bool
}

// editOnly are the flags that only edit and delete take.
var editOnly = []string{"run-now", "run-at", "priority", "max-attempts", "payload", "version", "yes"}

func (f *editFlags) declare(fs *flag.FlagSet) {
	fs.BoolVar(&f.runNow, "run-now", false, "edit: make the job ready now (a scheduled one becomes pending)")
	fs.StringVar(&f.runAt, "run-at", "", "edit: run the job no earlier than this RFC 3339 time (2026-11-22T15:04:05Z), or this long from now (10m); a past time is now")
	fs.IntVar(&f.priority, "priority", 0, "edit: the job's new priority, 0 runs first, 9 last")
	fs.IntVar(&f.maxAttempts, "max-attempts", 0, "edit: the job's new max attempts (more than the attempts it has made)")
	fs.StringVar(&f.payload, "payload", "", `edit: the job's new payload, JSON of the type its payload has (e.g. {"user_id": 7})`)
	fs.IntVar(&f.version, "version", 0, "edit: the new payload's version (default: the job's; never above it)")
	fs.BoolVar(&f.yes, "yes", false, "delete: do not ask for confirmation")
}

// given reports which flags of fs were set on the command line.
func given(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// onlyFlags fails when a flag other than the connection's and allowed was
// given to action.
func onlyFlags(fs *flag.FlagSet, action string, allowed ...string) error {
	ok := map[string]bool{"database-url": true, "schema": true, "sharded": true}
	for _, name := range allowed {
		ok[name] = true
	}
	var extra string
	fs.Visit(func(f *flag.Flag) {
		if !ok[f.Name] && extra == "" {
			extra = f.Name
		}
	})
	if extra != "" {
		return fmt.Errorf("%w: %s does not take --%s", errUsage, action, extra)
	}
	return nil
}

// update turns the flags given to jobs edit into a JobUpdate; queue is
// --queue's value.
func (f *editFlags) update(fs *flag.FlagSet, queue string) (hopper.JobUpdate, error) {
	var u hopper.JobUpdate
	if err := onlyFlags(fs, "edit", "run-now", "run-at", "priority", "max-attempts", "payload", "version", "queue", "json"); err != nil {
		return u, err
	}
	set := given(fs)
	if set["run-now"] && set["run-at"] {
		return u, fmt.Errorf("%w: give --run-now or --run-at, not both", errUsage)
	}
	u.RunNow = f.runNow
	if set["run-at"] {
		t, err := time.Parse(time.RFC3339, f.runAt)
		if err != nil {
			d, derr := parseDuration(f.runAt)
			if derr != nil || d < 0 {
				return u, fmt.Errorf("%w: --run-at wants a time like 2026-11-22T15:04:05Z (RFC 3339) or a duration like 10m, not %q", errUsage, f.runAt)
			}
			t = time.Now().Add(d)
		}
		u.RunAt = &t
	}
	if set["priority"] {
		if f.priority < jobs.MinPriority || f.priority > jobs.MaxPriority {
			return u, fmt.Errorf("%w: --priority %d is outside %d (first) to %d (last)", errUsage, f.priority, jobs.MinPriority, jobs.MaxPriority)
		}
		u.Priority = &f.priority
	}
	if set["queue"] {
		if err := jobs.ValidateQueue(queue); err != nil {
			return u, fmt.Errorf("%w: --queue: %v", errUsage, err)
		}
		u.Queue = &queue
	}
	if set["max-attempts"] {
		if f.maxAttempts < 1 {
			return u, fmt.Errorf("%w: --max-attempts must be 1 or more", errUsage)
		}
		u.MaxAttempts = &f.maxAttempts
	}
	if set["version"] && !set["payload"] {
		return u, fmt.Errorf("%w: --version is the version of --payload: give both", errUsage)
	}
	if set["version"] && (f.version < 1 || f.version > math.MaxInt32) {
		return u, fmt.Errorf("%w: --version must be 1 or more", errUsage)
	}
	if set["payload"] {
		if !json.Valid([]byte(f.payload)) {
			return u, fmt.Errorf("%w: --payload is not valid JSON", errUsage)
		}
		u.Payload = hopper.RawPayload(json.RawMessage(f.payload), f.version)
	}
	if !u.RunNow && u.RunAt == nil && u.Priority == nil && u.Queue == nil && u.MaxAttempts == nil && u.Payload == nil {
		return u, fmt.Errorf("%w: say what to change: --run-now, --run-at, --priority, --queue, --max-attempts or --payload", errUsage)
	}
	return u, nil
}

// editJob is hopper jobs edit: it changes a pending or scheduled job and
// prints it as changed.
func editJob(e *env, client jobsAPI, id int64, u hopper.JobUpdate, asJSON bool) error {
	row, err := client.UpdateJob(e.ctx, id, u)
	if err != nil {
		return editError(id, err)
	}
	if asJSON {
		return json.NewEncoder(e.stdout).Encode(row)
	}
	fmt.Fprintf(e.stdout, "updated job %d\n", id)
	printJob(e.stdout, row, nil)
	return nil
}

// deleteJob is hopper jobs delete: it deletes a pending or scheduled job
// for good, after asking (unless yes), and prints what it deleted.
func deleteJob(e *env, client jobsAPI, id int64, yes, asJSON bool) error {
	if !yes {
		row, err := client.GetJob(e.ctx, id)
		if err != nil {
			return editError(id, err)
		}
		switch {
		case row.State == jobs.StateRunning:
			return editError(id, hopper.ErrRunning)
		case !row.State.Live():
			return fmt.Errorf("delete job %d: %w: it is %s", id, hopper.ErrFinished, row.State)
		}
		question := fmt.Sprintf("Delete job %d (%s, kind %s, queue %s) for good, without a trace? [y/N] ", id, row.State, row.Kind, row.Queue)
		if err := confirm(e, question, "deleted", false); err != nil {
			return err
		}
	}
	row, err := client.DeleteJob(e.ctx, id)
	if err != nil {
		return editError(id, err)
	}
	if asJSON {
		return json.NewEncoder(e.stdout).Encode(row)
	}
	fmt.Fprintf(e.stdout, "deleted job %d (it was %s; payload %s)\n", id, row.State, row.Payload)
	return nil
}

// editError says why a job could not be edited or deleted.
func editError(id int64, err error) error {
	switch {
	case errors.Is(err, hopper.ErrNotFound):
		return fmt.Errorf("no job %d (never enqueued, or completed without history, or purged)", id)
	case errors.Is(err, hopper.ErrRunning):
		return fmt.Errorf("job %d is running: only pending, scheduled and waiting jobs can be changed (hopper jobs cancel %d stops it)", id, id)
	case errors.Is(err, hopper.ErrHasRecords):
		return fmt.Errorf("job %d has durable records made for its payload: its payload can no longer change; its run time, priority, queue and attempts can "+
			"(hopper jobs cancel %d, then enqueue anew, starts over)", id, id)
	}
	return err
}
