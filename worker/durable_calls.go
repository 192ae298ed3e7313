package worker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/hopperq/hopper/db"
)

// What one run of a durable handler holds of the job's records: declared
// here, below the held job that carries it (held_jobs.go); how the records
// are read and written is durable_records.go, the calls themselves
// durable.go and patch.go.

// The kinds of record a durable handler writes (hopper_job_steps.kind).
const (
	recordStep  = "step"
	recordSleep = "sleep"
	recordEvent = "event"
)

// markedDurable reports whether a job's stored metadata carries the mark
// of a job that recorded something ('hopper.durable', set by RecordStep
// and SetProgress). It looks for the key's text: jsonb prints it so, and
// a value that merely contains it costs one read of no records.
func markedDurable(meta json.RawMessage) bool {
	return bytes.Contains(meta, []byte(`"hopper.durable"`))
}

// durableCalls is what one run of a handler has recorded and replayed:
// the job's records, read at its first durable call, and the place of the
// next call. A handler's calls are sequential; the mutex only keeps a
// handler that makes them from several goroutines from corrupting it.
type durableCalls struct {
	mu      sync.Mutex
	loaded  bool
	records []durableRecord // by position, 0 first
	next    int32           // the position of the next call
	suspend *snoozeError    // a wait the run entered

	progressAt      time.Time       // the last progress write
	progressPending json.RawMessage // a value waiting for ProgressEvery to pass
	progressTimer   *time.Timer
}

// durableRecord is one record of the job, with the deadline of a sleep or
// a wait on this process's monotonic clock: the server's remaining time
// (remaining_ms) counted from when it was read. The server's clock is
// the one deadlines are compared with (the wake-up's run_at, an event's
// emit); the worker's wall clock, which may be off, is never used.
type durableRecord struct {
	db.ListStepsRow
	deadline time.Time
}

func readRecord(r db.ListStepsRow, readAt time.Time) durableRecord {
	return durableRecord{ListStepsRow: r, deadline: readAt.Add(time.Duration(r.RemainingMs) * time.Millisecond)}
}

// over reports whether the record's sleep or wait has reached its
// deadline.
func (r *durableRecord) over() bool { return r.Until == nil || !time.Now().Before(r.deadline) }

// afterSuspension refuses a durable call made after a sleep or a wait
// suspended the run (the handler dropped its error and went on): the
// call's position holds that wait's record, and replaying it as another
// call would fail the job as non-deterministic. The error wraps the
// suspension, so the job suspends as it should, whether the handler
// returns this error or nil. Under d.mu.
func (d *durableCalls) afterSuspension(what string) error {
	if d.suspend == nil {
		return nil
	}
	return fmt.Errorf("%s: called after the run was suspended (return the error Sleep or AwaitEvent gave, which wraps ErrSuspended): %w", what, d.suspend)
}

// pendingSuspension is the wait the handler's run entered, or nil.
func (d *durableCalls) pendingSuspension() *snoozeError {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.suspend
}
